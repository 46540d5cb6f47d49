import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ToolFailure } from '../../src/errors.js';
import type { RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { CorePlan, coresOf, type Pinning } from './affinity.js';
import { installAdvice, isolatedVmDir, permissionFlag } from './isolated-vm.js';
import { leastLoaded, type PoolSizing, poolSizing } from './pool.js';
import { AnswerBudget, IsolatedVmUnloadable, type SandboxOwner, SandboxProcess } from './sandbox-process.js';
import type { ToolRef } from './sandbox-protocol.js';
import { StartBackoff } from './supervision.js';

/** What a runner tells its pool: whose it is, the worker it runs, and how large it may grow. */
export interface SandboxPoolOptions extends SandboxOwner {
  /**
   * Finds the runner's worker script (its worker/main.mjs, which starts with worker/sandbox.mjs), when
   * the first process starts: an engine whose tools never need the sandbox does not need the file.
   */
  worker: () => string;
  /** Folder of the isolated-vm package to use. Default: the one installed with the engine. */
  isolatedVm?: string;
  /** Confine the processes with Node's permission model (they read only their code and the tools folders). Default true where Node has it. */
  permissionModel?: boolean;
  /** Processes at most (1 to POOL_LIMITS.max_members). Default one per available core. */
  processes?: number;
  /** A process with no call for this long ends, down to one. Default POOL_LIMITS.idle_ms. */
  idleMs?: number;
  /** Cores to size the pool from instead of os.availableParallelism(). */
  cores?: number;
  /** While two or more run, run each process on cores of its own (affinity.ts). Default true where it can be done. */
  pinCores?: boolean;
  /** For tests: the cores to pin to instead of those this process may use. */
  pinTo?: readonly number[];
  /** Whose tools need isolated-vm, in its install advice (e.g. "JavaScript tools"). */
  tools: string;
  /** Where a bad `processes` or `idleMs` came from, for its error (e.g. "JsRunner option processes"). */
  where: string;
  /** More of the worker's configuration (argv[2]) beyond isolated-vm's folder. */
  workerConfig?: Record<string, unknown>;
  /** Folders the processes read beyond their worker's, the shared bootstrap's, isolated-vm's and the tools folders. */
  readable?: readonly string[];
}

/** Restarts of a sandbox process in a row, each dying within this long, before the pool stops restarting it on its own. */
const FLAPPING_MS = 5_000;
const MAX_FLAPS = 3;
/** After a failed start, calls fail at once with its reason for this long before a new start is tried. */
const RETRY_START_MS = 5_000;

/**
 * The sandbox processes of one runner (sandbox-process.ts), what a runner on isolated-vm shares with
 * the others: starting them (`--no-node-snapshot`, the permission model, the folders they may read),
 * picking one for a call, replacing one that crashed, and ending idle ones.
 *
 * One process relays all of its calls' messages on its main thread, which held one engine to ~1.7x its
 * one-caller rate on 16 cores. A call goes to the process with the fewest calls in flight; when every
 * process is busy another one starts, up to the pool's size (pool.ts), and a process idle for `idleMs`
 * ends, down to one.
 */
export class SandboxPool {
  readonly #options: SandboxPoolOptions;
  /** The processes new calls may go to, oldest first. */
  #members: SandboxProcess[] = [];
  readonly #all = new Set<SandboxProcess>();
  /** Calls each member was given and has not finished (counted from the pick, before its ready wait). */
  readonly #load = new Map<SandboxProcess, number>();
  readonly #lastUsed = new Map<SandboxProcess, number>();
  readonly #sizing: PoolSizing;
  readonly #cores: CorePlan;
  /** The core group of each running process (pinned pools only), and whether it is on it now or on every core. */
  readonly #group = new Map<SandboxProcess, { group: number; cores: number[]; pinned: boolean }>();
  /** ctx.vfs answers on their way to any of the processes: bounded for the pool, as the engine's memory is one. */
  readonly #answers = new AnswerBudget();
  #shrinkTimer: NodeJS.Timeout | null = null;
  /** Tools folders (and other folders of tool code) the processes may read (with the permission model on). */
  readonly #roots = new Set<string>();
  readonly #prepared = new Map<string, Tool>();
  #starts = 0;
  #crashes = 0;
  #flaps = 0;
  #lastStart = 0;
  #lastProblem: string | null = null;
  readonly #startFailure = new StartBackoff(RETRY_START_MS);
  #closed = false;

  constructor(options: SandboxPoolOptions) {
    this.#options = options;
    this.#sizing = poolSizing({ size: options.processes, idleMs: options.idleMs, cores: options.cores }, options.where, 'sandbox process');
    if (options.pinCores !== undefined && typeof options.pinCores !== 'boolean') {
      throw new RangeError(`${options.where.replace(/ processes$/, ' pinCores')} must be true or false (got ${JSON.stringify(options.pinCores)})`);
    }
    this.#cores = new CorePlan(this.#sizing.size, { pin: options.pinCores, ...(options.pinTo ? { cores: options.pinTo } : {}) });
    // Processes started before taskset was seen to work are placed once it has.
    void this.#cores.tried.then(() => this.#placeAll());
  }

  /** How large the pool grows and why. */
  get sizing(): PoolSizing {
    return this.#sizing;
  }

  /** Whether each process runs on cores of its own, and why. */
  get pinning(): Pinning {
    return this.#cores.pinning;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Runs `work` on the process a call of `tool` goes to, once it is ready; a process that cannot start
   * fails the call with why (UNAVAILABLE, or MISCONFIGURED when isolated-vm does not load).
   */
  async use<T>(tool: Tool, work: (sandbox: SandboxProcess) => Promise<T>): Promise<T> {
    const sandbox = this.#sandbox(tool);
    this.#load.set(sandbox, (this.#load.get(sandbox) ?? 0) + 1);
    try {
      // A started process is not waited on: a warm call goes straight to it.
      if (sandbox.info === null) {
        try {
          await sandbox.ready;
        } catch (error) {
          throw this.#unavailable(error);
        }
      }
      return await work(sandbox);
    } finally {
      if (this.#all.has(sandbox)) {
        this.#load.set(sandbox, (this.#load.get(sandbox) ?? 1) - 1);
        this.#lastUsed.set(sandbox, Date.now());
      }
    }
  }

  /** Warms `tool` in every process (`ref`: the module to load instead of its entry); new processes warm it too. */
  prepare(tool: Tool, ref?: ToolRef): void {
    if (!tool.entryPath || this.#closed) return;
    this.#prepared.set(tool.spec.id, tool);
    try {
      this.#sandbox(tool);
      for (const sandbox of this.#members) sandbox.prepare(tool, ref);
    } catch {
      // Unavailable: the first call reports why.
    }
  }

  forget(tool: Tool): void {
    this.#prepared.delete(tool.spec.id);
    for (const sandbox of this.#members) sandbox.forget(tool);
  }

  /** Lets the processes read `dir` (tool code outside a tools folder, e.g. bundles): running ones cannot, new ones start. */
  allowRead(dir: string): void {
    if (this.#roots.has(dir)) return;
    this.#roots.add(dir);
    if (this.#permissionFlag() !== null) this.#retireAll();
  }

  /** The runner's status: `isolation` says how calls are kept apart; the oldest process answers for its isolates and traffic. */
  async status(isolation: string): Promise<RunnerStatus> {
    const base = {
      isolation,
      permission_model: this.#permissionFlag() !== null,
      process_starts: this.#starts,
      process_crashes: this.#crashes,
      last_problem: this.#lastProblem,
    };
    if (!this.#ivmDir()) return { available: false, reason: `isolated-vm is not installed. ${this.#advice()}`, ...base };
    const sandbox = this.#members[0] ?? (this.#closed ? null : this.#start());
    if (!sandbox) return { available: false, reason: 'the runner is closed', ...base };
    try {
      const info = await sandbox.ready;
      const stats = await sandbox.ask('stats');
      const members = this.#members.filter((m) => m.accepting);
      return {
        available: true,
        ...base,
        node: info.node,
        isolated_vm: info.isolatedVm,
        // The oldest process (the one back-to-back calls go to), its isolates and its ctx.vfs traffic.
        pid: sandbox.pid,
        pool: stats.pool,
        // Bytes of ctx.vfs traffic between the sandbox and the engine: requests (bounded in the sandbox) and answers (paced here).
        host: { ...(stats.host as Record<string, unknown>), peak_answer_bytes: sandbox.answerPeak },
        in_flight: members.reduce((sum, m) => sum + m.inFlight, 0),
        processes: {
          ...this.#sizing,
          running: members.length,
          pids: members.flatMap((m) => (m.pid === undefined ? [] : [m.pid])),
          pinning: this.#cores.pinning,
          // The cores each running process may use now, as the kernel says, in the order of pids (pinned pools only).
          ...(this.#cores.pinning.on ? { cores: members.flatMap((m) => (m.pid === undefined ? [] : [coresOf(m.pid)])) } : {}),
        },
      };
    } catch (error) {
      return { available: false, reason: this.#unavailable(error).message, ...base };
    }
  }

  /** For tests: what a sandbox process itself may do (read outside its folders, start processes). */
  async probe(): Promise<Record<string, unknown>> {
    const sandbox = this.#members[0] ?? this.#start();
    await sandbox.ready;
    return sandbox.ask('probe');
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#members = [];
    if (this.#shrinkTimer) clearInterval(this.#shrinkTimer);
    this.#shrinkTimer = null;
    await Promise.all([...this.#all].map((p) => p.close()));
  }

  /**
   * The process a new call goes to: the least loaded, started if there is none (also when the call's
   * tools folder is new to the running ones). When every process has calls, one more starts for the
   * calls after this one, up to the pool's size; this call does not wait for its start-up.
   */
  #sandbox(tool: Tool): SandboxProcess {
    if (this.#closed) throw new ToolFailure('execution', 'UNAVAILABLE', `The ${this.#options.runner} has been closed`);
    if (tool.toolsDir && !this.#roots.has(tool.toolsDir)) {
      this.#roots.add(tool.toolsDir);
      // With the permission model on, a running process cannot read the new folder: start ones that can.
      if (this.#permissionFlag() !== null) this.#retireAll();
    }
    this.#members = this.#members.filter((m) => m.accepting);
    // A persistent context lives in one process: its tool's calls all go to the oldest one, the last to be retired.
    const oldest = this.#members[0];
    if (tool.spec.context === 'persistent' && oldest?.info) return oldest;
    const load = (m: SandboxProcess) => this.#load.get(m) ?? 0;
    const best = leastLoaded(this.#members, load, (m) => m.info !== null);
    // A process that just failed to start would fail again: answer from that failure for a while
    // instead of starting a process per call.
    const blocking = this.#startFailure.blocking();
    if (best === null) {
      if (blocking !== null) throw this.#unavailable(blocking);
      return this.#start();
    }
    if (load(best) > 0 && this.#members.length < this.#sizing.size && blocking === null) this.#start();
    return best;
  }

  #start(): SandboxProcess {
    const { runner, label } = this.#options;
    const worker = this.#options.worker();
    const ivmDir = this.#ivmDir();
    if (!ivmDir) throw new ToolFailure('execution', 'MISCONFIGURED', `isolated-vm is not installed. ${this.#advice()}`, { details: { runner } });
    const execArgv = ['--no-node-snapshot', '--no-warnings'];
    const permission = this.#permissionFlag();
    if (permission) {
      execArgv.push(permission, '--allow-addons');
      // The folder holding isolated-vm, not only the package: isolated-vm 6 loads its binary through
      // node-gyp-build, a package of its own, which first checks /etc/alpine-release (on Node 24
      // existsSync throws where reading is not allowed).
      const readable = new Set([
        dirname(worker),
        bootstrapDir(),
        dirname(ivmDir),
        ...(this.#options.readable ?? []),
        ...this.#roots,
        '/etc/alpine-release',
      ]);
      for (const dir of readable) execArgv.push(`--allow-fs-read=${dir}`);
    }
    const place = this.#cores.take();
    // Pinned from its start when others run (placeAll pins them too); a lone member keeps every core.
    const beside = place?.prefix != null && this.#members.some((m) => m.accepting);
    const sandbox = new SandboxProcess({
      runner,
      label,
      workerPath: worker,
      execArgv,
      workerConfig: { ...this.#options.workerConfig, ivmDir },
      answers: this.#answers,
      ...(place?.prefix && beside ? { prefix: place.prefix } : {}),
    });
    if (place) this.#group.set(sandbox, { group: place.group, cores: place.cores, pinned: beside });
    this.#starts++;
    this.#lastStart = Date.now();
    this.#members.push(sandbox);
    this.#all.add(sandbox);
    this.#load.set(sandbox, 0);
    this.#lastUsed.set(sandbox, Date.now());
    if (this.#members.length > 1) this.#watchIdle();
    this.#placeAll();
    sandbox.onDrain = () => this.#retire(sandbox);
    sandbox.onExit = () => this.#exited(sandbox);
    for (const tool of this.#prepared.values()) {
      if (tool.toolsDir && this.#roots.has(tool.toolsDir)) sandbox.prepare(tool);
    }
    sandbox.ready.then(
      () => {
        this.#startFailure.succeeded();
        // Idle counts from when it could first take a call.
        if (this.#lastUsed.has(sandbox)) this.#lastUsed.set(sandbox, Date.now());
      },
      (error: unknown) => {
        this.#lastProblem = String((error as Error)?.message ?? error);
        this.#startFailure.failedWith(error);
      },
    );
    return sandbox;
  }

  /**
   * Puts each running process where it belongs now: on its own cores while two or more take calls, on
   * every core when one is left (affinity.ts says why).
   */
  #placeAll(): void {
    if (!this.#cores.pinning.on || !this.#cores.working) return;
    const running = this.#members.filter((m) => m.accepting);
    const pin = running.length >= 2;
    for (const member of running) {
      const place = this.#group.get(member);
      if (!place || place.pinned === pin || member.pid === undefined) continue;
      place.pinned = pin;
      this.#cores.move(member.pid, pin ? place.cores : this.#cores.all);
    }
  }

  /** New calls go elsewhere; a draining process closes itself once its calls are done, any other one is closed then too. */
  #retire(sandbox: SandboxProcess): void {
    const was = this.#members.length;
    this.#members = this.#members.filter((m) => m !== sandbox);
    sandbox.retire();
    if (!this.#closed && this.#prepared.size > 0 && was > 0 && this.#members.length === 0) this.#start();
    this.#placeAll();
  }

  /** Every process stops taking calls (a new folder they cannot read); one new one starts for warm tools. */
  #retireAll(): void {
    const old = this.#members;
    this.#members = [];
    for (const sandbox of old) sandbox.retire();
    if (!this.#closed && this.#prepared.size > 0 && old.length > 0) this.#start();
  }

  #exited(sandbox: SandboxProcess): void {
    const place = this.#group.get(sandbox);
    if (place) this.#cores.give(place.group);
    this.#group.delete(sandbox);
    this.#all.delete(sandbox);
    this.#load.delete(sandbox);
    this.#lastUsed.delete(sandbox);
    if (!this.#members.includes(sandbox)) return;
    this.#members = this.#members.filter((m) => m !== sandbox);
    this.#placeAll();
    if (this.#closed || sandbox.info === null) return;
    this.#crashes++;
    // Keep tools warm after a crash, unless processes keep dying right after they start: the other
    // members serve meanwhile, and the replacement takes this one's place in the pool.
    this.#flaps = Date.now() - this.#lastStart < FLAPPING_MS ? this.#flaps + 1 : 0;
    if (this.#prepared.size > 0 && this.#flaps < MAX_FLAPS) this.#start();
  }

  /** While the pool has more than one process, ends those idle for `idle_ms` (never the last one). */
  #watchIdle(): void {
    if (this.#shrinkTimer !== null || this.#closed) return;
    const every = Math.max(10, Math.min(1_000, Math.floor(this.#sizing.idle_ms / 2)));
    this.#shrinkTimer = setInterval(() => {
      const now = Date.now();
      for (const sandbox of [...this.#members].reverse()) {
        if (this.#members.length <= 1) break;
        const idle = (this.#load.get(sandbox) ?? 0) === 0 && sandbox.inFlight === 0 && sandbox.info !== null;
        if (idle && now - (this.#lastUsed.get(sandbox) ?? now) >= this.#sizing.idle_ms) {
          this.#members = this.#members.filter((m) => m !== sandbox);
          sandbox.retire();
        }
      }
      this.#placeAll();
      if (this.#members.length <= 1 && this.#shrinkTimer !== null) {
        clearInterval(this.#shrinkTimer);
        this.#shrinkTimer = null;
      }
    }, every);
    this.#shrinkTimer.unref();
  }

  #advice(): string {
    return installAdvice(undefined, this.#options.tools);
  }

  #ivmDir(): string | null {
    return this.#options.isolatedVm ?? isolatedVmDir();
  }

  #permissionFlag(): string | null {
    return this.#options.permissionModel === false ? null : permissionFlag();
  }

  #unavailable(error: unknown): ToolFailure {
    if (error instanceof ToolFailure) return error;
    const reason = String((error as Error)?.message ?? error).split('\n')[0] ?? '';
    this.#lastProblem = reason;
    // The reason can name host paths: it stays in status(); callers get its gist and the fix.
    const gist = reason.replace(/(?:\/[^\s'"]+)+/g, '…');
    // isolated-vm that does not load is the machine's setup, which a retry does not change.
    const code = error instanceof IsolatedVmUnloadable ? 'MISCONFIGURED' : 'UNAVAILABLE';
    return new ToolFailure('execution', code, `The ${this.#options.label} sandbox could not start (${gist}). ${this.#advice()}`, {
      details: { runner: this.#options.runner },
    });
  }
}

/**
 * The folder of the shared worker bootstrap (worker/sandbox.mjs), which every runner's worker imports:
 * plain JavaScript run as it is, next to this module in the sources, three levels up from dist/runners/shared/.
 */
function bootstrapDir(): string {
  const candidates = [new URL('./worker/sandbox.mjs', import.meta.url), new URL('../../../runners/shared/worker/sandbox.mjs', import.meta.url)];
  for (const url of candidates) {
    const path = fileURLToPath(url);
    if (existsSync(path)) return dirname(path);
  }
  throw new Error('the shared sandbox worker (runners/shared/worker/sandbox.mjs) is missing from the installation');
}
