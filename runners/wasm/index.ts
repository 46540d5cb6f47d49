// The wasm runner: what the composition root needs to register it.
export { wasmRunner } from './definition.js';
export { WASM_DEFINITION_LIMITS, type WasmSetup, wasmSetup } from './setup.js';
export type { WasmRunnerOptions } from './wasm-runner.js';
export { WasmRunner } from './wasm-runner.js';
