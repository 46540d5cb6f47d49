// The Python runner: what the composition root (src/engine.ts) needs to register it.
export type { IsolationMode } from './isolation.js';
export type { PythonRunnerOptions } from './python-runner.js';
export { PythonRunner } from './python-runner.js';
