import { existsSync, realpathSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { runnerCatalog } from '../runners/index.js';
import type { RemoteClient, RemoteStatus } from '../runners/remote/client.js';
import type { RemoteConfig } from '../runners/remote/settings.js';
import { type ApprovalAnswer, type ApprovalDecision, ApprovalGate, type PendingApproval } from './approvals/gate.js';
import { ApprovalRuleError, ApprovalRules, type ApprovalsConfig } from './approvals/rules.js';
import { AuditLog } from './audit.js';
import { Limiter } from './concurrency.js';
import { type AuditSetting, auditSettings, loadProjectConfig, type ProjectConfig, ProjectConfigError } from './config.js';
import { type CallOptions, type CallTarget, Dispatcher } from './dispatcher.js';
import { EventBus, type RegistryProblem } from './events.js';
import {
  DEFAULT_APPROVALS,
  DEFAULT_POLICY,
  DEFAULT_REGISTRY_LIMITS,
  DEFAULT_VFS_QUOTA,
  type Policy,
  type RegistryLimits,
  type VfsQuota,
} from './limits.js';
import { DEFAULT_GRANTS, GrantSet, PermissionSyntaxError, parsePermission } from './permissions.js';
import { type PermissionWidening, Registry } from './registry/registry.js';
import type { ToolResult } from './result.js';
import type { Runner, RunnerDefinition, RunnerStatus } from './runner.js';
import { type RunnerCatalog, RunnerDefinitionError } from './runner-catalog.js';
import { Scrubber } from './secrets/scrub.js';
import { type ResolvedSecret, resolveSecrets, SecretConfigError, secretSources } from './secrets/sources.js';
import type { StateStore } from './store/port.js';
import { publishProblems } from './surfaces/export.js';
import { type Tool, type ToolInfo, toolInfo } from './tool.js';
import { ChangeLog, type ChangeLogLimits, DEFAULT_CHANGE_LOG } from './vfs/change-log.js';
import type { GcReport } from './vfs/gc.js';
import {
  type DiffOptions,
  type DiffResult,
  diff,
  diffFilter,
  gc,
  HostVfs,
  type RestoreResult,
  restore,
  type TreeReader,
  TreeView,
} from './vfs/history.js';
import { InconsistentReadError, type RecoveryReport, type SnapshotInfo, StateCorruptError, VfsState } from './vfs/state.js';
import { scrubCutPatches } from './vfs/text-diff.js';
import { exportHost, importHost, type TransferReport } from './vfs/transfer.js';
import type { TreeDiff } from './vfs/tree-diff.js';

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
}

