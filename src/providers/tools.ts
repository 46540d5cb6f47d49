/**
 * A provider's tools as the registry serves them: each upstream tool becomes a `Tool` with the id
 * `<provider>.<segment>`, the provider's permissions and limits, and the upstream's schemas checked as
 * a definition's are. A tool that cannot be served is a load problem naming the provider and the tool.
 */
import { createHash } from 'node:crypto';
import type { RegistryProblem } from '../events.js';
import { DEFAULT_PROVIDER_LIMITS } from '../limits.js';
import { parsePermission } from '../permissions.js';
import type { Tool, ToolSpec } from '../tool.js';
import { compileSchema, SchemaError } from '../validation.js';
import { type ProviderSettings, toolFilter } from './config.js';
import type { ProviderTool } from './provider.js';

/** The runner every provider's tool names. */
export const PROVIDER_RUNNER = 'provider';

const SEGMENT = /^[a-z0-9][a-z0-9_-]*$/;
const MAX_DESCRIPTION = 4000;

/**
 * An upstream name as one segment of a tool id, which is lower case: `longRunningOperation` →
 * `long_running_operation`, `get-sum` stays, anything else outside `[a-z0-9_-]` becomes `_`.
 */
export function idSegment(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, '_');
}

/** The `source` a provider's tools show where a project tool shows its definition file. */
export function providerSource(provider: string): string {
  return `provider:${provider}`;
}

export interface BuiltTools {
  tools: Tool[];
  /** The upstream name of each tool, by id. */
  upstream: Map<string, string>;
  problems: RegistryProblem[];
}

/** Builds the served tools of one provider from what its upstream offers now. */
export function buildProviderTools(settings: ProviderSettings, offered: readonly ProviderTool[]): BuiltTools {
  const source = providerSource(settings.name);
  const wanted = toolFilter(settings.tools);
  const declared = settings.permissions.map((p) => parsePermission(p));
  const tools: Tool[] = [];
  const upstream = new Map<string, string>();
  const problems: RegistryProblem[] = [];
  for (const given of offered) {
    if (!wanted(given.name)) continue;
    const id = `${settings.name}.${idSegment(given.name)}`;
    const problem = (message: string, at?: string): void => {
      problems.push({ file: source, id, message: `tool "${given.name}" of provider "${settings.name}": ${message}`, ...(at ? { at } : {}) });
    };
    if (tools.length >= DEFAULT_PROVIDER_LIMITS.max_tools) {
      problem(`the provider already offers ${DEFAULT_PROVIDER_LIMITS.max_tools} tools, the most one provider may`);
      continue;
    }
    const segment = idSegment(given.name);
    if (!SEGMENT.test(segment) || id.length > 128) {
      problem(`its name does not make a tool id ("${id}"): ids are lower-case letters, digits, "_" and "-", at most 128 characters`);
      continue;
    }
    const clash = upstream.get(id);
    if (clash !== undefined) {
      problem(`its id "${id}" is also the id of "${clash}"; serve only one of them with the provider's "tools"`);
      continue;
    }
    const description = given.description?.trim() || `${given.name} (from provider ${settings.name})`;
    if (description.length > MAX_DESCRIPTION) {
      problem(`its description is ${description.length} characters, over the ${MAX_DESCRIPTION} a tool's may have`, '/description');
      continue;
    }
    const schema = given.inputSchema;
    if (typeof schema !== 'object' || schema === null || Array.isArray(schema) || schema.type !== 'object') {
      problem('the input schema must be an object schema with "type": "object" at its root', '/schema/type');
      continue;
    }
    let validateInput: Tool['validateInput'];
    let validateOutput: Tool['validateOutput'] = null;
    try {
      validateInput = compileSchema(schema, { defaults: true });
    } catch (error) {
      problem(`invalid input schema: ${(error as Error).message}`, `/schema${pointer(error)}`);
      continue;
    }
    if (given.outputSchema !== undefined) {
      try {
        validateOutput = compileSchema(given.outputSchema);
      } catch (error) {
        problem(`invalid output schema: ${(error as Error).message}`, `/output_schema${pointer(error)}`);
        continue;
      }
    }
    const timeout = smaller(settings.limits.timeout_ms, given.timeoutMs);
    const limits = {
      ...(timeout !== undefined ? { timeout_ms: timeout } : {}),
      ...(settings.limits.max_output_bytes !== undefined ? { output_bytes: settings.limits.max_output_bytes } : {}),
    };
    const spec: ToolSpec = {
      id,
      name: given.name,
      description,
      runner: PROVIDER_RUNNER,
      schema,
      ...(given.outputSchema !== undefined ? { output_schema: given.outputSchema } : {}),
      permissions: [...settings.permissions],
      ...(Object.keys(limits).length > 0 ? { limits } : {}),
    };
    upstream.set(id, given.name);
    tools.push(
      Object.freeze({
        spec: Object.freeze(spec),
        source,
        entryPath: null,
        toolsDir: null,
        declared: Object.freeze([...declared]),
        validateInput,
        validateOutput,
        hash: createHash('sha256')
          .update(JSON.stringify([spec, given.annotations ?? null]))
          .digest('hex'),
      }),
    );
  }
  return { tools, upstream, problems };
}

function smaller(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b !== undefined && Number.isInteger(b) && b > 0 ? b : undefined;
  return b !== undefined && Number.isInteger(b) && b > 0 && b < a ? b : a;
}

function pointer(error: unknown): string {
  return error instanceof SchemaError && error.pointer ? error.pointer : '';
}
