import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ApprovalsConfig } from './approvals/rules.js';
import type { AuditRotation } from './audit.js';
import { describeDuplicate, findDuplicateKey } from './json-keys.js';
import { DEFAULT_APPROVALS, DEFAULT_AUDIT_ROTATION, DEFAULT_POLICY, DEFAULT_VFS_QUOTA, POOL_LIMITS } from './limits.js';
import { PROVIDERS_SCHEMA, type ProviderConfigEntry } from './providers/config.js';
import { REMOTE_CONFIG_SCHEMA, type RemoteConfig } from './remote-config.js';
import type { RunnerCatalog } from './runner-catalog.js';
import { SECRETS_SCHEMA } from './secrets/sources.js';
import { STORE_CONFIG_SCHEMA, type StoreConfig } from './store/jetstream/config.js';
import { DISCOVERY_MODES, type SurfaceProfile } from './surfaces/mcp/profile.js';
import { compileSchema, summarize, type Validator } from './validation.js';

/**
 * `workspace/<project>/arium.json`: what an operator sets for a project. Every field is
 * optional; engine options given in code override the file. A bad file stops the engine at start-up
 * with an error naming the field, never silently.
 */
export interface ProjectConfig {
  /** Grants callers get by default. */
  grants?: string[];
  /** Policy overrides (limits.ts): timeout, concurrency, queue, output cap… */
  policy?: Record<string, number>;
  /** VFS quota overrides (limits.ts). */
  vfs?: Record<string, number>;
  /** Keep the VFS in `.arium/` (default true). */
  persist?: boolean;
  /**
   * Append events to `.arium/audit.jsonl` (true), to this path relative to the project (a string), or
   * as the object says: `path`, and rotation by `max_bytes` keeping `files` rotated files.
   */
  audit_log?: AuditSetting;
  /** py-runner: the Python interpreter for Python tools (a path, e.g. a virtualenv's bin/python). */
  python?: string;
  /** py-runner: refuse to run Python tools without namespace isolation. */
  strict?: boolean;
  /** `refuse`: a definition changed to ask for more permissions waits for a restart (default `allow`). */
  permission_widening?: 'allow' | 'refuse';
  /** What each agent surface offers its clients: tools (id patterns), grants, and how they are listed (discovery). */
  surfaces?: { mcp?: SurfaceProfile; http?: SurfaceProfile };
  /** Which calls wait for a person's approval before they run, and for how long (README, Approvals). */
  approvals?: ApprovalsConfig;
  /** Secrets tools may use by reference, by source (README, Secrets). */
  secrets?: Record<string, { env: string } | { file: string }>;
  /** Runners or tools that run on workers over NATS, and how to reach the server (README "Remote runners"). */
  remote?: RemoteConfig;
  /** Where the project's state is kept instead of `<project>/.arium`: NATS JetStream (README "State in NATS JetStream"). */
  store?: StoreConfig;
  /** Tools served from outside the engine (an MCP server, an HTTP tool worker, NATS satellites), by provider name (README "Providers"). */
  providers?: Record<string, ProviderConfigEntry>;
  /** How many sandbox processes (JS) and fork servers per tools folder (Python) the runners keep at most (README "Pools"). */
  pools?: PoolsConfig;
}

/** A pool of isolated-vm sandbox processes (the JS and WebAssembly runners'). */
export interface SandboxPoolConfig {
  processes?: number;
  idle_ms?: number;
  pin_cores?: boolean;
}

/** `pools` in arium.json and createEngine: each size defaults to one per available core. */
export interface PoolsConfig {
  js?: SandboxPoolConfig;
  python?: { servers?: number; idle_ms?: number };
  wasm?: SandboxPoolConfig;
}

const poolSchema = (key: string, what: string) =>
  ({
    type: 'object',
    additionalProperties: false,
    properties: {
      [key]: {
        type: 'integer',
        minimum: 1,
        maximum: POOL_LIMITS.max_members,
        description: `${what} at most (default one per core available to the engine, os.availableParallelism())`,
      },
      idle_ms: {
        type: 'integer',
        minimum: 1,
        maximum: 24 * 3600 * 1000,
        description: `a member with no call for this long ends, down to one (default ${POOL_LIMITS.idle_ms})`,
      },
    },
  }) as const;

