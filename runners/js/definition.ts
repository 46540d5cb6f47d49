import type { RunnerDefinition } from '../../src/runner.js';
import { poolCheck, sandboxPoolOptions } from '../shared/pool.js';
import { JsRunner } from './js-runner.js';
import { checkIsolatedVm } from './probe.js';

/** JavaScript and TypeScript tools, each call in a fresh isolated-vm context inside a sandbox process. */
export const jsRunner: RunnerDefinition = {
  name: 'js-runner',
  summary: 'JavaScript and TypeScript tools in isolated-vm isolates, inside a sandbox process',
  extensions: ['.js', '.mjs', '.ts', '.mts'],
  permission: 'exec.js',
  grantedByDefault: true,
  remote: true,
  toolFields: {
    context: {
      enum: ['fresh', 'persistent'],
      description:
        '"fresh" (the default): every call runs in a new context. "persistent": the tool\'s context is kept between its calls, so its modules\' top-level state survives like a notebook kernel\'s (one context per tool per sandbox process, calls one at a time; reset after a failed call, on memory pressure and when the tool changes)',
    },
  },
  probe: async ({ config }) => [await checkIsolatedVm(), poolCheck('js pool', sandboxPoolOptions(config, 'js'), 'sandbox process', '', true)],
  example: {
    'text-upper.json': {
      id: 'text.upper',
      name: 'Upper-case text',
      description: 'Returns the text in upper case (a JavaScript tool)',
      runner: 'js-runner',
      entry: 'upper.js',
      schema: { type: 'object', properties: { text: { type: 'string', maxLength: 100000 } }, required: ['text'], additionalProperties: false },
      output_schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      permissions: ['exec.js'],
      limits: { timeout_ms: 2000 },
      examples: [{ text: 'hello, arium' }],
    },
    'upper.js': `// A JavaScript tool: runs in an isolated-vm isolate, with no Node APIs; input and output are copies.
export default function run(input) {
  return { text: input.text.toUpperCase() };
}
`,
  },
  // Nothing native loads here: isolated-vm lives in the sandbox process, started on first use.
  create: ({ config }) => new JsRunner(sandboxPoolOptions(config, 'js')),
};
