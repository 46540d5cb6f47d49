import { existsSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ApprovalsConfig } from './approvals/rules.js';
import { type AuditSetting, POOLS_SCHEMA, type PoolsConfig } from './config.js';
import { runnerCatalog } from './defaults.js';
import { DEFAULT_POLICY, DEFAULT_VFS_QUOTA, type Policy, type RegistryLimits, type VfsQuota } from './limits.js';
import { DEFAULT_GRANTS, parsePermission } from './permissions.js';
import type { PermissionWidening } from './registry/registry.js';
import type { RemoteConfig } from './remote-config.js';
import type { Runner, RunnerDefinition } from './runner.js';
import { type RunnerCatalog, RunnerDefinitionError } from './runner-catalog.js';
import type { StateStore } from './store/port.js';
import { type ChangeLogLimits, DEFAULT_CHANGE_LOG } from './vfs/change-log.js';
import { InconsistentReadError, StateCorruptError, VfsState } from './vfs/state.js';

/**
 * The options of `createEngine` and how they are checked: each bad option is an EngineConfigError naming
 * its field, before the engine opens anything.
 */

export interface EngineOptions {
  /** Folder holding the projects. Default `./workspace`. */
  workspace?: string;
  /** Project folder name inside the workspace. Default `demo`. */
  project?: string;
  /** Where `{ env }` secrets and the remote runners' credentials (`*_env`) are read from. Default `process.env`. */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * What callers are granted. Default: DEFAULT_GRANTS (everything but `sys.exec` and `net.fetch`), with
   * the permission of every runner whose definition says `grantedByDefault`.
   */
  grants?: readonly string[];
  /** Overrides of the default policy (limits.ts). */
  policy?: Partial<Policy>;
  vfsQuota?: Partial<VfsQuota>;
  registryLimits?: Partial<RegistryLimits>;
  /** Watch the tools folder and reload on change. Default true. */
  watch?: boolean;
  /**
   * Get the runners ready as tools load (default true): each tool's code is checked for syntax errors
   * (reported by `problems()`) and the processes tools run in are started, so a first call does not
   * wait for them. `false`: nothing is checked or started before a call needs it — for a host that
   * makes one call and exits (the CLI's one-shot commands); a tool whose code is broken still fails
   * its call with the same error.
   */
  warmUp?: boolean;
  /**
   * A reloaded definition that asks for more permissions than the version it replaces: `allow` serves
   * it (default), `refuse` keeps the approved version until a restart. Both emit a `SecurityEvent`.
   */
  permissionWidening?: PermissionWidening;
  /**
   * Keep, in memory, what each recent committed call changed in the VFS, so `changes(run_id)` can show
   * its diff (the inspector turns it on): `true` for the default bounds (32 MB of contents, files up to
   * 1 MB), or the bounds. Off by default: it copies the bytes a call replaces at its commit.
   */
  changeLog?: boolean | Partial<ChangeLogLimits>;
  /** Append every event to a JSONL file: `true` for `<project>/.arium/audit.jsonl`, or a path. */
  auditLog?: AuditSetting;
  /**
   * Keep the VFS and its snapshots in `<project>/.arium/` so they survive a restart (default true).
   * `false` keeps everything in memory.
   */
  persist?: boolean;
  /**
   * Where the durable state is kept instead of `<project>/.arium`: any `StateStore` (src/store/port.ts),
   * e.g. a `MemoryStateStore` that outlives the engine within the process. Ignored when `persist` is false.
   */
  store?: StateStore;
  /** Open a damaged state folder by keeping what is intact (see `engine.recovery`). */
  recover?: boolean;
  /**
   * Open a project another engine holds, to inspect it: its durable state is read without the lock and
   * nothing is written to it; calls that would change the VFS, snapshots, restores and gc are refused
   * (`UNAVAILABLE`, details.reason `read-only`). No watcher; the audit log, if any, is appended to but
   * never rotated (its holder rotates it).
   */
  readOnly?: boolean;
  /**
   * Runners besides or in place of the defaults: a `RunnerDefinition` adds a runner (or replaces the
   * default of its name); a `Runner` instance is used in place of the one its definition would create.
   */
  runners?: readonly (Runner | RunnerDefinition)[];
  /** Which calls wait for a person's approval (in place of arium.json's `approvals`, as a whole). */
  approvals?: ApprovalsConfig;
  /**
   * Secrets tools may use by reference (`{"$secret": NAME}` in an input), added to arium.json's name by
   * name: the value itself, or `{ env }` / `{ file }` as there. Values are read once, at start.
   */
  secrets?: Record<string, string | { env: string } | { file: string }>;
  /** Tools that run on workers over NATS, in place of arium.json's `remote` (`false`: none, whatever it says). */
  remote?: RemoteConfig | false;
  /**
   * Sandbox processes (JS) and fork servers per tools folder (Python) at most, and how long an idle one
   * lives, over arium.json's `pools` field by field. Default: one per core available, ended after 10 s idle.
   */
  pools?: PoolsConfig;
}