/** A sandbox pool's schema: its size and idle time, and whether its processes are pinned to cores. */
function sandboxPoolSchema(what: string) {
  const base = poolSchema('processes', what);
  return {
    ...base,
    properties: {
      ...base.properties,
      pin_cores: {
        type: 'boolean',
        description:
          'while two or more run, each sandbox process runs on cores of its own, split from those the engine may use (default true on Linux with taskset)',
      },
    },
  } as const;
}

export const POOLS_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    js: sandboxPoolSchema('JS sandbox processes'),
    python: poolSchema('servers', 'Python fork servers per tools folder'),
    wasm: sandboxPoolSchema('WebAssembly sandbox processes'),
  },
} as const;

const SURFACE_PROFILE_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    tools: {
      type: 'array',
      items: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[a-z0-9_.*-]+$' },
      uniqueItems: true,
      description: 'tool ids or patterns with * (default every tool)',
    },
    grants: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true, description: "narrows the engine's grants" },
    discovery: {
      enum: DISCOVERY_MODES,
      description:
        'all (default): list every offered tool; search: list only tools.search, tools.describe, tools.call (and code.run), through which the offered tools are found and called',
    },
  },
} as const;

const APPROVALS_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    rules: {
      type: 'array',
      description: 'a call needs approval when any rule matches it',
      items: {
        type: 'object',
        required: ['tool'],
        additionalProperties: false,
        properties: {
          tool: {
            type: 'string',
            minLength: 1,
            maxLength: 128,
            pattern: '^[a-z0-9_.*-]+$',
            description: 'a tool id, or a pattern where * matches any run of characters',
          },
          when: {
            type: 'object',
            minProperties: 1,
            description: 'conditions on input fields, all of which must hold; keys are JSON pointers (/a/b) or top-level field names',
            additionalProperties: {
              type: 'object',
              minProperties: 1,
              maxProperties: 1,
              additionalProperties: false,
              properties: {
                equals: { description: 'the field equals this JSON value' },
                prefix: { type: 'string', description: 'the field is a string starting with this' },
                pattern: { type: 'string', minLength: 1, description: 'the field is a string this regular expression (u flag) matches' },
                glob: {
                  type: 'string',
                  pattern: '^/',
                  description: 'the field is a VFS path that, normalized as the VFS reads it, matches this glob (/etc/**)',
                },
              },
            },
          },
        },
      },
    },
    timeout_ms: { type: 'integer', minimum: 1, maximum: DEFAULT_APPROVALS.max_timeout_ms, description: `default ${DEFAULT_APPROVALS.timeout_ms}` },
  },
} as const;

const positiveIntegers = (keys: readonly string[]) =>
  Object.fromEntries(
    keys.map((k) => [
      k,
      {
        type: 'integer',
        minimum: 1,
        description: `default ${String((DEFAULT_POLICY as Record<string, number>)[k] ?? (DEFAULT_VFS_QUOTA as Record<string, number>)[k])}`,
      },
    ]),
  );

