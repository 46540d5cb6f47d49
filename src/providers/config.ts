/**
 * arium.json `providers`: the engine's part of each provider's settings (its permissions, which of its
 * tools are served, limits, when it starts); the kind's own part (`"mcp": {…}`) is checked by its kind.
 */
import { DEFAULT_PROVIDER_LIMITS } from '../limits.js';
import { PermissionSyntaxError, parsePermission } from '../permissions.js';
import { PROVIDER_KINDS } from './kinds.js';
import type { ProviderKind } from './provider.js';

/** A provider's name: the first segment of its tools' ids. */
export const PROVIDER_NAME = /^[a-z][a-z0-9_-]{0,31}$/;

/** Names no provider may take: the builtins' prefixes, and `providers`, where the engine lists them. */
export const RESERVED_PROVIDER_NAMES: ReadonlySet<string> = new Set(['fs', 'vfs', 'shell', 'system', 'providers', 'arium']);

const ENGINE_KEYS = ['permissions', 'tools', 'limits', 'start'] as const;

/** The JSON Schema of arium.json's `providers` (the engine's keys; each kind checks its own object). */
export const PROVIDERS_SCHEMA = {
  type: 'object',
  description: 'tools served from outside the engine, behind the same gate (README "Providers")',
  propertyNames: { type: 'string', pattern: PROVIDER_NAME.source },
  additionalProperties: {
    type: 'object',
    minProperties: 1,
    properties: {
      permissions: {
        type: 'array',
        items: { type: 'string', minLength: 1 },
        uniqueItems: true,
        description: "what each of the provider's tools declares; callers must be granted it",
      },
      tools: {
        type: 'array',
        items: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_.*-]+$' },
        uniqueItems: true,
        description: 'the upstream tool names (or patterns with *) that are served; default ["*"]',
      },
      limits: {
        type: 'object',
        additionalProperties: false,
        properties: {
          timeout_ms: { type: 'integer', minimum: 1, maximum: 600_000, description: "default the policy's timeout_ms" },
          concurrency: { type: 'integer', minimum: 1, maximum: 1024, description: `default ${DEFAULT_PROVIDER_LIMITS.concurrency}` },
          max_output_bytes: { type: 'integer', minimum: 1, maximum: 64 * 1024 * 1024, description: "default the policy's output_bytes" },
        },
      },
      start: { enum: ['lazy', 'eager'], description: 'lazy (default): on first use; eager: when the engine starts' },
    },
    additionalProperties: { type: 'object' },
  },
} as const;

/** One provider as arium.json gives it, checked. */
export interface ProviderSettings {
  name: string;
  kind: ProviderKind;
  /** The kind's own settings, as its `parse` returned them. */
  settings: unknown;
  permissions: string[];
  /** Upstream tool names or patterns; a tool none matches is not served. */
  tools: string[];
  limits: { timeout_ms?: number; concurrency: number; max_output_bytes?: number };
  start: 'lazy' | 'eager';
}

export interface ProviderConfigEntry {
  permissions?: string[];
  tools?: string[];
  limits?: { timeout_ms?: number; concurrency?: number; max_output_bytes?: number };
  start?: 'lazy' | 'eager';
  [kind: string]: unknown;
}

export class ProviderConfigError extends Error {
  override readonly name = 'ProviderConfigError';
  constructor(
    message: string,
    /** Where in arium.json, dotted (`providers.github.mcp.command`). */
    readonly field: string,
  ) {
    super(message);
  }
}

/** Checks each provider's entry past the schema: its name, its one kind, its permissions, the kind's settings. */
export function parseProviders(raw: Record<string, ProviderConfigEntry> | undefined, kinds = PROVIDER_KINDS): ProviderSettings[] {
  const out: ProviderSettings[] = [];
  for (const [name, entry] of Object.entries(raw ?? {})) {
    const at = `providers.${name}`;
    if (!PROVIDER_NAME.test(name)) {
      throw new ProviderConfigError(`provider name "${name}" must be 1 to 32 lower-case letters, digits, "_" or "-", starting with a letter`, at);
    }
    if (RESERVED_PROVIDER_NAMES.has(name)) {
      throw new ProviderConfigError(`provider name "${name}" is the prefix of the engine's own tools; choose another name`, at);
    }
    const kindKeys = Object.keys(entry).filter((k) => !(ENGINE_KEYS as readonly string[]).includes(k));
    const known = [...kinds.keys()].map((k) => `"${k}"`).join(', ');
    if (kindKeys.length !== 1) {
      throw new ProviderConfigError(
        kindKeys.length === 0
          ? `provider "${name}" names no kind: give one of ${known} with its settings`
          : `provider "${name}" names ${kindKeys.length} kinds (${kindKeys.join(', ')}); a provider is one of ${known}`,
        at,
      );
    }
    const key = kindKeys[0] as string;
    const kind = kinds.get(key);
    if (!kind) {
      throw new ProviderConfigError(
        `provider "${name}": unknown key or kind "${key}"; kinds: ${known}; other keys: ${ENGINE_KEYS.join(', ')}`,
        `${at}.${key}`,
      );
    }
    const permissions = entry.permissions ?? [];
    for (const [i, text] of permissions.entries()) {
      try {
        parsePermission(text);
      } catch (error) {
        if (error instanceof PermissionSyntaxError) throw new ProviderConfigError(error.message, `${at}.permissions.${i}`);
        throw error;
      }
    }
    let settings: unknown;
    try {
      settings = kind.parse(entry[key], `/providers/${name}/${key}`);
    } catch (error) {
      throw new ProviderConfigError(`provider "${name}": ${(error as Error).message}`, `${at}.${key}`);
    }
    out.push({
      name,
      kind,
      settings,
      permissions,
      tools: entry.tools ?? ['*'],
      limits: {
        ...(entry.limits?.timeout_ms !== undefined ? { timeout_ms: entry.limits.timeout_ms } : {}),
        concurrency: entry.limits?.concurrency ?? DEFAULT_PROVIDER_LIMITS.concurrency,
        ...(entry.limits?.max_output_bytes !== undefined ? { max_output_bytes: entry.limits.max_output_bytes } : {}),
      },
      start: entry.start ?? 'lazy',
    });
  }
  return out;
}

/** A predicate over upstream tool names for a provider's `tools` patterns. */
export function toolFilter(patterns: readonly string[]): (name: string) => boolean {
  const res = patterns.map(
    (p) =>
      new RegExp(
        `^${p
          .split('*')
          .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
          .join('.*')}$`,
      ),
  );
  return (name) => res.some((re) => re.test(name));
}
