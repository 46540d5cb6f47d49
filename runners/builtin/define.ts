import { createHash } from 'node:crypto';
import { parsePermission } from '../../src/permissions.js';
import type { RunContext } from '../../src/runner.js';
import type { Tool, ToolSpec } from '../../src/tool.js';
import { compileSchema, lazyValidator } from '../../src/validation.js';
import type { BuiltinHost } from './host.js';

/** A builtin tool: its definition and the function that runs it in-process. */
export interface Builtin {
  tool: Tool;
  /** `host`: what the runner keeps for its builtins between calls (the shell's worker threads, system.exec's mirror). */
  handler: (input: Record<string, unknown>, ctx: RunContext, host: BuiltinHost) => unknown;
  /**
   * True for a builtin that waits (its handler returns a Promise): it runs on the executor's
   * asynchronous path, under the call's deadline with a live `ctx.signal`. The others run synchronously.
   */
  async: boolean;
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
  return { tool, handler, async: options.async === true };
}

/** Shorthand for the object schemas of builtin inputs: closed, with the listed required keys. */
export function objectSchema(properties: Record<string, unknown>, required: string[] = []): Record<string, unknown> {
  return { type: 'object', properties, required, additionalProperties: false };
}

export const PATH = { type: 'string', minLength: 1, maxLength: 4096, description: 'VFS path, e.g. /docs/a.txt' };
