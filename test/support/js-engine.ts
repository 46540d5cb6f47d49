import { fileURLToPath } from 'node:url';
import { createEngine, type Engine, type EngineOptions, type ToolResult } from '../../src/index.js';
import { engineOptions, track } from './target.js';

/** The JS runner's fixture workspace: `project` holds well-behaved tools, `hostile` the attacks. */
export const JS_FIXTURES = fileURLToPath(new URL('../../fixtures/js/', import.meta.url));

/** An engine over a fixture project, in memory (nothing is written to the fixtures); its JS tools run on a worker when the suite does. */
export function jsEngine(project: 'project' | 'hostile', options: EngineOptions = {}): Promise<Engine> {
  return createEngine({ workspace: JS_FIXTURES, project, watch: false, persist: false, ...engineOptions('js-runner'), ...options }).then(track);
}

/** The data of a successful result; fails the test with the error otherwise. */
export function dataOf<T = Record<string, unknown>>(result: ToolResult): T {
  if (!result.ok) throw new Error(`expected success, got ${result.error.code}: ${result.error.message}`);
  return result.data as T;
}

/** The error of a failed result; fails the test when the call succeeded. */
export function errorOf(result: ToolResult) {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data).slice(0, 300)}`);
  return result.error;
}
