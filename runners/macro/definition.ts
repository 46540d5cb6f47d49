import type { RunnerDefinition } from '../../src/runner.js';
import { linkMacro } from './link.js';
import { MacroRunner } from './runner.js';

/** Macros: deterministic chains of other tools of the project, in one transaction. */
export const macroRunner: RunnerDefinition = {
  name: 'macro',
  summary: 'macros: chains of other tools ("steps" with JSON-pointer templates), run in one transaction',
  extensions: [],
  permission: null,
  composite: true,
  link: linkMacro,
  create: () => new MacroRunner(),
};
