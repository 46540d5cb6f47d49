import type { GrantSet } from '../permissions.js';
import type { Tool } from '../tool.js';

/**
 * The tools a code-mode program may call: those the permission gate would let its caller call (every
 * declared permission granted, as `Dispatcher`'s permit stage checks it) and, when the caller's surface
 * offers only some tools, one of those. The dispatcher still checks each call: this is what a program
 * is shown, not what it is allowed.
 */
export function callableTools(tools: Iterable<Tool>, grants: GrantSet, offered?: (id: string) => boolean): Tool[] {
  const callable: Tool[] = [];
  for (const tool of tools) {
    if (grants.missing(tool.declared) !== null) continue;
    if (offered && !offered(tool.spec.id)) continue;
    callable.push(tool);
  }
  return callable;
}
