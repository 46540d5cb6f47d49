// The runners an engine has unless told otherwise. Adding a runner to the package is one folder under
// runners/ with its RunnerDefinition, and one line here.

import { ENGINE_CONFIG_KEYS } from '../src/config.js';
import type { RunnerDefinition } from '../src/runner.js';
import { RunnerCatalog } from '../src/runner-catalog.js';
import { builtinRunner } from './builtin/definition.js';
import { codeRunner } from './code/definition.js';
import { jsRunner } from './js/definition.js';
import { macroRunner } from './macro/definition.js';
import { pyRunner } from './python/definition.js';
import { wasmRunner } from './wasm/definition.js';

export const DEFAULT_RUNNERS: readonly RunnerDefinition[] = Object.freeze([builtinRunner, jsRunner, pyRunner, macroRunner, codeRunner, wasmRunner]);

/** A catalog of the default runners and `extra` (which replace a default of the same name). */
export function runnerCatalog(extra: readonly RunnerDefinition[] = []): RunnerCatalog {
  return new RunnerCatalog([...DEFAULT_RUNNERS, ...extra], ENGINE_CONFIG_KEYS);
}

export const DEFAULT_CATALOG: RunnerCatalog = runnerCatalog();
