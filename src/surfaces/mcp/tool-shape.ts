import type { Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import type { ToolInfo } from '../../tool.js';

// How a tool looks to MCP, apart from the server: `arium tools --format mcp` and the export API use it
// too, and must not load the SDK (with zod) at run time to do so. Only its types are imported here.

/** The annotations MCP clients show: derived from what the tool declares, never from the client. */
export function annotationsOf(tool: ToolInfo): NonNullable<McpTool['annotations']> {
  // A macro declares no permissions: what it may do is what its steps' tools may do, which can change
  // as they reload. A client may trust a read-only hint to skip asking, so a macro claims nothing.
  if (tool.steps !== undefined) {
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

/** A tool as MCP lists it. */
export function mcpTool(tool: ToolInfo): McpTool {
  const listed: McpTool = {
    name: tool.id,
    title: tool.name ?? tool.id,
    description: tool.description,
    inputSchema: tool.schema as McpTool['inputSchema'],
    annotations: annotationsOf(tool),
  };
  // MCP's structuredContent is an object: only an object output schema can describe it.
  if (tool.output_schema && (tool.output_schema as { type?: unknown }).type === 'object') {
    listed.outputSchema = tool.output_schema as McpTool['outputSchema'];
  }
  return listed;
}
