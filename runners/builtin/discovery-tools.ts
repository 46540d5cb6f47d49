import type { CallerTools } from '../../src/code-mode/catalog.js';
import { jsPath } from '../../src/code-mode/names.js';
import { typeDeclarations } from '../../src/code-mode/types.js';
import { ToolFailure } from '../../src/errors.js';
import { DISCOVERY_LIMITS } from '../../src/limits.js';
import type { RunContext } from '../../src/runner.js';
import { suggest } from '../../src/suggest.js';
import type { Tool } from '../../src/tool.js';
import { type Builtin, defineBuiltin, objectSchema } from './define.js';

/**
 * Tool discovery: a client that loads these four definitions (tools.search, tools.describe, tools.call,
 * and code.types for a program) reaches every tool it may call without loading them all. Each one sees
 * only the tools its caller may call (src/code-mode/callable.ts): its grants, and what its surface offers.
 */

const ID = { type: 'string', minLength: 1, maxLength: 256, description: 'A tool id, e.g. fs.read' };

function callerTools(ctx: RunContext): CallerTools {
  if (!ctx.catalog)
    throw new ToolFailure('execution', 'MISCONFIGURED', `${ctx.tool.spec.id} needs the catalog capability, which its runner was not given`);
  return ctx.catalog();
}

/** A tool's definition as discovery shows it: what a caller needs to call it, and its path in a program. */
export function definitionOf(tool: Tool): Record<string, unknown> {
  const { id, name, description, schema, output_schema, permissions, examples } = tool.spec;
  return {
    id,
    name,
    description,
    path: `tools.${jsPath(id).join('.')}`,
    schema,
    ...(output_schema ? { output_schema } : {}),
    permissions,
    ...(examples ? { examples } : {}),
  };
}

/** An id no callable tool has (or one this caller may not call: the two look alike), with the close ones. */
function unknownTool(id: string, tools: CallerTools, verb: string): ToolFailure {
  const close = suggest(id, tools.ids());
  const hint = close.length > 0 ? ` Did you mean ${close.map((c) => `"${c}"`).join(' or ')}?` : ' tools.search finds tools by what they do.';
  return new ToolFailure('validation', 'UNKNOWN_TOOL', `No tool "${id.slice(0, 256)}" can be ${verb} here.${hint}`, {
    details: { id: id.slice(0, 256), suggestions: close },
  });
}

export const toolsSearch = defineBuiltin(
  {
    id: 'tools.search',
    name: 'Search tools',
    description:
      'Finds the tools you may call by what they do: ranks them by id, name, description and input property names, and returns the best ones with their input and output schemas. Call one with tools.call.',
    schema: objectSchema(
      {
        query: { type: 'string', minLength: 1, maxLength: DISCOVERY_LIMITS.query_chars, description: 'Words about the task, or a tool id' },
        limit: {
          type: 'integer',
          minimum: 1,
          maximum: DISCOVERY_LIMITS.search_max,
          default: DISCOVERY_LIMITS.search_default,
          description: 'How many tools to return at most',
        },
      },
      ['query'],
    ),
    permissions: [],
  },
  (input, ctx) => {
    const tools = callerTools(ctx);
    const limit = (input.limit as number | undefined) ?? DISCOVERY_LIMITS.search_default;
    const hits = tools.search(input.query as string, limit);
    return { tools: hits.map((hit) => ({ ...definitionOf(hit.tool), score: Number.isFinite(hit.score) ? hit.score : null })) };
  },
);

export const toolsDescribe = defineBuiltin(
  {
    id: 'tools.describe',
    name: 'Describe tools',
    description: 'Returns the full definitions (input and output schemas, permissions, examples) of the tools with the given ids.',
    schema: objectSchema(
      { ids: { type: 'array', minItems: 1, maxItems: DISCOVERY_LIMITS.describe_max, uniqueItems: true, items: ID, description: 'Tool ids' } },
      ['ids'],
    ),
    permissions: [],
  },
  (input, ctx) => {
    const tools = callerTools(ctx);
    const found = (input.ids as string[]).map((id) => tools.get(id) ?? id);
    const missing = found.find((t): t is string => typeof t === 'string');
    if (missing !== undefined) throw unknownTool(missing, tools, 'described');
    return { tools: (found as Tool[]).map(definitionOf) };
  },
);

export const toolsCall = defineBuiltin(
  {
    id: 'tools.call',
    name: 'Call a tool',
    description:
      'Calls the tool with this id with this input (find it with tools.search; its schema says what the input holds) and returns its output. The call is checked as any call: input, permissions, events.',
    schema: objectSchema({ id: ID, input: { type: 'object', default: {}, description: 'The tool’s input, checked against its schema' } }, ['id']),
    permissions: [],
    // The called tool runs inside this call: run again after a CONFLICT, it could act outside the VFS twice.
    limits: { max_attempts: 1 },
  },
  async (input, ctx) => {
    const tools = callerTools(ctx);
    const id = input.id as string;
    if (!tools.get(id)) throw unknownTool(id, tools, 'called');
    if (!ctx.steps) throw new ToolFailure('execution', 'MISCONFIGURED', 'tools.call needs the steps capability, which its runner was not given');
    const result = await ctx.steps({ index: 0, tool: id, input: input.input ?? {} });
    if (result.ok) return result.data;
    const error = result.error;
    throw new ToolFailure(error.stage, error.code, `${id}: ${error.message}`, { details: { tool: id, run_id: result.meta.run_id, error } });
  },
  { async: true },
);

export const codeTypes = defineBuiltin(
  {
    id: 'code.types',
    name: 'Tool types',
    description:
      'TypeScript declarations of every tool you may call, as a program sees them: `declare const tools: { fs: { read(input: …): Promise<…> } … }`, from their JSON Schemas.',
    schema: objectSchema({}),
    output_schema: {
      type: 'object',
      required: ['declarations', 'tools'],
      properties: { declarations: { type: 'string' }, tools: { type: 'integer', minimum: 0 } },
    },
    permissions: [],
  },
  (_input, ctx) => {
    const tools = callerTools(ctx).list();
    return { declarations: typeDeclarations(tools.map((tool) => tool.spec)), tools: tools.length };
  },
);

export const DISCOVERY_BUILTINS: readonly Builtin[] = [toolsSearch, toolsDescribe, toolsCall, codeTypes];
