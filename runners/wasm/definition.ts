import type { RunnerDefinition } from '../../src/runner.js';
import { poolCheck, sandboxPoolOptions } from '../shared/pool.js';
import { WASM_TOOL_FIELDS } from './setup.js';
import { WASM_TEMPLATES } from './templates.js';
import { WasmRunner } from './wasm-runner.js';

/** WebAssembly tools (WASI preview 1 commands), each call in an isolated-vm isolate inside a sandbox process. */
export const wasmRunner: RunnerDefinition = {
  name: 'wasm-runner',
  summary: 'WebAssembly (WASI preview 1) tools in isolated-vm isolates, inside a sandbox process',
  extensions: ['.wasm'],
  permission: 'exec.wasm',
  grantedByDefault: true,
  remote: true,
  // argv and environment, from the definition only (setup.ts).
  toolFields: WASM_TOOL_FIELDS,
  // isolated-vm itself is checked by the JS runner's probe (the same package); this one says how its pool is sized.
  probe: async ({ config }) => [poolCheck('wasm pool', sandboxPoolOptions(config, 'wasm'), 'sandbox process', '', true)],
  templates: WASM_TEMPLATES,
  // Nothing native loads here: isolated-vm lives in the sandbox process, started on first use.
  create: ({ config }) => new WasmRunner(sandboxPoolOptions(config, 'wasm')),
};
