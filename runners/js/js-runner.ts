import { dirname } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { CodeProblem, RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { Shipment } from '../remote/shipment.js';
import { leastLoaded, type PoolSizing, poolSizing } from '../shared/pool.js';
import { StartBackoff } from '../shared/supervision.js';
import { type BundleOutcome, Bundler } from './bundle.js';
import { installAdvice, isolatedVmDir, packageDir, permissionFlag, workerPath } from './locate.js';
import { AnswerBudget, IsolatedVmUnloadable, SandboxProcess, type ToolCallServer } from './sandbox-process.js';
import { jsSyntaxProblem } from './syntax.js';

export interface JsRunnerOptions {
  /** Folder of the isolated-vm package to use. Default: the one installed with the engine. */
  isolatedVm?: string;
  /** Isolates the sandbox process keeps at most; each runs one call at a time. Default 16. */
  maxIsolates?: number;
  /** Confine the sandbox process with Node's permission model (reads only its own code and the tools folder, no child processes). Default true where Node has it. */
  permissionModel?: boolean;
  /** Sandbox processes at most (1 to POOL_LIMITS.max_members). Default one per available core. */
  processes?: number;
  /** A sandbox process with no call for this long ends, down to one. Default POOL_LIMITS.idle_ms. */
  idleMs?: number;
  /** Cores to size the pool from instead of os.availableParallelism(). */
  cores?: number;
}

/** Restarts of the sandbox process in a row, each dying within this long, before the runner stops restarting it on its own. */
const FLAPPING_MS = 5_000;
const MAX_FLAPS = 3;
/** After a failed start, calls fail at once with its reason for this long before a new start is tried. */
const RETRY_START_MS = 5_000;

/**
 * Runs `js-runner` tools: ES modules (`export default async function run(input, ctx)`) in isolated-vm
 * isolates, one isolate and a fresh context per call, inside sandbox processes of their own
 * (sandbox-process.ts, worker/). THREAT_MODEL.md says what this does and does not guarantee.
 *
 * The processes form a pool (runners/shared/pool.ts): one process relays all of its calls' messages
 * on its main thread, which held one engine to ~1.7x its one-caller rate on 16 cores. A call goes to
 * the process with the fewest calls in flight; when every process is busy another one starts, up to
 * the pool's size, and a process idle for `idleMs` ends, down to one.
 *
 * isolated-vm is never loaded in the engine process: when it is missing or does not load, only JS
 * calls fail (UNAVAILABLE, with how to fix the install); builtins and Python tools are unaffected.
 */
export class JsRunner implements Runner {
  readonly name = 'js-runner' as const;
  readonly interruptible = true;
  readonly #options: JsRunnerOptions;
  /** The processes new calls may go to, oldest first. */
  #members: SandboxProcess[] = [];
  readonly #all = new Set<SandboxProcess>();
  /** Calls each member was given and has not finished (counted from the pick, before its ready wait). */
  readonly #load = new Map<SandboxProcess, number>();
  readonly #lastUsed = new Map<SandboxProcess, number>();
  readonly #sizing: PoolSizing;
  /** ctx.vfs answers on their way to any of the processes: bounded for the pool, as the engine's memory is one. */
  readonly #answers = new AnswerBudget();
  #shrinkTimer: NodeJS.Timeout | null = null;
  /** Tools folders the sandbox process may read (with the permission model on). */
  readonly #roots = new Set<string>();
  readonly #prepared = new Map<string, Tool>();
  readonly #bundler = new Bundler();
  #starts = 0;
  #crashes = 0;
  #flaps = 0;
  #lastStart = 0;
  #lastProblem: string | null = null;
  readonly #startFailure = new StartBackoff(RETRY_START_MS);
  #closed = false;

  constructor(options: JsRunnerOptions = {}) {
    this.#options = options;
    this.#sizing = poolSizing(
      { size: options.processes, idleMs: options.idleMs, cores: options.cores },
      'JsRunner option processes',
      'sandbox process',
    );
  }

  /** How large the pool grows and why. */
  get sizing(): PoolSizing {
    return this.#sizing;
  }

  async run(ctx: RunContext): Promise<unknown> {
    const bundled = await this.#bundle(ctx.tool);
    if (bundled && 'problem' in bundled) throw loadFailure(ctx.tool, bundled.problem);
    const sandbox = this.#sandbox(ctx.tool);
    this.#load.set(sandbox, (this.#load.get(sandbox) ?? 0) + 1);
    try {
      try {
        await sandbox.ready;
      } catch (error) {
        throw this.#unavailable(error);
      }
      if (!bundled) return await sandbox.call(ctx);
      const { ref } = bundled;
      const builtMs = this.#bundler.takeBuildTime(ctx.tool);
      ctx.meta.bundle = { bytes: ref.bytes, ...(builtMs !== undefined ? { built_ms: builtMs } : {}) };
      return await sandbox.call(ctx, { entry: ref.entry, root: ref.root });
    } finally {
      if (this.#all.has(sandbox)) {
        this.#load.set(sandbox, (this.#load.get(sandbox) ?? 1) - 1);
        this.#lastUsed.set(sandbox, Date.now());
      }
    }
  }

  /**
   * Runs a code-mode program (code.run) in the sandbox, contained as a tool is: `program` is the body
   * of an async function of `tools`, TypeScript or JavaScript; each tool call it makes is served by
   * `tools`. `ctx` is the code.run call's.
   */
  async program(ctx: RunContext, program: string, tools: ToolCallServer): Promise<unknown> {
    const sandbox = this.#sandbox(ctx.tool);
    try {
      await sandbox.ready;
    } catch (error) {
      throw this.#unavailable(error);
    }
    return sandbox.program(ctx, program, tools);
  }

  /**
   * What a worker needs to run `tool` as it runs here (runners/remote/shipment.ts): the bundle of a tool
   * that imports packages, built here; a tool whose packages are not installed fails as a local call.
   */
  async shipment(tool: Tool): Promise<Shipment> {
    const bundled = await this.#bundler.outcome(tool);
    if (!bundled) return {};
    if ('problem' in bundled) throw loadFailure(tool, bundled.problem);
    return {
      bundle: {
        path: bundled.ref.entry,
        bytes: bundled.ref.bytes,
        ...(bundled.ref.built_ms !== undefined ? { built_ms: bundled.ref.built_ms } : {}),
      },
    };
  }

  async ready(tool: Tool): Promise<void> {
    // The bundle's outcome is kept: `run` finds it built and reports a problem it had.
    await this.#bundle(tool).catch(() => {});
  }

  async check(tool: Tool): Promise<CodeProblem | null> {
    if (!tool.entryPath || !tool.toolsDir) return null;
    const syntax = await jsSyntaxProblem(tool.entryPath, tool.toolsDir);
    if (syntax) return syntax;
    const bundled = await this.#bundle(tool);
    return bundled && 'problem' in bundled ? { ...bundled.problem, kind: 'import' } : null;
  }

  prepare(tool: Tool): void {
    if (!tool.entryPath || this.#closed) return;
    this.#prepared.set(tool.spec.id, tool);
    void this.#bundle(tool).then(
      (bundled) => {
        if (this.#closed || (bundled && 'problem' in bundled)) return;
        try {
          this.#sandbox(tool);
          for (const sandbox of this.#members) {
            if (bundled) sandbox.prepare(tool, { entry: bundled.ref.entry, root: bundled.ref.root });
            else sandbox.prepare(tool);
          }
        } catch {
          // Unavailable: the first call reports why.
        }
      },
      () => {},
    );
  }

  forget(tool: Tool): void {
    this.#prepared.delete(tool.spec.id);
    this.#bundler.forget(tool);
    for (const sandbox of this.#members) sandbox.forget(tool);
  }

  /** The bundle of a tool that imports packages (its folder readable by the sandbox process), or null. */
  async #bundle(tool: Tool): Promise<BundleOutcome | null> {
    const outcome = await this.#bundler.outcome(tool);
    if (outcome && 'ref' in outcome) {
      const bundles = dirname(outcome.ref.root);
      if (!this.#roots.has(bundles)) {
        this.#roots.add(bundles);
        if (this.#permissionFlag() !== null) this.#retireAll();
      }
    }
    return outcome;
  }

  async status(): Promise<RunnerStatus> {
    const base = {
      isolation: 'isolated-vm: a V8 isolate per running call and a fresh context per call, in a separate sandbox process',
      permission_model: this.#permissionFlag() !== null,
      process_starts: this.#starts,
      process_crashes: this.#crashes,
      last_problem: this.#lastProblem,
    };
    const ivm = this.#ivmDir();
    if (!ivm) return { available: false, reason: `isolated-vm is not installed. ${installAdvice()}`, ...base };
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
        processes: { ...this.#sizing, running: members.length, pids: members.flatMap((m) => (m.pid === undefined ? [] : [m.pid])) },
      };
    } catch (error) {
      return { available: false, reason: this.#unavailable(error).message, ...base };
    }
  }

  /** For tests: what the sandbox process itself may do (read outside its folders, start processes). */
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
    if (this.#closed) throw new ToolFailure('execution', 'UNAVAILABLE', 'The JS runner has been closed');
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
    const ivmDir = this.#ivmDir();
    if (!ivmDir) throw new ToolFailure('execution', 'MISCONFIGURED', `isolated-vm is not installed. ${installAdvice()}`);
    const worker = workerPath();
    const typescriptDir = packageDir('typescript');
    const execArgv = ['--no-node-snapshot', '--no-warnings'];
    const permission = this.#permissionFlag();
    if (permission) {
      execArgv.push(permission, '--allow-addons');
      // The folders holding isolated-vm and typescript, not only the packages: isolated-vm 6 loads its
      // binary through node-gyp-build, a package of its own, which first checks /etc/alpine-release
      // (on Node 24 existsSync throws where reading is not allowed).
      const readable = new Set([
        dirname(worker),
        dirname(ivmDir),
        ...(typescriptDir ? [dirname(typescriptDir)] : []),
        ...this.#roots,
        '/etc/alpine-release',
      ]);
      for (const dir of readable) execArgv.push(`--allow-fs-read=${dir}`);
    }
    const sandbox = new SandboxProcess({
      workerPath: worker,
      execArgv,
      workerConfig: { ivmDir, typescriptDir, maxIsolates: this.#options.maxIsolates ?? 16 },
      answers: this.#answers,
    });
    this.#starts++;
    this.#lastStart = Date.now();
    this.#members.push(sandbox);
    this.#all.add(sandbox);
    this.#load.set(sandbox, 0);
    this.#lastUsed.set(sandbox, Date.now());
    if (this.#members.length > 1) this.#watchIdle();
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

  /** New calls go elsewhere; a draining process closes itself once its calls are done, any other one is closed then too. */
  #retire(sandbox: SandboxProcess): void {
    const was = this.#members.length;
    this.#members = this.#members.filter((m) => m !== sandbox);
    sandbox.retire();
    if (!this.#closed && this.#prepared.size > 0 && was > 0 && this.#members.length === 0) this.#start();
  }

  /** Every process stops taking calls (a new tools folder they cannot read); one new one starts for warm tools. */
  #retireAll(): void {
    const old = this.#members;
    this.#members = [];
    for (const sandbox of old) sandbox.retire();
    if (!this.#closed && this.#prepared.size > 0 && old.length > 0) this.#start();
  }

  #exited(sandbox: SandboxProcess): void {
    this.#all.delete(sandbox);
    this.#load.delete(sandbox);
    this.#lastUsed.delete(sandbox);
    if (!this.#members.includes(sandbox)) return;
    this.#members = this.#members.filter((m) => m !== sandbox);
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
      if (this.#members.length <= 1 && this.#shrinkTimer !== null) {
        clearInterval(this.#shrinkTimer);
        this.#shrinkTimer = null;
      }
    }, every);
    this.#shrinkTimer.unref();
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
    return new ToolFailure('execution', code, `The JS sandbox could not start (${gist}). ${installAdvice()}`, {
      details: { runner: 'js-runner' },
    });
  }
}

/** A tool whose bundle cannot be made (a package not installed, a Node built-in in its imports) fails each call with why. */
function loadFailure(tool: Tool, problem: CodeProblem): ToolFailure {
  return new ToolFailure('execution', 'TOOL_ERROR', `${tool.spec.id} cannot be loaded: ${problem.message}`, {
    details: { file: `tools/${problem.file}`, line: problem.line, column: problem.column },
  });
}
