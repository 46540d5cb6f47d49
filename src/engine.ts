// Over 500 lines: createEngine wires every part (store, registry, runners, providers, skills, surfaces'
// needs) in one place, so the order in which they start and close reads top to bottom.
import { realpathSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type ApprovalAnswer, type ApprovalDecision, ApprovalGate, type PendingApproval } from './approvals/gate.js';
import { ApprovalRuleError, ApprovalRules } from './approvals/rules.js';
import { AuditLog } from './audit.js';
import { ToolCatalog } from './code-mode/catalog.js';
import { Limiter } from './concurrency.js';
import { auditSettings, loadProjectConfig, type ProjectConfig, ProjectConfigError } from './config.js';
import { heldByDaemon } from './daemon/holder.js';
import { loadRemote, type RemoteStatus, type RemoteTransport } from './defaults.js';
import { type CallOptions, type CallTarget, Dispatcher } from './dispatcher.js';
import {
  changeLogLimits,
  checkExecGrants,
  checkPolicy,
  checkQuota,
  defaultGrants,
  EngineConfigError,
  type EngineOptions,
  openReadOnly,
  poolSettings,
  projectLocation,
  runnerOptions,
} from './engine-options.js';
import { EventBus, type RegistryProblem } from './events.js';
import { DEFAULT_APPROVALS, DEFAULT_REGISTRY_LIMITS, type Policy } from './limits.js';
import { GrantSet, PermissionSyntaxError } from './permissions.js';
import type { ProjectHandle } from './project-api.js';
import { ProviderConfigError, parseProviders } from './providers/config.js';
import { ProviderHost } from './providers/host.js';
import type { ProviderStatus } from './providers/provider.js';
import { Registry } from './registry/registry.js';
import type { ToolResult } from './result.js';
import type { Runner, RunnerStatus } from './runner.js';
import { Scrubber } from './secrets/scrub.js';
import { type ResolvedSecret, resolveSecrets, SecretConfigError, secretSources } from './secrets/sources.js';
import { renderSkill } from './skills/render.js';
import { type SkillInfo, skillInfo } from './skills/skill.js';
import { SkillSet } from './skills/skill-set.js';
import { openConfiguredStore, StoreConfigError } from './store/jetstream/config.js';
import type { StateStore } from './store/port.js';
import { publishProblems } from './surfaces/export.js';
import { type Tool, type ToolInfo, toolInfo } from './tool.js';
import { ChangeLog } from './vfs/change-log.js';
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
import { type RecoveryReport, type SnapshotInfo, VfsState } from './vfs/state.js';
import { scrubCutPatches } from './vfs/text-diff.js';
import { exportHost, importHost, type TransferReport } from './vfs/transfer.js';
import type { TreeDiff } from './vfs/tree-diff.js';

export { EngineConfigError, type EngineOptions, projectLocation } from './engine-options.js';

export interface EngineStatus {
  project: string;
  tools: number;
  problems: number;
  /** Calls whose VFS transaction is open (running, or waiting to commit). */
  transactions: number;
  runners: Record<string, RunnerStatus>;
  /** The NATS connection and the live workers, when some tools run remotely. */
  remote?: RemoteStatus;
  /** Each provider of arium.json: its state, its tools, its restarts, why it is not ready. */
  providers?: ProviderStatus[];
}

