import { ToolFailure } from './errors.js';
import type { GrantSet } from './permissions.js';
import type { Registry } from './registry/registry.js';
import type { Tool } from './tool.js';

/** What a caller names instead of a tool id: any tool that provides this capability and that it may call. */
export interface CapabilityRequest {
  capability: string;
}

/** A tool id, or a capability to route by. */
export type CallTarget = string | CapabilityRequest;

export function isCapabilityRequest(id: unknown): id is { capability: unknown } {
  return typeof id === 'object' && id !== null && !Array.isArray(id) && Object.hasOwn(id, 'capability');
}

/**
 * The one tool providing `capability` that this caller may call: it would pass the permission gate
 * with `grants`, and the surface offers it. Several are AMBIGUOUS (never a silent pick); none is
 * UNKNOWN_TOOL naming the capability.
 */
export function routeCapability(registry: Registry, capability: unknown, grants: GrantSet, offered?: (toolId: string) => boolean): Tool {
  if (typeof capability !== 'string' || capability.length === 0 || capability.length > 128) {
    throw new ToolFailure(
      'validation',
      'INVALID_INPUT',
      'A capability must be a non-empty string of at most 128 characters, e.g. { capability: "summarize" }',
      {
        details: { option: 'capability' },
      },
    );
  }
  const providers = registry.list().filter((tool) => tool.spec.provides?.includes(capability));
  const eligible = providers.filter((tool) => grants.missing(tool.declared) === null && (offered?.(tool.spec.id) ?? true));
  if (eligible.length === 1) return eligible[0] as Tool;
  const ids = eligible.map((tool) => tool.spec.id);
  if (eligible.length > 1) {
    throw new ToolFailure(
      'validation',
      'AMBIGUOUS',
      `Capability "${capability}" is provided by ${ids.length} tools this caller may call: ${ids.join(', ')}. Call one of them by id.`,
      { details: { capability, candidates: ids } },
    );
  }
  const why =
    providers.length === 0
      ? 'no tool declares it in "provides"'
      : `${providers.length} tool(s) provide it, but this caller is not granted what they need or they are not offered here`;
  throw new ToolFailure('validation', 'UNKNOWN_TOOL', `No tool this caller may call provides capability "${capability}": ${why}.`, {
    details: { capability, suggestions: [] },
  });
}
