import { createHash, randomUUID } from 'node:crypto';
import type { CallOptions } from '../dispatcher.js';
import type { Engine } from '../engine.js';
import { ToolFailure } from '../errors.js';
import type { ToolResult } from '../result.js';
import type { ToolInfo } from '../tool.js';
import { mcpTool } from './mcp/tool-shape.js';

/**
 * A project's tools in the tool schemas of function-calling APIs, and the way back from a model's tool
 * call to `engine.call`. OpenAI and Anthropic want names of `[a-zA-Z0-9_-]{1,64}`, so ids are mapped
 * (`.` → `__`, too long → cut with a hash) and the map, not a string rule, turns names back into ids.
 */

export type Vendor = 'openai' | 'anthropic' | 'mcp';
export const VENDORS: readonly Vendor[] = ['openai', 'anthropic', 'mcp'];

export interface ExportOptions {
  /**
   * OpenAI strict mode (`strict: true`): every object closed (`additionalProperties: false`), every
   * property required, the ones that were optional made nullable (a `null` from the model is dropped
   * again by `resolveCall`, so the tool's defaults apply). A tool whose schema uses a keyword strict
   * mode does not take is exported without `strict`, and a problem says which keyword.
   */
  strict?: boolean;
}

export interface ExportedTools {
  vendor: Vendor;
  /** The tools in the vendor's format, in the engine's order. */
  tools: unknown[];
  /** Vendor name → tool id, for every exported tool. */
  names: Record<string, string>;
  /** Tools left out or changed, and why (a name clash after mapping; a schema strict mode cannot take). */
  problems: Array<{ tool: string; message: string }>;
  /** For strict exports: per vendor name, the properties made nullable (dropped again when null). */
  nullable?: Record<string, string[][]>;
}

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** An id as a vendor name: `.` → `__`; over 64 characters, cut and suffixed with a hash of the id. */
export function vendorName(id: string): string {
  const name = id.replace(/\./g, '__');
  if (name.length <= 64) return name;
  return `${name.slice(0, 55)}_${createHash('sha256').update(id).digest('hex').slice(0, 8)}`;
}

export function exportTools(tools: readonly ToolInfo[], vendor: Vendor, options: ExportOptions = {}): ExportedTools {
  if (!VENDORS.includes(vendor)) throw new TypeError(`Unknown vendor "${vendor}"; one of ${VENDORS.join(', ')}`);
  const out: ExportedTools = { vendor, tools: [], names: {}, problems: [] };
  if (vendor === 'mcp') {
    for (const tool of tools) {
      out.tools.push(mcpTool(tool));
      out.names[tool.id] = tool.id;
    }
    return out;
  }
  // Names first: a clash leaves out every tool that would take the name, naming the others.
  const byName = new Map<string, ToolInfo[]>();
  for (const tool of tools) {
    const name = vendorName(tool.id);
    byName.set(name, [...(byName.get(name) ?? []), tool]);
  }
  if (options.strict && vendor === 'openai') out.nullable = {};
  for (const tool of tools) {
    const name = vendorName(tool.id);
    const clash = byName.get(name) as ToolInfo[];
    if (clash.length > 1) {
      const others = clash.filter((t) => t !== tool).map((t) => `"${t.id}"`);
      out.problems.push({
        tool: tool.id,
        message: `its name "${name}" is also the name of ${others.join(', ')} once dots become "__": rename one of them`,
      });
      continue;
    }
    if (!NAME.test(name)) {
      out.problems.push({ tool: tool.id, message: `"${name}" is not a name ${vendor} accepts ([a-zA-Z0-9_-]{1,64})` });
      continue;
    }
    out.names[name] = tool.id;
    const description = tool.description;
    if (vendor === 'anthropic') {
      out.tools.push({ name, description, input_schema: tool.schema });
      continue;
    }
    const fn: Record<string, unknown> = { name, description, parameters: tool.schema };
    if (options.strict) {
      const strict = strictSchema(tool.schema);
      if ('problem' in strict) {
        out.problems.push({ tool: tool.id, message: `exported without strict: ${strict.problem}` });
      } else {
        fn.parameters = strict.schema;
        fn.strict = true;
        if (strict.nullable.length > 0) (out.nullable as Record<string, string[][]>)[name] = strict.nullable;
      }
    }
    out.tools.push({ type: 'function', function: fn });
  }
  return out;
}

/** Keywords OpenAI's strict mode takes (its structured-outputs subset); any other one makes a schema non-strict. */
const STRICT_KEYWORDS = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'enum',
  'const',
  'anyOf',
  'description',
  'title',
  '$defs',
  '$ref',
  'pattern',
  'format',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
  '$schema',
]);

type StrictOutcome = { schema: Record<string, unknown>; nullable: string[][] } | { problem: string };