export interface EngineStatus {
  project: string;
  tools: number;
  problems: number;
  /** Calls whose VFS transaction is open (running, or waiting to commit). */
  transactions: number;
  runners: Record<string, RunnerStatus>;
  /** The NATS connection and the live workers, when some tools run remotely. */
  remote?: RemoteStatus;
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

export interface Engine {
  readonly project: string;
  /** Absolute path of the project folder. */
  readonly projectDir: string;
  readonly events: EventBus;
  /** The live VFS, for the host application (no permission checks: the host is trusted; changes are durable). */
  readonly vfs: HostVfs;
  /** The project's arium.json as loaded (empty when it has none). */
  readonly config: Readonly<ProjectConfig>;
  /** What opening the state folder had to repair or give up (`recover`). */
  readonly recovery: RecoveryReport;
  /** Set when the engine was opened read-only on a project another engine holds (its pid, if known). */
  readonly readOnly: { holder: number | null } | null;
  /** The grants callers get unless a call narrows them. */
  readonly grants: readonly string[];
  readonly policy: Readonly<Policy>;
  /**
   * Calls a tool; never throws. `T` is what the caller expects in `data` on success (the engine checks
   * the output against the tool's output_schema, if it has one, not against `T`).
   */
  call<T = unknown>(id: CallTarget, input: unknown, options?: CallOptions): Promise<ToolResult<T>>;
  tools(): ToolInfo[];
  tool(id: string): ToolInfo | undefined;
  /**
   * Definition files that did not load, with the reason; and tools that load but that a model API
   * cannot take (`vendor` set): the exports and MCP's tools/list leave them out for that vendor.
   */
  problems(): RegistryProblem[];
  /** Re-reads the tools folder now (the watcher does this on its own). */
  refresh(): Promise<void>;
  /** The project, its tools and problems, open transactions, and each runner's state (async: runners are asked). */
  status(): Promise<EngineStatus>;
  /** Saves the live tree as a snapshot. */
  snapshot(options?: { label?: string; message?: string }): SnapshotInfo;
  /** Every snapshot, oldest first (`arium log` and `vfs.log` list them newest first). */
  snapshots(): SnapshotInfo[];
  /** Compares `live` or snapshots (id, prefix, label, `latest`); default: newest snapshot → live. */
  diff(from?: string, to?: string, options?: DiffOptions): DiffResult;
  /** Brings the live tree back to a snapshot (saving the live tree first, so it can be undone). */
  restore(ref: string): RestoreResult;
  /** A snapshot's tree to list and read (`live`: the live tree), without restoring it. */
  view(ref: string): TreeReader;
  /**
   * The diff of what one committed call changed (its `run_id`), when the engine keeps a change log
   * (`changeLog`) and still holds that call; null otherwise.
   */
  changes(
    runId: string,
    options?: Pick<DiffOptions, 'path' | 'file' | 'stat_only' | 'max_patch_chars' | 'visible'>,
  ): (TreeDiff & { run_id: string }) | null;
  /** Copies a host folder into the VFS as one atomic change (links are never followed). */
  importFrom(hostDir: string, vfsPath?: string, onProgress?: (files: number) => void): TransferReport;
  /** Copies a VFS folder or file to a host folder, never writing outside it. */
  exportTo(vfsPath: string, hostDir: string, options?: { overwrite?: boolean }, onProgress?: (files: number) => void): TransferReport;
  /** Deletes stored objects that no snapshot and not the live tree need. */
  gc(onProgress?: (phase: 'mark' | 'sweep', count: number) => void): GcReport;
  /** Calls waiting for a person's approval, oldest first. */
  approvals(): PendingApproval[];
  /**
   * A copy of a JSON-like value with the project's secret values (and their encoded forms) replaced by
   * `[secret:NAME]`: what results, events and diffs already get, for a host that shows files itself.
   * `cut`: a string is the beginning of a longer text, so the first characters of a secret the cut
   * went through are taken off its end too (scrubbing alone cannot recognise them).
   */
  scrub<T>(value: T, options?: { cut?: boolean }): T;
  /**
   * Lets a waiting call run. Throws a `ToolFailure`: `NOT_FOUND` for a run id that waits for nothing,
   * `ALREADY_RESOLVED` (naming who answered first) for one already answered, `INVALID_INPUT` for a bad answer.
   */
  approve(runId: string, answer: { by: string }): ApprovalDecision;
  /** Ends a waiting call as `APPROVAL_DENIED`, with the reason; throws as `approve` does. */
  deny(runId: string, answer: ApprovalAnswer): ApprovalDecision;
  /** Ends calls waiting for approval as denied (`APPROVAL_DENIED`, the engine closed), then closes. */
  close(): Promise<void>;
}

const PROJECT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

function checkNumbers<T extends object>(defaults: T, given: Partial<T>, name: string): T {
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

const checkPolicy = (policy: Partial<Policy>) => checkNumbers(DEFAULT_POLICY, policy, 'policy');
const checkQuota = (quota: Partial<VfsQuota>) => checkNumbers(DEFAULT_VFS_QUOTA, quota, 'vfsQuota');

function changeLogLimits(given: EngineOptions['changeLog']): ChangeLogLimits | null {
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
function openReadOnly(dir: string | StateStore | null, quota: Partial<VfsQuota>): VfsState {
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
function runnerOptions(given: EngineOptions['runners']): { catalog: RunnerCatalog; instances: Map<string, Runner> } {
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
function checkExecGrants(grants: readonly string[], catalog: RunnerCatalog, field: string): void {
  const known = catalog.execPermissions();
  for (const text of grants) {
    const { name } = parsePermission(text);
    if (name.startsWith('exec.') && !known.includes(name)) {
      throw new EngineConfigError(`Unknown permission "${name}": no runner of this engine uses it (runners here take ${known.join(', ')})`, field);
    }
  }
}

/** The default grants for the runners of `catalog`: DEFAULT_GRANTS with each runner's permission granted by default. */
function defaultGrants(catalog: RunnerCatalog): string[] {
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

export async function createEngine(options: EngineOptions = {}): Promise<Engine> {
  const { project, projectDir } = projectLocation(options);
  const { catalog, instances } = runnerOptions(options.runners);
  let config: ProjectConfig;
  try {
    config = loadProjectConfig(projectDir, catalog);
  } catch (error) {
    if (error instanceof ProjectConfigError) throw new EngineConfigError(error.message, error.field ? `arium.json ${error.field}` : 'arium.json');
    throw error;
  }
  // Options given in code override the project's arium.json, field by field.
  const policy = checkPolicy({ ...config.policy, ...options.policy });
  const vfsQuota = checkQuota({ ...config.vfs, ...options.vfsQuota });
  const changeLog = changeLogLimits(options.changeLog);
  let grants: GrantSet;
  try {
    grants = new GrantSet(options.grants ?? config.grants ?? defaultGrants(catalog));
  } catch (error) {
    if (error instanceof PermissionSyntaxError) throw new EngineConfigError(error.message, 'grants');
    throw error;
  }
  checkExecGrants(grants.texts(), catalog, options.grants ? 'grants' : 'arium.json grants');
  for (const [surface, profile] of Object.entries(config.surfaces ?? {})) {
    try {
      new GrantSet(profile?.grants ?? []);
    } catch (error) {
      if (error instanceof PermissionSyntaxError) throw new EngineConfigError(error.message, `arium.json surfaces.${surface}.grants`);
      throw error;
    }
    checkExecGrants(profile?.grants ?? [], catalog, `arium.json surfaces.${surface}.grants`);
  }
  const registryLimits = { ...DEFAULT_REGISTRY_LIMITS, ...options.registryLimits };
  const widening = options.permissionWidening ?? config.permission_widening ?? 'allow';
  if (widening !== 'allow' && widening !== 'refuse') {
    throw new EngineConfigError(`permissionWidening must be "allow" or "refuse" (got ${JSON.stringify(widening)})`, 'permissionWidening');
  }
  let approvalRules: ApprovalRules;
  const approvalsConfig = options.approvals ?? config.approvals ?? {};
  try {
    approvalRules = new ApprovalRules(approvalsConfig.rules ?? []);
  } catch (error) {
    if (error instanceof ApprovalRuleError) throw new EngineConfigError(error.message, options.approvals ? error.field : `arium.json ${error.field}`);
    throw error;
  }
  const approvalTimeout = approvalsConfig.timeout_ms ?? DEFAULT_APPROVALS.timeout_ms;
  if (!Number.isInteger(approvalTimeout) || approvalTimeout < 1 || approvalTimeout > DEFAULT_APPROVALS.max_timeout_ms) {
    throw new EngineConfigError(
      `approvals.timeout_ms must be an integer from 1 to ${DEFAULT_APPROVALS.max_timeout_ms} (got ${JSON.stringify(approvalTimeout)})`,
      'approvals.timeout_ms',
    );
  }
  let secrets: Map<string, ResolvedSecret>;
  try {
    secrets = resolveSecrets(secretSources(config.secrets, options.secrets), projectDir, options.env);
  } catch (error) {
    if (error instanceof SecretConfigError) throw new EngineConfigError(error.message, options.secrets ? error.field : `arium.json ${error.field}`);
    throw error;
  }
  const scrubber = new Scrubber(new Map([...secrets].flatMap(([name, s]) => (s.ok ? [[name, s.value] as const] : []))));
  const bus = new EventBus(scrubber);
  const approvalGate = new ApprovalGate({
    bus,
    rules: approvalRules,
    timeout_ms: approvalTimeout,
    max_pending: DEFAULT_APPROVALS.max_pending,
    remembered: DEFAULT_APPROVALS.remembered,
    payload_bytes: policy.event_payload_bytes,
    scrub: (value) => scrubber.value(value),
  });
  let audit: AuditLog | null = null;
  const auditing = auditSettings(options.auditLog ?? config.audit_log, projectDir, options.auditLog === undefined ? projectDir : resolve('.'));
  if (auditing) {
    // A read-only engine shares the log with the engine that holds the project, which alone rotates it.
    audit = new AuditLog(auditing.path, options.readOnly ? { ...auditing.rotation, max_bytes: Number.POSITIVE_INFINITY } : auditing.rotation);
    const log = audit;
    bus.addSink((event) => log.write(event));
  }

  if (options.store !== undefined) {
    const store = options.store as Partial<StateStore> | null;
    const needed = [
      'acquire',
      'release',
      'holder',
      'readLive',
      'writeLive',
      'liveStamp',
      'readSnapshotLog',
      'appendSnapshotLog',
      'journal',
      'close',
      'describe',
    ];
    const missing = needed.filter((m) => typeof (store as Record<string, unknown> | null)?.[m] !== 'function');
    if (missing.length > 0 || typeof store?.objects !== 'object') {
      throw new EngineConfigError(
        `store must implement StateStore (src/store/port.ts); it lacks ${[...missing, ...(typeof store?.objects === 'object' ? [] : ['objects'])].join(', ')}`,
        'store',
      );
    }
  }
  const stateDir = (options.persist ?? config.persist) === false ? null : (options.store ?? join(projectDir, '.arium'));
  const state = options.readOnly
    ? openReadOnly(stateDir, vfsQuota)
    : new VfsState({ dir: stateDir, quota: vfsQuota, recover: options.recover === true });
  const runners = new Map<string, Runner>();
  for (const definition of catalog.list()) {
    let runner: Runner | undefined = instances.get(definition.name);
    let problem: string | null = null;
    try {
      runner ??= definition.create({ projectDir, config: config as Record<string, unknown> });
      if (runner?.name !== definition.name) problem = `created a runner named ${JSON.stringify(runner?.name)}; they must match`;
    } catch (error) {
      problem = `could not create its runner: ${(error as Error)?.message ?? String(error)}`;
    }
    if (problem !== null) {
      await Promise.allSettled([...runners.values()].map((r) => r.close()));
      state.close();
      await audit?.close();
      throw new EngineConfigError(`runner definition "${definition.name}" ${problem}`, 'runners');
    }
    runners.set(definition.name, runner as Runner);
  }

  let remote: RemoteClient | null = null;
  const remoteConfig = options.remote === undefined ? config.remote : options.remote || undefined;
  if (remoteConfig) {
    // Loaded only here: the NATS client costs every engine that does not use it its import.
    const { openRemote } = await import('../runners/remote/setup.js');
    try {
      remote = await openRemote(remoteConfig, runners, bus, projectDir, options.env);
    } catch (error) {
      await Promise.allSettled([...runners.values()].map((r) => r.close()));
      state.close();
      await audit?.close();
      throw new EngineConfigError((error as Error).message, 'arium.json remote');
    }
  }

  const realProject = realpathSync(projectDir);
  const warmUp = options.warmUp ?? true;
  const registry = new Registry({
    projectDir: realProject,
    toolsPath: join(realProject, 'tools'),
    builtins: [...runners.values()].flatMap((runner) => runner.tools?.() ?? []),
    catalog,
    limits: registryLimits,
    widening,
    onSecurity: (event) => bus.publish(event),
    ...(warmUp ? { checkCode: (tool: Tool) => runners.get(tool.spec.runner)?.check?.(tool) ?? Promise.resolve(null) } : {}),
    onRetired: (tools) => {
      for (const tool of tools) runners.get(tool.spec.runner)?.forget?.(tool);
    },
    onChange: (event) => {
      bus.publish(event);
      if (!warmUp) return;
      for (const id of [...event.added, ...event.updated]) {
        const tool = registry.get(id);
        if (tool) runners.get(tool.spec.runner)?.prepare?.(tool);
      }
    },
  });
  try {
    await registry.refresh();
    if ((options.watch ?? true) && !options.readOnly) await registry.watch();
  } catch (error) {
    await registry.close();
    await remote?.close();
    state.close();
    throw error;
  }

  const dispatcher = new Dispatcher({
    registry,
    runners,
    state,
    bus,
    policy,
    grants,
    limiter: new Limiter(policy.concurrency, policy.tool_concurrency, policy.queue_length),
    approvals: approvalGate,
    secrets,
    scrubber,
  });

  if (changeLog) state.changeLog = new ChangeLog(changeLog);
  if (scrubber.active) {
    state.scrub = (text) => scrubber.text(text);
    state.scrubHead = (text) => scrubber.head(text);
  }
  const hostVfs = new HostVfs(state);

  // Per loaded version of a tool (a reload makes a new Tool): its schema is walked once, not per listing.
  const publishing = new WeakMap<Tool, RegistryProblem[]>();
  const problems = (): RegistryProblem[] => [
    ...registry.problems(),
    ...registry.list().flatMap((tool) => {
      let found = publishing.get(tool);
      if (!found) {
        found = publishProblems(toolInfo(tool));
        publishing.set(tool, found);
      }
      return found.map((p) => ({ ...p }));
    }),
  ];

  let closed: Promise<void> | null = null;
  const engine: Engine = {
    project,
    projectDir,
    events: bus,
    vfs: hostVfs,
    recovery: state.recovery,
    readOnly: state.readOnly,
    config,
    grants: grants.texts(),
    policy,
    call: <T>(id: CallTarget, input: unknown, callOptions?: CallOptions) => dispatcher.call(id, input, callOptions) as Promise<ToolResult<T>>,
    tools: () => registry.list().map(toolInfo),
    tool: (id) => {
      const tool = registry.get(id);
      return tool ? toolInfo(tool) : undefined;
    },
    problems,
    refresh: () => registry.refresh(),
    status: async () => {
      const statuses: Record<string, RunnerStatus> = {};
      for (const [name, runner] of runners) statuses[name] = await runner.status();
      return {
        project,
        tools: registry.list().length,
        problems: problems().length,
        transactions: state.open,
        runners: statuses,
        ...(remote ? { remote: remote.status() } : {}),
      };
    },
    snapshot: (snapshotOptions) => state.snapshot(snapshotOptions),
    snapshots: () => [...state.snapshots],
    diff: (from, to, diffOptions) => scrubber.value(diff(state, from, to, diffOptions)),
    restore: (ref) => restore(state, ref),
    view: (ref) => (ref === 'live' ? hostVfs : new TreeView(state, ref)),
    changes: (runId, changeOptions = {}) => {
      const filter = diffFilter(changeOptions);
      const found = state.changeLog?.diff(runId, {
        ...(filter ? { filter } : {}),
        ...(changeOptions.visible ? { visible: changeOptions.visible } : {}),
        patches: changeOptions.stat_only !== true,
        ...(changeOptions.max_patch_chars ? { max_patch_chars: changeOptions.max_patch_chars } : {}),
      });
      return found ? scrubber.value(scrubCutPatches({ run_id: runId, ...found }, state.scrubHead)) : null;
    },
    scrub: (value, scrubOptions) =>
      scrubOptions?.cut === true && typeof value === 'string' ? (scrubber.head(value) as typeof value) : scrubber.value(value),
    gc: (onProgress) => gc(state, onProgress),
    importFrom: (hostDir, vfsPath, onProgress) => importHost(state, hostDir, vfsPath ?? '/', onProgress),
    exportTo: (vfsPath, hostDir, exportOptions, onProgress) => exportHost(state, vfsPath, hostDir, exportOptions, onProgress),
    approvals: () => approvalGate.pending(),
    approve: (runId, answer) => approvalGate.approve(runId, answer),
    deny: (runId, answer) => approvalGate.deny(runId, answer),
    close: () => {
      closed ??= (async () => {
        approvalGate.close();
        await registry.close();
        await Promise.allSettled([...runners.values()].map((r) => r.close()));
        await remote?.close();
        state.close();
        await audit?.close();
      })();
      return closed;
    },
  };
  return engine;
}
