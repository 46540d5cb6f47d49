import { createHash, randomUUID } from 'node:crypto';
import type { CallOptions } from '../dispatcher.js';
import type { Engine } from '../engine.js';
import { ToolFailure } from '../errors.js';
import type { RegistryProblem } from '../events.js';
import type { ToolResult } from '../result.js';
import type { ToolInfo } from '../tool.js';
import { type Discovery, listedFilter } from './mcp/profile.js';
import { mcpListing } from './mcp/tool-shape.js';
import { describeBreak, type PublishedSchema, publishSchema } from './publish-schema.js';
import { TOOL_NAME } from './vendor-rules.js';

/**
 * A project's tools in the tool schemas of function-calling APIs, and the way back from a model's tool
 * call to `engine.call`. The APIs want names of `[a-zA-Z0-9_-]{1,64}` (Gemini also dots and colons, and
 * a letter or `_` first), so ids are mapped (`.` → `__`, too long → cut with a hash) and the map, not a
 * string rule, turns names back into ids. Schemas go out in the shape each API takes
 * (src/surfaces/publish-schema.ts); a tool an API cannot take is left out and reported, since one
 * refused tool makes the API refuse the whole request.
 */

export type Vendor = 'openai' | 'anthropic' | 'gemini' | 'mcp';
export const VENDORS: readonly Vendor[] = ['openai', 'anthropic', 'gemini', 'mcp'];

export interface ExportOptions {
  /**
   * OpenAI strict mode (`strict: true`): every object closed (`additionalProperties: false`), every
   * property required, the ones that were optional made nullable (a `null` from the model is dropped
   * again by `resolveCall`, so the tool's defaults apply). A tool whose schema strict mode cannot take
   * even rewritten is exported without `strict`, and a problem says why.
   */
  strict?: boolean;
  /**
   * `all` (default): every tool given. `search`: only the discovery tools among them (tools.search,
   * tools.describe, tools.call, and code.run where the engine has it; src/surfaces/mcp/profile.ts), so a
   * model is sent four definitions and finds the others by searching; `callExported` with the same
   * export then calls those through tools.call.
   */
  discovery?: Discovery;
}

export interface ExportedTools {
  vendor: Vendor;
  /**
   * The tools in the vendor's format, in the engine's order. Gemini: function declarations, to be sent
   * as `tools: [{ functionDeclarations: exported.tools }]`.
   */
  tools: unknown[];
  /** Vendor name → tool id, for every exported tool. */
  names: Record<string, string>;
  /** Tools left out or exported without strict, and why (a name clash after mapping; a schema the vendor refuses). */
  problems: Array<{ tool: string; message: string }>;
  /** Schemas published in another shape than the tool's own, and how (the engine still checks the tool's own). */
  rewrites: Array<{ tool: string; message: string }>;
  /** For strict exports: per vendor name, the properties made nullable (dropped again when null; `*`: each item of an array). */
  nullable?: Record<string, string[][]>;
}

const VENDOR_LABEL: Record<Vendor, string> = { openai: 'OpenAI', anthropic: 'Anthropic', gemini: 'Gemini', mcp: 'MCP' };

/** An id as a vendor name: `.` → `__`; over 64 characters, cut and suffixed with a hash of the id. */
export function vendorName(id: string): string {
  const name = id.replace(/\./g, '__');
  if (name.length <= 64) return name;
  return `${name.slice(0, 55)}_${createHash('sha256').update(id).digest('hex').slice(0, 8)}`;
}