/** The schema as strict mode wants it, and the paths of the properties made nullable. */
export function strictSchema(schema: unknown): StrictOutcome {
  const nullable: string[][] = [];
  const walk = (node: unknown, path: string[], at: string): unknown => {
    if (node === true || node === false || node === null || typeof node !== 'object' || Array.isArray(node)) {
      if (node === true) throw new StrictError(`${at || '/'} accepts anything, which strict mode cannot say`);
      return node;
    }
    const copy: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(node as Record<string, unknown>)) {
      if (key === 'default' || key === 'examples') continue; // not taken; the engine applies defaults itself
      if (!STRICT_KEYWORDS.has(key)) throw new StrictError(`${at || '/'} uses "${key}", which strict mode does not take`);
      copy[key] = value;
    }
    if (copy.type === 'object' || copy.properties !== undefined) {
      const properties = (copy.properties ?? {}) as Record<string, unknown>;
      if (copy.additionalProperties !== undefined && copy.additionalProperties !== false) {
        throw new StrictError(`${at || '/'} allows additional properties, which strict mode does not`);
      }
      const required = new Set((copy.required as string[] | undefined) ?? []);
      const out: Record<string, unknown> = {};
      for (const [name, sub] of Object.entries(properties)) {
        let converted = walk(sub, [...path, name], `${at}/properties/${name}`) as Record<string, unknown>;
        if (!required.has(name)) {
          converted = makeNullable(converted);
          nullable.push([...path, name]);
        }
        out[name] = converted;
      }
      copy.properties = out;
      copy.required = Object.keys(out);
      copy.additionalProperties = false;
    }
    if (copy.items !== undefined) copy.items = walk(copy.items, path, `${at}/items`);
    if (Array.isArray(copy.anyOf)) copy.anyOf = copy.anyOf.map((s, i) => walk(s, path, `${at}/anyOf/${i}`));
    if (copy.$defs && typeof copy.$defs === 'object') {
      copy.$defs = Object.fromEntries(Object.entries(copy.$defs as Record<string, unknown>).map(([k, v]) => [k, walk(v, [], `${at}/$defs/${k}`)]));
    }
    return copy;
  };
  try {
    return { schema: walk(schema, [], '') as Record<string, unknown>, nullable };
  } catch (error) {
    if (error instanceof StrictError) return { problem: error.message };
    throw error;
  }
}

class StrictError extends Error {}

function makeNullable(schema: Record<string, unknown>): Record<string, unknown> {
  const type = schema.type;
  if (typeof type === 'string') return { ...schema, type: [type, 'null'] };
  if (Array.isArray(type)) return type.includes('null') ? schema : { ...schema, type: [...type, 'null'] };
  return { anyOf: [schema, { type: 'null' }] };
}

/**
 * A model's tool call as `{ id, input }`: `name` looked up in the export's map, `args` parsed when it
 * is JSON text (OpenAI sends a string), nulls of properties strict mode made nullable dropped.
 * Throws a ToolFailure (`UNKNOWN_TOOL`, `INVALID_INPUT`) the caller can hand back to the model.
 */
export function resolveCall(exported: ExportedTools, name: string, args: unknown): { id: string; input: Record<string, unknown> } {
  // Own keys only: a name such as "constructor" must not reach Object.prototype.
  const id = typeof name === 'string' && Object.hasOwn(exported.names, name) ? exported.names[name] : undefined;
  if (!id) {
    throw new ToolFailure('validation', 'UNKNOWN_TOOL', `The model called "${String(name)}", which is not one of the exported tools`, {
      details: { name: String(name).slice(0, 200) },
    });
  }
  let input: unknown = args ?? {};
  if (typeof input === 'string') {
    try {
      input = input.trim() === '' ? {} : JSON.parse(input);
    } catch (error) {
      const position = /position (\d+)/.exec((error as Error).message);
      throw new ToolFailure('validation', 'INVALID_INPUT', `The arguments of the call to "${name}" are not valid JSON: ${(error as Error).message}`, {
        details: { tool: id, ...(position ? { position: Number(position[1]) } : {}) },
      });
    }
  }
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new ToolFailure('validation', 'INVALID_INPUT', `The arguments of the call to "${name}" must be a JSON object`, { details: { tool: id } });
  }
  for (const path of exported.nullable?.[name] ?? []) dropNull(input as Record<string, unknown>, path);
  return { id, input: input as Record<string, unknown> };
}

function dropNull(input: Record<string, unknown>, path: string[]): void {
  let node: unknown = input;
  for (const key of path.slice(0, -1)) {
    if (node === null || typeof node !== 'object') return;
    node = (node as Record<string, unknown>)[key];
  }
  const last = path[path.length - 1] as string;
  if (node !== null && typeof node === 'object' && (node as Record<string, unknown>)[last] === null) delete (node as Record<string, unknown>)[last];
}

/**
 * `resolveCall`, then `engine.call`. A call that cannot be resolved (unknown name, arguments that are
 * not JSON) is a failed result like any other, for the model to read; it never reached the engine.
 */
export async function callExported(
  engine: Engine,
  exported: ExportedTools,
  name: string,
  args: unknown,
  options: CallOptions = {},
): Promise<ToolResult> {
  let resolved: { id: string; input: Record<string, unknown> };
  try {
    resolved = resolveCall(exported, name, args);
  } catch (error) {
    if (!(error instanceof ToolFailure)) throw error;
    const runId = randomUUID();
    return {
      ok: false,
      error: {
        type: 'ToolError',
        tool: String(name).slice(0, 200),
        stage: error.stage,
        code: error.code,
        message: error.message,
        retryable: false,
        ...(error.details ? { details: error.details } : {}),
      },
      meta: { tool: String(name).slice(0, 200), run_id: runId, trace_id: options.trace_id ?? runId, duration_ms: 0 },
    };
  }
  return engine.call(resolved.id, resolved.input, options);
}
