import type { RunnerDefinition } from '../../src/runner.js';
import { CodeRunner } from './runner.js';

/** Code mode: code.run, a program in the JS sandbox that calls other tools, each through the dispatcher. */
export const codeRunner: RunnerDefinition = {
  name: 'code',
  summary: 'code.run: a TypeScript or JavaScript program in the JS sandbox that calls other tools through `tools`',
  extensions: [],
  permission: null,
  definable: false,
  create: () => new CodeRunner(),
};
