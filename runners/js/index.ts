// The JS runner: what the composition root (src/engine.ts) needs to register it.
export type { JsRunnerOptions } from './js-runner.js';
export { JsRunner } from './js-runner.js';