/** A start-up error: bad options or a missing project. Calls themselves never throw. */
export class EngineConfigError extends Error {
  override readonly name = 'EngineConfigError';
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

const PROJECT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export function checkNumbers<T extends object>(defaults: T, given: Partial<T>, name: string): T {
  const merged = { ...defaults };
  for (const [key, value] of Object.entries(given ?? {})) {
    if (!(key in defaults)) {
      throw new EngineConfigError(`Unknown ${name} field "${key}"; known fields: ${Object.keys(defaults).join(', ')}`, `${name}.${key}`);
    }
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
      throw new EngineConfigError(`${name}.${key} must be a positive integer (got ${JSON.stringify(value)})`, `${name}.${key}`);
    }
    (merged as Record<string, number>)[key] = value;
  }
  return merged;
}

export const checkPolicy = (policy: Partial<Policy>) => checkNumbers(DEFAULT_POLICY, policy, 'policy');
export const checkQuota = (quota: Partial<VfsQuota>) => checkNumbers(DEFAULT_VFS_QUOTA, quota, 'vfsQuota');

export function changeLogLimits(given: EngineOptions['changeLog']): ChangeLogLimits | null {
  if (given === undefined || given === false) return null;
  if (given === true) return { ...DEFAULT_CHANGE_LOG };
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new EngineConfigError(`changeLog must be true, false or { bytes, file_bytes } (got ${JSON.stringify(given)})`, 'changeLog');
  }
  return checkNumbers(DEFAULT_CHANGE_LOG, given, 'changeLog');
}

/** How often a read-only open reads the state again when its holder changed it meanwhile. */
const READ_ONLY_ATTEMPTS = 50;

/** Opens a held project's state read-only, reading again (after a short pause) while its holder is mid-change. */
export function openReadOnly(dir: string | StateStore | null, quota: Partial<VfsQuota>): VfsState {
  for (let attempt = 1; ; attempt++) {
    try {
      return new VfsState({ dir, quota, readOnly: true });
    } catch (error) {
      if (!(error instanceof InconsistentReadError)) throw error;
      if (attempt >= READ_ONLY_ATTEMPTS) {
        throw new StateCorruptError(
          `Could not read a consistent state of ${dir} in ${READ_ONLY_ATTEMPTS} tries: the engine holding it kept changing it (${error.message}); try again`,
        );
      }
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10 + Math.random() * 20);
    }
  }
}

/** A definition has `create` (or, when it lacks it by mistake, the `extensions` only definitions have). */
const isDefinition = (value: Runner | RunnerDefinition): value is RunnerDefinition =>
  typeof value === 'object' && value !== null && ('create' in value || 'extensions' in value);

/** The catalog of the engine's runners and the instances given in place of the ones definitions would create. */
export function runnerOptions(given: EngineOptions['runners']): { catalog: RunnerCatalog; instances: Map<string, Runner> } {
  if (given !== undefined && !Array.isArray(given))
    throw new EngineConfigError('runners must be an array of runner definitions or runners', 'runners');
  const list = given ?? [];
  let catalog: RunnerCatalog;
  try {
    catalog = runnerCatalog(list.filter(isDefinition));
  } catch (error) {
    if (error instanceof RunnerDefinitionError) throw new EngineConfigError(error.message, 'runners');
    throw error;
  }
  const instances = new Map<string, Runner>();
  for (const runner of list) {
    if (isDefinition(runner)) continue;
    if (typeof runner?.run !== 'function' || typeof runner.name !== 'string') {
      throw new EngineConfigError('each of runners must be a RunnerDefinition (with create) or a Runner (with name and run)', 'runners');
    }
    if (!catalog.get(runner.name)) {
      throw new EngineConfigError(
        `runners: no runner named "${runner.name}" is defined (known: ${catalog.names().join(', ')}); pass its RunnerDefinition, whose create() returns the runner`,
        'runners',
      );
    }
    instances.set(runner.name, runner);
  }
  return { catalog, instances };
}

