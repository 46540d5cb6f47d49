import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { PACK_LIMITS } from '../limits.js';
import { PermissionSyntaxError, parsePermission } from '../permissions.js';
import { compileSchema, summarize, type Validator } from '../validation.js';
import { PackError } from './errors.js';

/** What a pack says of itself (`arium-pack.yaml`, `.yml` or `.json` at its root). */
export interface PackManifest {
  name: string;
  version: string;
  description?: string;
  /** Every permission its tools declare must be covered by these; they are what `arium add` asks to grant. */
  permissions: string[];
  /** Secrets its tools read by reference; each is granted as `secret.read:NAME`. */
  secrets: string[];
}

/** The manifest file names a pack may use, in the order they are looked for. */
export const MANIFEST_FILES = ['arium-pack.yaml', 'arium-pack.yml', 'arium-pack.json'] as const;

/** A pack name is its namespace: its tools are `<name>.<tool>`. */
export const PACK_NAME_PATTERN = '^[a-z0-9][a-z0-9_-]{0,63}$';

const MANIFEST_SCHEMA = {
  type: 'object',
  required: ['name', 'version'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', pattern: PACK_NAME_PATTERN },
    version: { type: 'string', minLength: 1, maxLength: 64, pattern: '^[0-9A-Za-z][0-9A-Za-z.+_-]*$' },
    description: { type: 'string', maxLength: 4096 },
    permissions: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true },
    secrets: { type: 'array', items: { type: 'string', pattern: '^[A-Za-z][A-Za-z0-9_-]*$' }, uniqueItems: true },
  },
} as const;

let validator: Validator | null = null;

/**
 * Reads the manifest of the pack in `dir`: Arium's own, or else a domain bundle's `manifest.yaml` and
 * `policies.yaml` (src/packs/domain-bundle.ts). Throws a PackError naming the file, the place and the fix.
 */
export async function readManifest(dir: string): Promise<{ manifest: PackManifest; file: string; notes: string[] }> {
  for (const name of MANIFEST_FILES) {
    const path = join(dir, name);
    if (!existsSync(path)) continue;
    const raw = await parseManifestFile(path, name);
    return { manifest: checkManifest(raw, name), file: name, notes: [] };
  }
  if (existsSync(join(dir, 'manifest.yaml'))) {
    const { fromDomainBundle } = await import('./domain-bundle.js');
    return fromDomainBundle(dir);
  }
  throw new PackError(
    'MANIFEST',
    `no pack manifest: expected ${MANIFEST_FILES.join(', ')} (or a domain bundle's manifest.yaml) at the pack's root; write one with name, version, permissions and secrets`,
  );
}

/** Parses a YAML or JSON manifest file within PACK_LIMITS.max_manifest_bytes; a syntax error names its line and column. */
export async function parseManifestFile(path: string, shown: string): Promise<unknown> {
  const size = statSync(path).size;
  if (size > PACK_LIMITS.max_manifest_bytes) {
    throw new PackError('MANIFEST', `${shown} is ${size} bytes, over the limit of ${PACK_LIMITS.max_manifest_bytes} bytes for a pack manifest`);
  }
  const text = readFileSync(path, 'utf8');
  if (shown.endsWith('.json')) {
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new PackError('MANIFEST', `${shown} is not valid JSON: ${(error as Error).message}`);
    }
  }
  const { parseDocument } = await import('yaml');
  // Aliases are refused outright: a manifest has no use for them, and they are the "billion laughs" lever.
  const doc = parseDocument(text, { uniqueKeys: true });
  const problem = doc.errors[0];
  if (problem) {
    const where = problem.linePos?.[0] ? `:${problem.linePos[0].line}:${problem.linePos[0].col}` : '';
    throw new PackError('MANIFEST', `${shown}${where}: not valid YAML: ${problem.message.split('\n')[0]}`);
  }
  try {
    return doc.toJS({ maxAliasCount: 0 });
  } catch (error) {
    throw new PackError('MANIFEST', `${shown}: ${(error as Error).message}`);
  }
}

/** Checks a parsed manifest: its fields, and that each permission is one Arium knows. */
export function checkManifest(raw: unknown, shown: string): PackManifest {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new PackError(
      'MANIFEST',
      `${shown} must hold a mapping (name:, version:, permissions:, secrets:), not ${Array.isArray(raw) ? 'a list' : String(raw)}`,
    );
  }
  validator ??= compileSchema(MANIFEST_SCHEMA);
  const violations = validator(raw);
  if (violations) {
    const hint = violations.some((v) => v.pointer === '/name' || (v.keyword === 'required' && v.params.missingProperty === 'name'))
      ? ' (name: lower-case letters, digits, _ and -, at most 64, e.g. "textkit")'
      : '';
    throw new PackError('MANIFEST', `${shown}: ${summarize(violations)}${hint}`);
  }
  const manifest = raw as PackManifest;
  const permissions = manifest.permissions ?? [];
  permissions.forEach((text, i) => {
    try {
      parsePermission(text);
    } catch (error) {
      if (error instanceof PermissionSyntaxError) throw new PackError('MANIFEST', `${shown}: /permissions/${i}: ${error.message}`);
      throw error;
    }
  });
  return { ...manifest, permissions, secrets: manifest.secrets ?? [] };
}

/** What granting a pack means: its permissions, and `secret.read:NAME` for each of its secrets. */
export function packGrants(manifest: PackManifest): string[] {
  const grants = [...manifest.permissions];
  for (const name of manifest.secrets) if (!grants.includes(`secret.read:${name}`)) grants.push(`secret.read:${name}`);
  return grants;
}