export function exportTools(given: readonly ToolInfo[], vendor: Vendor, options: ExportOptions = {}): ExportedTools {
  if (!VENDORS.includes(vendor)) throw new TypeError(`Unknown vendor "${vendor}"; one of ${VENDORS.join(', ')}`);
  const listed = listedFilter({ discovery: options.discovery ?? 'all' });
  const tools = given.filter((tool) => listed(tool.id));
  const out: ExportedTools = { vendor, tools: [], names: {}, problems: [], rewrites: [] };
  const problem = (tool: string, message: string) => out.problems.push({ tool, message });
  const rewrote = (tool: string, published: PublishedSchema) => {
    for (const message of published.rewrites) out.rewrites.push({ tool, message });
  };
  if (vendor === 'mcp') {
    for (const tool of tools) {
      const listing = mcpListing(tool);
      if (!listing.tool) {
        for (const b of listing.problems) problem(tool.id, `left out: ${describeBreak(b)}`);
        continue;
      }
      for (const message of listing.rewrites) out.rewrites.push({ tool: tool.id, message });
      out.tools.push(listing.tool);
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
  const strict = options.strict === true && vendor === 'openai';
  if (strict) out.nullable = {};
  for (const tool of tools) {
    const name = vendorName(tool.id);
    const clash = byName.get(name) as ToolInfo[];
    if (clash.length > 1) {
      const others = clash.filter((t) => t !== tool).map((t) => `"${t.id}"`);
      problem(tool.id, `its name "${name}" is also the name of ${others.join(', ')} once dots become "__": rename one of them`);
      continue;
    }
    if (!TOOL_NAME[vendor].test(name)) {
      problem(tool.id, `"${name}" is not a name ${VENDOR_LABEL[vendor]} accepts (${TOOL_NAME[vendor].source})`);
      continue;
    }
    let published = publishSchema(tool.schema, strict ? 'openai-strict' : vendor);
    let isStrict = strict;
    if (strict && published.problems.length > 0) {
      problem(tool.id, `exported without strict: ${published.problems.map(describeBreak).join('; ')}`);
      published = publishSchema(tool.schema, 'openai');
      isStrict = false;
    }
    if (published.problems.length > 0) {
      problem(
        tool.id,
        `left out, ${VENDOR_LABEL[vendor]} would refuse every request that lists it: ${published.problems.map(describeBreak).join('; ')}`,
      );
      continue;
    }
    rewrote(tool.id, published);
    out.names[name] = tool.id;
    const description = tool.description;
    if (vendor === 'anthropic') {
      out.tools.push({ name, description, input_schema: published.schema });
    } else if (vendor === 'gemini') {
      out.tools.push(published.schema ? { name, description, parameters: published.schema } : { name, description });
    } else {
      const fn: Record<string, unknown> = { name, description, parameters: published.schema };
      if (isStrict) {
        fn.strict = true;
        if (published.nullable.length > 0) (out.nullable as Record<string, string[][]>)[name] = published.nullable;
      }
      out.tools.push({ type: 'function', function: fn });
    }
  }
  return out;
}

/**
 * What keeps a tool out of the function-calling exports and MCP's tools/list, per vendor, as problems
 * of its definition file: the tool still loads and runs, but a model reached through that vendor does
 * not see it. OpenAI strict mode is left out: a tool it cannot take is exported without strict.
 */
export function publishProblems(tool: ToolInfo): RegistryProblem[] {
  const out: RegistryProblem[] = [];
  for (const vendor of VENDORS) {
    const breaks = vendor === 'mcp' ? mcpListing(tool).problems : publishSchema(tool.schema, vendor).problems;
    for (const b of breaks) {
      out.push({
        file: tool.source,
        id: tool.id,
        at: `/schema${b.pointer === '/' ? '' : b.pointer}`,
        vendor,
        message: `not published to ${VENDOR_LABEL[vendor]}: ${b.message}`,
      });
    }
    if (vendor !== 'mcp' && !TOOL_NAME[vendor].test(vendorName(tool.id))) {
      out.push({
        file: tool.source,
        id: tool.id,
        at: '/id',
        vendor,
        message: `not published to ${VENDOR_LABEL[vendor]}: "${vendorName(tool.id)}" is not a tool name it takes (${TOOL_NAME[vendor].source})`,
      });
    }
  }
  return out;
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
  for (const path of (exported.nullable && Object.hasOwn(exported.nullable, name) ? exported.nullable[name] : undefined) ?? []) dropNull(input, path);
  return { id, input: input as Record<string, unknown> };
}

function dropNull(node: unknown, path: readonly string[]): void {
  if (node === null || typeof node !== 'object') return;
  const [key, ...rest] = path;
  if (key === undefined) return;
  if (key === '*') {
    if (Array.isArray(node)) for (const item of node) dropNull(item, rest);
    return;
  }
  if (Array.isArray(node) || !Object.hasOwn(node, key)) return;
  const value = (node as Record<string, unknown>)[key];
  if (rest.length === 0) {
    if (value === null) delete (node as Record<string, unknown>)[key];
  } else dropNull(value, rest);
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
