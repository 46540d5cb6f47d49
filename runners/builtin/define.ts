import { createHash } from 'node:crypto';
import { parsePermission } from '../../src/permissions.js';
import type { RunContext } from '../../src/runner.js';
import type { Tool, ToolSpec } from '../../src/tool.js';
import { compileSchema, lazyValidator } from '../../src/validation.js';
import type { ExecService } from './exec/service.js';

/** What the builtin runner holds for its tools beyond the call: system.exec's settings and mirror. */
export interface BuiltinHost {
  exec: ExecService;
}

/** A builtin tool: its definition and the function that runs it in-process. */
export interface Builtin {
  tool: Tool;
  handler: (input: Record<string, unknown>, ctx: RunContext, host: BuiltinHost) => unknown;
  /**
   * The handler returns a promise (it waits for a process): the call goes through the runner's `run`,
   * under the call's deadline, instead of running synchronously up to its commit.
   */
  async?: boolean;
}

type BuiltinSpec = Omit<ToolSpec, 'runner' | 'entry'>;

export function defineBuiltin(spec: BuiltinSpec, handler: Builtin['handler'], options: { async?: boolean } = {}): Builtin {
  const full: ToolSpec = { ...spec, runner: 'builtin' };
  const tool: Tool = Object.freeze({
    spec: Object.freeze(full),
    source: 'builtin',
    entryPath: null,
    toolsDir: null,
    declared: Object.freeze(full.permissions.map(parsePermission)),
    validateInput: lazyValidator(full.schema, { defaults: true }),
    validateOutput: full.output_schema ? compileSchema(full.output_schema) : null,
    hash: createHash('sha256').update(JSON.stringify(full)).digest('hex'),
  });
  return options.async ? { tool, handler, async: true } : { tool, handler };
}

/** Shorthand for the object schemas of builtin inputs: closed, with the listed required keys. */
export function objectSchema(properties: Record<string, unknown>, required: string[] = []): Record<string, unknown> {
  return { type: 'object', properties, required, additionalProperties: false };
}

export const PATH = { type: 'string', minLength: 1, maxLength: 4096, description: 'VFS path, e.g. /docs/a.txt' };
