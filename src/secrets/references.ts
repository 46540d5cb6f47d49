import { ToolFailure } from '../errors.js';
import type { GrantSet } from '../permissions.js';
import type { Tool } from '../tool.js';
import type { ResolvedSecret } from './sources.js';

/** Whether a JSON value holds a `{"$secret": …}` object anywhere (a walk without copying). */
export function hasSecretReference(value: unknown, depth = 0): boolean {
  if (value === null || typeof value !== 'object' || depth > 64) return false;
  if (Array.isArray(value)) return value.some((item) => hasSecretReference(item, depth + 1));
  if (Object.hasOwn(value, '$secret')) return true;
  for (const key in value) if (hasSecretReference((value as Record<string, unknown>)[key], depth + 1)) return true;
  return false;
}

/** Reports a refused secret: one SecurityEvent naming it (never its value). */
export type SecretDenial = (permission: string, operation: string, reason: string) => void;

/**
 * The input with each `{"$secret": NAME}` replaced by the secret's value. The tool must declare
 * `secret.read:NAME` (or `secret.read`) and the caller must be granted it; an unknown secret is
 * refused the same way, so a caller learns nothing of which names exist from the answer.
 */
export function withSecrets(
  input: unknown,
  tool: Tool,
  grants: GrantSet,
  secrets: ReadonlyMap<string, ResolvedSecret>,
  denied: SecretDenial,
): unknown {
  const covers = (scopes: readonly { name: string; scope: string | null }[], name: string) =>
    scopes.some((p) => p.name === 'secret.read' && (p.scope === null || p.scope === name));
  const replace = (value: unknown, depth: number): unknown => {
    if (value === null || typeof value !== 'object' || depth > 64) return value;
    if (Array.isArray(value)) return value.map((item) => replace(item, depth + 1));
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record);
    if (keys.length === 1 && keys[0] === '$secret') {
      const name = record.$secret;
      if (typeof name !== 'string') {
        throw new ToolFailure('validation', 'INVALID_INPUT', '{"$secret": …} must name a secret with a string, e.g. {"$secret": "github"}', {
          details: { option: '$secret' },
        });
      }
      const shown = name.slice(0, 64);
      const permission = `secret.read:${shown}`;
      const deny = (why: string) => {
        denied(permission, `use secret ${shown}`, why);
        return new ToolFailure('permission', 'DENIED', `Permission denied: secret "${shown}" for ${tool.spec.id}: ${why}`, {
          details: { secret: shown, permission },
        });
      };
      if (!covers(tool.declared, name)) throw deny(`the tool does not declare "${permission}"`);
      if (!covers(grants.permissions, name)) throw deny(`the caller was not granted "${permission}"`);
      const found = secrets.get(name);
      if (!found) throw deny('no such secret is configured for this project (arium.json "secrets")');
      if (!found.ok) throw new ToolFailure('execution', 'MISCONFIGURED', found.problem, { details: { secret: name } });
      return found.value;
    }
    const out: Record<string, unknown> = {};
    for (const key of keys) out[key] = replace(record[key], depth + 1);
    return out;
  };
  return replace(input, 0);
}