/** The keys of arium.json the engine reads itself; a runner's keys come from its definition (`config`). */
const ENGINE_CONFIG_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  $id: 'urn:arium:schema:project:v1',
  title: 'Arium project configuration (arium.json)',
  type: 'object',
  additionalProperties: false,
  properties: {
    $schema: { type: 'string' },
    grants: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true },
    policy: { type: 'object', additionalProperties: false, properties: positiveIntegers(Object.keys(DEFAULT_POLICY)) },
    vfs: { type: 'object', additionalProperties: false, properties: positiveIntegers(Object.keys(DEFAULT_VFS_QUOTA)) },
    persist: { type: 'boolean' },
    audit_log: {
      oneOf: [
        { type: 'boolean' },
        { type: 'string', minLength: 1 },
        {
          type: 'object',
          additionalProperties: false,
          properties: {
            path: { type: 'string', minLength: 1 },
            max_bytes: { type: 'integer', minimum: 4096, description: `default ${DEFAULT_AUDIT_ROTATION.max_bytes}` },
            files: { type: 'integer', minimum: 1, maximum: 100, description: `default ${DEFAULT_AUDIT_ROTATION.files}` },
          },
        },
      ],
    },
    permission_widening: { enum: ['allow', 'refuse'], description: 'default allow' },
    surfaces: {
      type: 'object',
      additionalProperties: false,
      properties: { mcp: SURFACE_PROFILE_SCHEMA, http: SURFACE_PROFILE_SCHEMA },
    },
    approvals: APPROVALS_SCHEMA,
    secrets: SECRETS_SCHEMA,
    remote: REMOTE_CONFIG_SCHEMA,
    store: STORE_CONFIG_SCHEMA,
    providers: PROVIDERS_SCHEMA,
    pools: POOLS_SCHEMA,
  },
} as const;

/** The arium.json keys no runner may claim. */
export const ENGINE_CONFIG_KEYS: readonly string[] = Object.keys(ENGINE_CONFIG_SCHEMA.properties);

/** The schema of arium.json for an engine with the runners of `catalog` (published for the defaults as `schema/project.schema.json`). */
export function projectConfigSchema(catalog: RunnerCatalog) {
  return { ...ENGINE_CONFIG_SCHEMA, properties: { ...ENGINE_CONFIG_SCHEMA.properties, ...catalog.configSchemas() } };
}

const validators = new Map<string, Validator>();

function validatorFor(catalog: RunnerCatalog): Validator {
  const schema = projectConfigSchema(catalog);
  const key = JSON.stringify(schema.properties);
  let validator = validators.get(key);
  if (!validator) {
    // Without $id: ajv keeps one schema per id, and catalogs with other runners make other schemas.
    const { $id: _id, ...rest } = schema;
    validator = compileSchema(rest);
    validators.set(key, validator);
  }
  return validator;
}

export class ProjectConfigError extends Error {
  override readonly name = 'ProjectConfigError';
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/** Reads and checks `arium.json` against the engine's keys and those of the runners in `catalog`; `{}` when the project has none. */
export function loadProjectConfig(projectDir: string, catalog: RunnerCatalog): ProjectConfig {
  const path = join(projectDir, 'arium.json');
  if (!existsSync(path)) return {};
  let raw: unknown;
  const text = readFileSync(path, 'utf8');
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new ProjectConfigError(`${path} is not valid JSON: ${(error as Error).message}`);
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate) {
    const field = duplicate.pointer === '' ? duplicate.key : `${duplicate.pointer.slice(1).replace(/\//g, '.')}.${duplicate.key}`;
    throw new ProjectConfigError(`${path}:${duplicate.line}:${duplicate.column}: ${describeDuplicate(duplicate)}`, field);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ProjectConfigError(`${path} must hold a JSON object`);
  const violations = validatorFor(catalog)(raw);
  if (violations) {
    const field = (violations[0]?.pointer ?? '').slice(1).replace(/\//g, '.');
    throw new ProjectConfigError(`${path}: ${summarize(violations)}`, field || undefined);
  }
  return raw as ProjectConfig;
}

export type AuditSetting = boolean | string | ({ path?: string } & Partial<AuditRotation>);

/**
 * Where a project's audit log goes and how it rotates, or null when it keeps none. A relative path is
 * taken from `base` (the project folder for arium.json; the working folder for an engine option).
 */
export function auditSettings(setting: AuditSetting | undefined, projectDir: string, base: string): { path: string; rotation: AuditRotation } | null {
  if (!setting) return null;
  const given = typeof setting === 'object' ? setting : typeof setting === 'string' ? { path: setting } : {};
  const path = given.path === undefined ? join(projectDir, '.arium', 'audit.jsonl') : resolve(base, given.path);
  return { path, rotation: { max_bytes: given.max_bytes ?? DEFAULT_AUDIT_ROTATION.max_bytes, files: given.files ?? DEFAULT_AUDIT_ROTATION.files } };
}
