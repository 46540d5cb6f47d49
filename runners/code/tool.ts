import { createHash } from 'node:crypto';
import { CODE_MODE_LIMITS } from '../../src/limits.js';
import { parsePermission } from '../../src/permissions.js';
import type { Tool, ToolSpec } from '../../src/tool.js';
import { lazyValidator } from '../../src/validation.js';

const SPEC: ToolSpec = {
  id: 'code.run',
  name: 'Run a program that calls tools',
  description:
    'Runs the body of an async TypeScript or JavaScript function in which every tool you may call is an async function on `tools` ' +
    '(tool id parts become properties, "-x" becomes "X": `await tools.fs.read({ path: "/a.txt" })`, `await tools.demo.wordFreq({ text })`). ' +
    "Each call returns the tool's output; a failed call throws an Error with `code`, `stage`, `retryable` and `message`. " +
    '`return` the result (JSON). No imports, network or Node APIs. With `atomic: true` the VFS changes of all calls land together or not at all.',
  runner: 'code',
  schema: {
    type: 'object',
    properties: {
      code: {
        type: 'string',
        minLength: 1,
        maxLength: CODE_MODE_LIMITS.max_code_chars,
        description: 'The body of an async function of `tools`, e.g. const a = await tools.fs.read({ path: "/a.txt" }); return a.content.length;',
      },
      atomic: {
        type: 'boolean',
        default: false,
        description: 'Commit the VFS changes of all the calls together at the end, or none if the program fails',
      },
    },
    required: ['code'],
    additionalProperties: false,
  },
  // A program is JavaScript run in the JS sandbox; each tool it calls is checked on its own.
  permissions: ['exec.js'],
  examples: [{ code: 'const { entries } = await tools.fs.list({ path: "/" });\nreturn entries.length;' }],
};

/** The code.run tool: its definition, as the code runner brings it (no definition file). */
export const CODE_RUN_TOOL: Tool = Object.freeze({
  spec: Object.freeze(SPEC),
  source: 'builtin',
  entryPath: null,
  toolsDir: null,
  declared: Object.freeze(SPEC.permissions.map(parsePermission)),
  validateInput: lazyValidator(SPEC.schema, { defaults: true }),
  validateOutput: null,
  hash: createHash('sha256').update(JSON.stringify(SPEC)).digest('hex'),
});
