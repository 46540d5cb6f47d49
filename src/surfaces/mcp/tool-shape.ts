import type { Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import type { ToolInfo } from '../../tool.js';
import { publishSchema } from '../publish-schema.js';
import type { RuleBreak } from '../vendor-rules.js';

// How a tool looks to MCP, apart from the server: `arium tools --format mcp` and the export API use it
// too, and must not load the SDK (with zod) at run time to do so. Only its types are imported here.

/**
 * Builtins that run another tool the caller names (tools.call; code.run's program): they declare
 * nothing themselves, and what they do is what the tools they call do.
 */
const CALLS_OTHERS: ReadonlySet<string> = new Set(['tools.call', 'code.run']);

/** The annotations MCP clients show: derived from what the tool declares, never from the client. */
export function annotationsOf(tool: ToolInfo): NonNullable<McpTool['annotations']> {
  // A macro declares no permissions: what it may do is what its steps' tools may do, which can change
  // as they reload. A client may trust a read-only hint to skip asking, so a macro claims nothing; nor
  // does code.run (runner "code"), whose program may call any tool its caller may, nor a builtin that
  // calls the tool it is given.
  if (tool.steps !== undefined || tool.runner === 'code' || CALLS_OTHERS.has(tool.id)) {
    return { title: tool.name ?? tool.id, readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true };
  }
  const permissions = tool.permissions ?? [];
  const writes = permissions.some((p) => p === 'vfs.write' || p.startsWith('vfs.write:'));
  // shell.run's scripts may rm, mv over and truncate files.
  const destructive = tool.id === 'fs.delete' || tool.id === 'vfs.restore' || tool.id === 'shell.run';
  return {
    title: tool.name ?? tool.id,
    readOnlyHint: !writes,
    destructiveHint: writes ? destructive : false,
    idempotentHint: !writes,
    openWorldHint: permissions.includes('net.fetch'),
  };
}

/** A tool as MCP lists it, or why it cannot be listed; and how its schema was reshaped to be. */
export interface McpListing {
  tool: McpTool | null;
  rewrites: string[];
  problems: RuleBreak[];
}

/**
 * MCP clients hand `inputSchema` on to the model they drive (Claude Code to Anthropic's API, others
 * to OpenAI's), and those APIs refuse a whole request for one tool they cannot take: so a tool is
 * listed with a schema MCP, Anthropic and OpenAI all take (target `mcp` in src/surfaces/vendor-rules.ts),
 * or not listed. The engine still checks each call against the tool's own schema.
 */
export function mcpListing(tool: ToolInfo): McpListing {
  const published = publishSchema(tool.schema, 'mcp');
  if (!published.schema) return { tool: null, rewrites: [], problems: published.problems };
  const listed: McpTool = {
    name: tool.id,
    title: tool.name ?? tool.id,
    description: tool.description,
    inputSchema: published.schema as McpTool['inputSchema'],
    annotations: annotationsOf(tool),
  };
  // MCP's structuredContent is an object: only an object output schema can describe it
  // (modelcontextprotocol.io/specification/2025-06-18/server/tools: `outputSchema: { type: "object", … }`).
  if (tool.output_schema && (tool.output_schema as { type?: unknown }).type === 'object') {
    listed.outputSchema = tool.output_schema as McpTool['outputSchema'];
  }
  return { tool: listed, rewrites: published.rewrites, problems: [] };
}

/** A tool as MCP lists it; null when it cannot be listed (`mcpListing` says why). */
export function mcpTool(tool: ToolInfo): McpTool | null {
  return mcpListing(tool).tool;
}
