import type { GrantSet } from '../permissions.js';
import type { Tool } from '../tool.js';

/**
 * The tools a caller may call: each one its surface offers (the profile's `tools` patterns) and whose
 * declared permissions its grants allow, by the same test as the dispatcher's permit stage
 * (`GrantSet.missing`). What a code-mode program is given, and all that `tools.search`,
 * `tools.describe`, `tools.call` and `code.types` ever show or reach: a tool the gate would refuse
 * this caller is not shown to it. Order is the order of `tools`.
 */
export function callableTools(tools: Iterable<Tool>, grants: GrantSet, offered?: (id: string) => boolean): Tool[] {
  const out: Tool[] = [];
  for (const tool of tools) if (mayCall(tool, grants, offered)) out.push(tool);
  return out;
}

/** Whether one tool is callable for these grants and this surface (see `callableTools`). */
export function mayCall(tool: Tool, grants: GrantSet, offered?: (id: string) => boolean): boolean {
  return (offered === undefined || offered(tool.spec.id)) && grants.missing(tool.declared) === null;
}