/** Grants naming `exec.<kind>` of no runner here are refused, as a misspelt permission name is. */
export function checkExecGrants(grants: readonly string[], catalog: RunnerCatalog, field: string): void {
  const known = catalog.execPermissions();
  for (const text of grants) {
    const { name } = parsePermission(text);
    if (name.startsWith('exec.') && !known.includes(name)) {
      throw new EngineConfigError(`Unknown permission "${name}": no runner of this engine uses it (runners here take ${known.join(', ')})`, field);
    }
  }
}

/** The default grants for the runners of `catalog`: DEFAULT_GRANTS with each runner's permission granted by default. */
export function defaultGrants(catalog: RunnerCatalog): string[] {
  const plain = DEFAULT_GRANTS.filter((g) => !g.startsWith('exec.'));
  return [...plain.filter((g) => g.startsWith('vfs.')), ...catalog.defaultExecGrants(), ...plain.filter((g) => !g.startsWith('vfs.'))];
}

/** The project folder the options name (default `./workspace/demo`); EngineConfigError when it is not one. */
export function projectLocation(options: Pick<EngineOptions, 'workspace' | 'project'>): { project: string; workspace: string; projectDir: string } {
  const project = options.project ?? 'demo';
  if (typeof project !== 'string' || !PROJECT_NAME.test(project) || project.includes('..')) {
    throw new EngineConfigError(`Invalid project name ${JSON.stringify(project)}: use letters, digits, ".", "_" and "-" (not a path)`, 'project');
  }
  const workspace = resolve(options.workspace ?? 'workspace');
  const projectDir = join(workspace, project);
  if (!existsSync(projectDir) || !statSync(projectDir).isDirectory()) {
    throw new EngineConfigError(
      `Project "${project}" not found: ${projectDir} is not a folder (create it with \`arium init ${project}\`)`,
      'project',
    );
  }
  return { project, workspace, projectDir };
}

/**
 * The pool settings the runners get: arium.json's, with those of the engine's options over them field
 * by field; a bad option is an EngineConfigError naming it (arium.json's are checked by its schema).
 */
export function poolSettings(fromFile: PoolsConfig | undefined, given: PoolsConfig | undefined): PoolsConfig {
  if (given !== undefined && (typeof given !== 'object' || given === null || Array.isArray(given))) {
    throw new EngineConfigError(
      `pools must be an object like { js: { processes: 4 }, python: { servers: 4 } } (got ${JSON.stringify(given)})`,
      'pools',
    );
  }
  const merged: Record<string, Record<string, number | boolean>> = {};
  for (const [runner, schema] of Object.entries(POOLS_SCHEMA.properties)) {
    const part = (given as Record<string, unknown> | undefined)?.[runner];
    if (part !== undefined && (typeof part !== 'object' || part === null || Array.isArray(part))) {
      throw new EngineConfigError(`pools.${runner} must be an object (got ${JSON.stringify(part)})`, `pools.${runner}`);
    }
    for (const [key, value] of Object.entries((part ?? {}) as Record<string, unknown>)) {
      const bounds = (schema.properties as Record<string, { type: string; minimum: number; maximum: number }>)[key];
      if (!bounds) {
        throw new EngineConfigError(
          `Unknown pools.${runner} field "${key}"; known fields: ${Object.keys(schema.properties).join(', ')}`,
          `pools.${runner}.${key}`,
        );
      }
      if (bounds.type === 'boolean') {
        if (typeof value !== 'boolean') {
          throw new EngineConfigError(`pools.${runner}.${key} must be true or false (got ${JSON.stringify(value)})`, `pools.${runner}.${key}`);
        }
        continue;
      }
      if (typeof value !== 'number' || !Number.isInteger(value) || value < bounds.minimum || value > bounds.maximum) {
        throw new EngineConfigError(
          `pools.${runner}.${key} must be an integer from ${bounds.minimum} to ${bounds.maximum} (got ${JSON.stringify(value)})`,
          `pools.${runner}.${key}`,
        );
      }
    }
    merged[runner] = {
      ...((fromFile as Record<string, Record<string, number | boolean>> | undefined)?.[runner] ?? {}),
      ...((part ?? {}) as Record<string, number | boolean>),
    };
  }
  for (const key of Object.keys(given ?? {})) {
    if (!(key in POOLS_SCHEMA.properties)) {
      throw new EngineConfigError(`Unknown pools field "${key}"; known fields: ${Object.keys(POOLS_SCHEMA.properties).join(', ')}`, `pools.${key}`);
    }
  }
  return merged as PoolsConfig;
}
