import type { Tool } from '../tool.js';

/** What changed between two sets of served tools, by id (a tool whose hash or file changed is updated). */
export interface ToolChanges {
  added: string[];
  updated: string[];
  removed: string[];
}

export function toolChanges(before: ReadonlyMap<string, Tool>, next: ReadonlyMap<string, Tool>): ToolChanges {
  const changes: ToolChanges = { added: [], updated: [], removed: [] };
  for (const [id, tool] of next) {
    const old = before.get(id);
    if (!old) changes.added.push(id);
    else if (old.hash !== tool.hash || old.source !== tool.source) changes.updated.push(id);
  }
  for (const id of before.keys()) if (!next.has(id)) changes.removed.push(id);
  return changes;
}

export const unchanged = (c: ToolChanges) => c.added.length + c.updated.length + c.removed.length === 0;