/** `extends ProjectHandle`: the compiler checks that the engine is a project handle, as the daemon's client is. */
export interface Engine extends ProjectHandle {
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
   * The project's skills (`skills/<name>/SKILL.md`) that load and whose tools all exist, by name. Each
   * surface shows those whose tools its profile offers.
   */
  skills(): SkillInfo[];
  /** One skill, with its body as written (`{{argument}}` placeholders in it). */
  skill(name: string): (SkillInfo & { body: string }) | undefined;
  /**
   * A skill's body with `args` put in (src/skills/render.ts); undefined when there is no such skill.
   * Throws `SkillArgumentError` for a missing required, unknown, non-string or oversized argument.
   */
  renderSkill(name: string, args?: Readonly<Record<string, unknown>>): string | undefined;
  /**
   * Definition files that did not load, with the reason; and tools that load but that a model API
   * cannot take (`vendor` set): the exports and MCP's tools/list leave them out for that vendor.
   */
  problems(): RegistryProblem[];
  /**
   * Re-reads the tools folder now (the watcher does this on its own), and starts the providers not
   * started yet, resolving when each has started or failed to.
   */
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
  /** Each provider of arium.json (README "Providers"): its state, its tools, its restarts, why it is not ready. */
  providers(): ProviderStatus[];
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

export async function createEngine(options: EngineOptions = {}): Promise<Engine> {
  const { project, projectDir, workspace } = projectLocation(options);
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
  const pools = poolSettings(config.pools, options.pools);
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
  let stateDir: string | StateStore | null = null;
  if ((options.persist ?? config.persist) !== false) {
    try {
      stateDir =
        options.store ??
        (config.store ? openConfiguredStore(config.store, project, options.env ?? process.env, projectDir) : join(projectDir, '.arium'));
    } catch (error) {
      await audit?.close();
      throw new EngineConfigError((error as Error).message, `arium.json ${error instanceof StoreConfigError ? error.field : 'store'}`);
    }
  }
  let state: VfsState;
  try {
    state = options.readOnly ? openReadOnly(stateDir, vfsQuota) : new VfsState({ dir: stateDir, quota: vfsQuota, recover: options.recover === true });
  } catch (error) {
    throw heldByDaemon(error, workspace, project, options.env ? [process.env, options.env] : [process.env]);
  }
  let providerSettings: ReturnType<typeof parseProviders>;
  try {
    providerSettings = parseProviders(config.providers);
  } catch (error) {
    if (error instanceof ProviderConfigError) {
      state.close();
      await audit?.close();
      throw new EngineConfigError(error.message, `arium.json ${error.field}`);
    }
    throw error;
  }
  const runners = new Map<string, Runner>();
  for (const definition of catalog.list()) {
    let runner: Runner | undefined = instances.get(definition.name);
    let problem: string | null = null;
    try {
      runner ??= definition.create({ projectDir, config: { ...config, pools } as Record<string, unknown> });
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

  let remote: RemoteTransport | null = null;
  const remoteConfig = options.remote === undefined ? config.remote : options.remote || undefined;
  if (remoteConfig) {
    const { openRemote } = await loadRemote();
    try {
      remote = await openRemote(remoteConfig, runners, bus, projectDir, options.env, catalog);
    } catch (error) {
      await Promise.allSettled([...runners.values()].map((r) => r.close()));
      state.close();
      await audit?.close();
      throw new EngineConfigError((error as Error).message, 'arium.json remote');
    }
  }

  const realProject = realpathSync(projectDir);
  const warmUp = options.warmUp ?? true;
  // The registry is made below; the host hands it tools only once a provider has started.
  let registryRef: Registry | null = null;
  let skillsRef: SkillSet | null = null;
  const providers =
    providerSettings.length > 0
      ? new ProviderHost(
          providerSettings,
          {
            projectDir: realProject,
            secret: (name) => {
              const found = secrets.get(name);
              return found?.ok ? found.value : undefined;
            },
            log: (level, message) => {
              const line = `arium: ${message}`;
              if (level === 'info') console.info(line);
              else if (level === 'warn') console.warn(line);
              else console.error(line);
            },
          },
          (name, tools, problems) => registryRef?.setProvided(name, tools, problems),
          (text) => scrubber.text(text),
        )
      : null;
  if (providers) runners.set(providers.runner.name, providers.runner);
  // The tools as tools.search and code.types see them: taken again, and indexed again, after each change.
  const toolCatalog = new ToolCatalog(() => registryRef?.list() ?? []);
  const registry = new Registry({
    ...(providers ? { providers: providers.names } : {}),
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
      toolCatalog.changed();
      bus.publish(event);
      // A skill naming a tool is served while the tool is (a listener on the bus would make every call build its events).
      skillsRef?.relink();
      if (!warmUp) return;
      for (const id of [...event.added, ...event.updated]) {
        const tool = registry.get(id);
        if (tool) runners.get(tool.spec.runner)?.prepare?.(tool);
      }
    },
  });
  registryRef = registry;
  const skills = new SkillSet({
    dir: join(realProject, 'skills'),
    shown: 'skills',
    max_depth: registryLimits.max_definition_depth,
    toolExists: (id) => registry.get(id) !== undefined,
    onChange: (event) => bus.publish(event),
  });
  skillsRef = skills;
  try {
    await registry.refresh();
    await skills.refresh();
    if ((options.watch ?? true) && !options.readOnly) await Promise.all([registry.watch(), skills.watch()]);
    await providers?.startEager();
  } catch (error) {
    await skills.close();
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
    catalog: toolCatalog,
    ...(providers ? { unknown: (id: string) => providers.unknownTool(id) } : {}),
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
    ...skills.problems(),
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
    call: <T>(id: CallTarget, input: unknown, callOptions?: CallOptions) => {
      // A lazy provider starts on the first call naming one of its tools; the call waits for it.
      const starting = providers?.ensure(id);
      if (starting) return starting.then(() => dispatcher.call(id, input, callOptions) as Promise<ToolResult<T>>);
      return dispatcher.call(id, input, callOptions) as Promise<ToolResult<T>>;
    },
    tools: () => {
      // Listing the tools is a use too: lazy providers start, and their tools join with a registry change.
      providers?.touchAll();
      return registry.list().map(toolInfo);
    },
    tool: (id) => {
      const tool = registry.get(id);
      return tool ? toolInfo(tool) : undefined;
    },
    skills: () => skills.list().map(skillInfo),
    skill: (name) => {
      const skill = skills.get(name);
      return skill ? { ...skillInfo(skill), body: skill.body } : undefined;
    },
    renderSkill: (name, args) => {
      const skill = skills.get(name);
      return skill ? renderSkill(skill, args) : undefined;
    },
    problems,
    refresh: async () => {
      await registry.refresh();
      await skills.refresh();
      await providers?.startAll();
    },
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
        ...(providers ? { providers: providers.status() } : {}),
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
    providers: () => providers?.status() ?? [],
    approvals: () => approvalGate.pending(),
    approve: (runId, answer) => approvalGate.approve(runId, answer),
    deny: (runId, answer) => approvalGate.deny(runId, answer),
    close: () => {
      closed ??= (async () => {
        approvalGate.close();
        await skills.close();
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
