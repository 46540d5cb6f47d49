// Over 500 lines: the runner's pool of fork servers, its warm-up and its call path share the servers'
// state (one per tools folder, grown and shrunk together), which a split would pass back and forth.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, sep } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { CodeProblem, RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { Shipment } from '../remote/shipment.js';
import { leastLoaded, type PoolSizing, poolSizing } from '../shared/pool.js';
import { checking, protocolSchema } from '../shared/protocol.js';
import { StartBackoff } from '../shared/supervision.js';
import { ENV_PYTHON, EnvironmentWatch, type Stamp } from './environment-state.js';
import { findInterpreter, harnessDir, type Interpreter, interpreterTag } from './interpreter.js';
import {
  bwrapCommand,
  bwrapProblem,
  describe,
  ENV_MOUNT,
  environmentPaths,
  type Isolation,
  LANDLOCK_SCOPES,
  privileged,
  processesOfThisUser,
  sandboxLayout,
  unshareProblem,
} from './isolation.js';
import { sharedLibraries } from './libraries.js';
import { ServerProcess } from './server-process.js';
import { PythonSyntaxChecker } from './syntax.js';

export interface PythonRunnerOptions {
  /** The interpreter (a path, e.g. a virtualenv's bin/python, or a name on PATH). Default `python3`. */
  python?: string;
  /** Folder a relative `python` path is resolved against (the project folder). */
  baseDir?: string;
  /**
   * `auto` (default): bubblewrap when it works here, else the same sandbox built with unshare(2) where
   * namespaces are allowed, else rlimits only. The others ask for one tier (and fail if it is missing).
   */
  isolation?: 'auto' | 'bubblewrap' | 'unshare' | 'rlimits';
  /** Refuse to run Python tools without namespace isolation. Default false. */
  strict?: boolean;
  /**
   * The state folder that holds a pinned project's environment (`<stateDir>/python-env`, made by
   * `arium install`). Default `.arium` in the project, the tools folder's parent.
   */
  stateDir?: string;
  /** Per call: size of the private /tmp (MB), inodes in it, open files, largest file written, processes. */
  tmpMb?: number;
  tmpInodes?: number;
  openFiles?: number;
  fileMb?: number;
  processes?: number;
  /** Call processes each fork server keeps forked ahead of time. Default 2. */
  warm?: number;
  /**
   * Fork servers per tools folder at most (1 to POOL_LIMITS.max_members). Default one per available core:
   * one server relays every call it runs on one core, so fewer servers than cores is the ceiling under
   * load. Calls go to the first server while it has none in flight (back to back, one server is faster:
   * its processes and code stay in the caches); another starts when every running one has calls.
   */
  servers?: number;
  /** A fork server with no call for this long ends, down to one per tools folder. Default POOL_LIMITS.idle_ms. */
  idleMs?: number;
  /** Cores to size the pool from instead of os.availableParallelism(). */
  cores?: number;
  /** Log text a call may send back (the dispatcher trims it further to the policy's log_bytes). */
  logBytes?: number;
  /**
   * How long a fork server waits for a tool's code compiled ahead (with namespaces) before it stops
   * waiting and lets each call of that tool compile it, until the file changes. Default 2000 ms.
   */
  compileWaitMs?: number;
}

/** The numeric options: each must be a finite number, at least 0 (a size, a count, a wait in ms). */
const NUMERIC_OPTIONS = ['tmpMb', 'tmpInodes', 'openFiles', 'fileMb', 'processes', 'warm', 'logBytes', 'compileWaitMs'] as const;
const DEFAULT_COMPILE_WAIT_MS = 2000;

/** The first of the uids calls get when the engine runs as root (one per running call, so RLIMIT_NPROC is per call). */
const UID_BASE = 1_700_000_000;
const UID_SLOTS = 1024;
const RETRY_START_MS = 5_000;
/** Shipped environments (on a worker) whose fork servers are kept running at once. */
const MAX_SHIPPED_ENVIRONMENTS = 4;

/**
 * Runs `py-runner` tools: a module with `def run(input, ctx)` (or `async def`), each call in a fresh
 * process forked by a fork server that is started once per tools folder (runners/python/sandbox/arium_server.py),
 * confined as `isolation.ts` describes. THREAT_MODEL.md says what this does and does not guarantee.
 */
export class PythonRunner implements Runner {
  /** Syntax checks by tool hash (the entry's content is in it). */
  readonly #checks = new Map<string, Promise<CodeProblem | null>>();
  // A missing interpreter is reported when a tool is called (MISCONFIGURED): the check reports nothing.
  readonly #syntax = new PythonSyntaxChecker(() =>
    findInterpreter(this.#options.python, this.#options.baseDir ?? process.cwd()).then((i) => i.executable),
  );
  readonly name = 'py-runner' as const;
  readonly interruptible = true;
  readonly #options: PythonRunnerOptions;
  /** Fork servers by `<tools folder>\0<slot>`. */
  readonly #servers = new Map<string, ServerProcess>();
  readonly #workRoots = new Map<ServerProcess, string>();
  /** The environment each server runs in (null: the project's interpreter itself). */
  readonly #environments = new Map<ServerProcess, string | null>();
  /** Pinned environments by tools folder. */
  readonly #watches = new Map<string, EnvironmentWatch>();
  /** Environments shipped to this worker that have servers, least recently used first. */
  readonly #shipped = new Set<string>();
  #isolation: Promise<Isolation> | null = null;
  readonly #startFailure = new StartBackoff(RETRY_START_MS);
  /** When starting an additional server (in the background) last failed. */
  #extraFailedAt = 0;
  #starts = 0;
  /** The last line a fork server wrote to stderr before it stopped unexpectedly (for status()). */
  #lastProblem: string | null = null;
  #crashes = 0;
  /**
   * Answers of compile processes the zygotes could not use, and the last one's tool and reason: each
   * call of that tool then compiles it itself, slower but otherwise unseen (status()).
   */
  #compileRefusals = 0;
  #lastCompileRefusal: string | null = null;
  #closed = false;
  readonly #sizing: PoolSizing;
  /** Calls each server was given and has not finished (counted from the pick, before its ready wait). */
  readonly #load = new Map<ServerProcess, number>();
  readonly #lastUsed = new Map<ServerProcess, number>();
  #shrinkTimer: NodeJS.Timeout | null = null;

  constructor(options: PythonRunnerOptions = {}) {
    // Checked here, once: the fork server would take what it is given (JSON turns a NaN into null: a
    // NaN compileWaitMs crashed the zygote at its first compile, and every other call failed as
    // UNAVAILABLE while the server was replaced again and again).
    for (const name of NUMERIC_OPTIONS) {
      const value = options[name];
      if (value !== undefined && (typeof value !== 'number' || !Number.isFinite(value) || value < 0)) {
        throw new RangeError(`PythonRunner option ${name} must be a finite number of at least 0; got ${String(value)}`);
      }
    }
    this.#options = options;
    this.#sizing = poolSizing({ size: options.servers, idleMs: options.idleMs, cores: options.cores }, 'PythonRunner option servers', 'fork server');
  }

  /** How many fork servers a tools folder gets at most, and why. */
  get sizing(): PoolSizing {
    return this.#sizing;
  }

  async run(ctx: RunContext): Promise<unknown> {
    const tool = ctx.tool;
    const isolation = await this.isolation();
    if (this.#options.strict && isolation.mode === 'rlimits') {
      throw new ToolFailure(
        'execution',
        'MISCONFIGURED',
        `strict isolation is on and this machine offers no namespace isolation for Python tools (${isolation.reason ?? 'rlimits only'}); install bubblewrap or turn "strict" off`,
        { details: { isolation: isolation.mode } },
      );
    }
    const environment = await this.#environment(tool);
    const server = this.#pick(tool, environment);
    if (server !== null) this.#load.set(server, (this.#load.get(server) ?? 0) + 1);
    let used: ServerProcess | null = server;
    try {
      const ready = await this.#server(tool, environment, server);
      if (ready !== server) {
        if (server !== null) this.#load.set(server, (this.#load.get(server) ?? 1) - 1);
        used = ready;
        this.#load.set(ready, (this.#load.get(ready) ?? 0) + 1);
      }
      ctx.meta.isolation = isolation.mode;
      return await ready.call(ctx, this.#entry(tool), this.#options.logBytes ?? 256 * 1024, tool.root);
    } finally {
      if (used !== null && this.#load.has(used)) {
        this.#load.set(used, (this.#load.get(used) ?? 1) - 1);
        this.#lastUsed.set(used, Date.now());
      }
    }
  }

  async check(tool: Tool): Promise<CodeProblem | null> {
    if (this.#closed || !tool.entryPath || !tool.toolsDir) return null;
    // A tool's hash covers its entry's content: one compile per version of the file.
    let found = this.#checks.get(tool.hash);
    if (!found) {
      if (this.#checks.size >= 1000) this.#checks.clear();
      found = this.#syntax.check(tool.entryPath, tool.toolsDir);
      this.#checks.set(tool.hash, found);
    }
    return found;
  }

  forget(tool: Tool): void {
    if (this.#closed || !tool.toolsDir || !tool.entryPath) return;
    for (let slot = 0; slot < this.#slots; slot++) {
      const server = this.#servers.get(serverKey(serverGroup(tool.toolsDir, tool), slot));
      if (server?.accepting) server.forget(this.#entry(tool));
    }
  }

  get #slots(): number {
    return this.#sizing.size;
  }

  /** The isolation calls get here, decided once. */
  isolation(): Promise<Isolation> {
    this.#isolation ??= (async (): Promise<Isolation> => {
      const wanted = this.#options.isolation ?? 'auto';
      if (wanted === 'rlimits') return { mode: 'rlimits', reason: 'rlimits-only isolation was asked for' };
      const bwrap = wanted === 'unshare' ? 'not asked for' : await bwrapProblem();
      if (bwrap === null) return { mode: 'bubblewrap' };
      if (wanted === 'bubblewrap') throw new ToolFailure('execution', 'MISCONFIGURED', `Python tools need bubblewrap here, but ${bwrap}`);
      const unshare = await unshareProblem();
      if (unshare === null) return { mode: 'unshare', ...(wanted === 'auto' ? { reason: bwrap } : {}) };
      if (wanted === 'unshare') throw new ToolFailure('execution', 'MISCONFIGURED', `Python tools need namespaces here, but ${unshare}`);
      return { mode: 'rlimits', reason: `${bwrap}; ${unshare}` };
    })();
    return this.#isolation;
  }

  async status(): Promise<RunnerStatus> {
    let interpreter: Interpreter;
    try {
      interpreter = await findInterpreter(this.#options.python, this.#options.baseDir ?? process.cwd());
    } catch (error) {
      return { available: false, reason: (error as Error).message };
    }
    let isolation: Isolation;
    try {
      isolation = await this.isolation();
    } catch (error) {
      return { available: false, reason: (error as Error).message };
    }
    const base = {
      python: interpreter.version,
      executable: interpreter.executable,
      isolation: isolation.mode,
      isolation_detail: describe(isolation),
      ...(isolation.reason ? { isolation_reason: isolation.reason } : {}),
      namespaces: isolation.mode !== 'rlimits',
      strict: this.#options.strict === true,
      uid: this.#uidNote() ?? (privileged() ? 'a uid of its own per call' : 'the engine user (capabilities dropped)'),
      ...this.#abstractSockets(isolation),
      servers: this.#servers.size,
      // Fork servers per tools folder at most (each started when every running one has calls), and why.
      servers_per_folder: this.#sizing,
      // Host pids of the processes the runner started for its servers (bwrap, unshare or Python itself).
      server_pids: [...this.#servers.values()].flatMap((server) => (server.pid === undefined ? [] : [server.pid])),
      server_starts: this.#starts,
      server_crashes: this.#crashes,
      last_problem: this.#lastProblem,
      compile_refusals: this.#compileRefusals,
      last_compile_refusal: this.#lastCompileRefusal,
    };
    if (this.#options.strict && isolation.mode === 'rlimits') {
      return { available: false, reason: 'strict isolation is on and namespace isolation is not available', ...base };
    }
    return { available: true, ...base };
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#shrinkTimer) clearInterval(this.#shrinkTimer);
    this.#shrinkTimer = null;
    const servers = [...this.#servers.values()];
    this.#servers.clear();
    await Promise.all(servers.map((s) => s.close()));
    for (const dir of this.#workRoots.values()) rmSync(dir, { recursive: true, force: true });
    this.#workRoots.clear();
  }

  /**
   * Whether calls running at the same time can reach each other's abstract Unix sockets (loopback and
   * netlink sockets they cannot open at all), as the running fork servers found the kernel.
   */
  #abstractSockets(isolation: Isolation): { abstract_sockets?: string } {
    if (isolation.mode === 'rlimits') return {};
    for (const server of this.#servers.values()) {
      const abi = server.info?.landlock;
      if (abi === undefined) continue;
      return {
        abstract_sockets:
          abi >= LANDLOCK_SCOPES
            ? `scoped per call (Landlock ABI ${abi})`
            : `shared by the calls running at the same time in one fork server (${abi === 0 ? 'no Landlock' : `Landlock ABI ${abi}`}; scoping needs Linux 6.12 or later)`,
      };
    }
    return {};
  }

  /** Why calls keep uid 0 (as root), as the running fork servers found it. */
  #uidNote(): string | undefined {
    for (const server of this.#servers.values()) if (server.info?.uidNote) return server.info.uidNote;
    return undefined;
  }

  /**
   * What a worker needs to run `tool` as it runs here (runners/remote/shipment.ts): the project's pinned
   * environment and the interpreter it was made for; a missing or stale one fails as a local call does.
   */
  async shipment(tool: Tool): Promise<Shipment> {
    const found = await this.#pinned(tool);
    if (found === null) return {};
    return { environment: { dir: found.dir, python: found.stamp.python_tag ?? (await interpreterTag(join(found.dir, ENV_PYTHON))) } };
  }

  /** The real folder of the environment the tool runs in, null for none; a missing or stale one fails the call. */
  async #environment(tool: Tool): Promise<string | null> {
    // A worker's copy of the environment the engine shipped with the call.
    if (tool.environment !== undefined) return tool.environment;
    return (await this.#pinned(tool))?.dir ?? null;
  }

  /** The environment the tool's project pins, null when it pins nothing; a missing or stale one fails the call. */
  async #pinned(tool: Tool): Promise<{ dir: string; stamp: Stamp } | null> {
    const toolsDir = tool.toolsDir;
    if (!toolsDir) return null;
    let watch = this.#watches.get(toolsDir);
    if (!watch) {
      const projectDir = dirname(toolsDir);
      watch = new EnvironmentWatch(projectDir, this.#options.stateDir ?? join(projectDir, '.arium'));
      this.#watches.set(toolsDir, watch);
    }
    const found = await watch.current(() => this.#interpreter());
    if (found.state === 'unpinned') return null;
    if (found.state === 'ready') return found;
    // Not UNAVAILABLE: that code is retryable, and no retry helps until someone runs the install.
    throw new ToolFailure('execution', 'MISCONFIGURED', `${tool.spec.id} cannot run: ${found.detail}`, {
      details: { runner: 'py-runner', environment: found.state, reason: found.reason },
    });
  }

  async #interpreter(): Promise<Interpreter> {
    try {
      return await findInterpreter(this.#options.python, this.#options.baseDir ?? process.cwd());
    } catch (error) {
      throw new ToolFailure('execution', 'MISCONFIGURED', (error as Error).message, { details: { runner: 'py-runner' } });
    }
  }

  #entry(tool: Tool): string {
    if (!tool.entryPath || !tool.toolsDir) throw new ToolFailure('execution', 'INTERNAL', `${tool.spec.id} has no entry file`);
    return relative(tool.toolsDir, tool.entryPath).split(sep).join('/');
  }

  /**
   * The running server a call of `tool` goes to: the least loaded, and of those the first, so that
   * back-to-back calls all go to one server, whose warm processes and code are then the ones in the
   * caches, and the others take calls only while it has some in flight. Null when none runs.
   */
  #pick(tool: Tool, environment: string | null): ServerProcess | null {
    if (this.#closed || !tool.toolsDir) return null;
    const group = serverGroup(tool.toolsDir, tool);
    const running: ServerProcess[] = [];
    for (let slot = 0; slot < this.#slots; slot++) {
      const candidate = this.#retireIfMoved(serverKey(group, slot), environment);
      if (candidate?.accepting) running.push(candidate);
    }
    return leastLoaded(
      running,
      (s) => this.#load.get(s) ?? 0,
      (s) => s.info !== null,
    );
  }

  /**
   * `picked` once ready, or a server started for the call when none ran. When every running server has
   * calls, one more starts in the background for the calls after this one (up to the pool's size), so
   * no call waits for two start-ups.
   */
  async #server(tool: Tool, environment: string | null, picked: ServerProcess | null): Promise<ServerProcess> {
    if (this.#closed) throw new ToolFailure('execution', 'UNAVAILABLE', 'The Python runner has been closed');
    const toolsDir = tool.toolsDir;
    if (!toolsDir) throw new ToolFailure('execution', 'INTERNAL', `${tool.spec.id} has no tools folder`);
    const group = serverGroup(toolsDir, tool);
    if (tool.environment !== undefined) this.#keepShipped(tool.environment);
    let missing = -1;
    for (let slot = 0; slot < this.#slots && missing < 0; slot++) {
      if (!this.#servers.get(serverKey(group, slot))?.accepting) missing = slot;
    }
    let server = picked?.accepting ? picked : null;
    if (server === null) {
      const blocking = this.#startFailure.blocking();
      if (blocking !== null) throw this.#unavailable(blocking);
      if (missing < 0) throw new ToolFailure('execution', 'UNAVAILABLE', 'The Python runner has no fork server to take the call');
      server = await this.#start(toolsDir, group, missing, environment);
    } else if (
      missing >= 0 &&
      (this.#load.get(server) ?? 0) > 1 &&
      server.info !== null &&
      !this.#startFailure.failed &&
      Date.now() - this.#extraFailedAt > RETRY_START_MS
    ) {
      const failed = () => {
        this.#extraFailedAt = Date.now();
      };
      this.#start(toolsDir, group, missing, environment).then((extra) => extra.ready.catch(failed), failed);
    }
    try {
      await server.ready;
      this.#startFailure.succeeded();
    } catch (error) {
      this.#startFailure.failedWith(error);
      throw this.#unavailable(error);
    }
    return server;
  }

  /** The server at `key`, unless it runs in another environment than the project's now: that one takes no more calls and stops once idle. */
  #retireIfMoved(key: string, environment: string | null): ServerProcess | undefined {
    const server = this.#servers.get(key);
    if (server === undefined || this.#environments.get(server) === environment) return server;
    this.#servers.delete(key);
    server.retire();
    return undefined;
  }

  /**
   * A worker's shipped environments each keep servers of their own (serverGroup); those of the least
   * recently used beyond MAX_SHIPPED_ENVIRONMENTS stop once idle.
   */
  #keepShipped(environment: string): void {
    this.#shipped.delete(environment);
    this.#shipped.add(environment);
    if (this.#shipped.size <= MAX_SHIPPED_ENVIRONMENTS) return;
    const oldest = this.#shipped.values().next().value as string;
    this.#shipped.delete(oldest);
    for (const [key, server] of this.#servers) {
      if (this.#environments.get(server) !== oldest) continue;
      this.#servers.delete(key);
      server.retire();
    }
  }

  async #start(toolsDir: string, group: string, slot: number, environment: string | null): Promise<ServerProcess> {
    const base = await this.#interpreter();
    let interpreter = base;
    if (environment !== null) {
      try {
        interpreter = await findInterpreter(join(environment, ENV_PYTHON), environment);
      } catch (error) {
        throw new ToolFailure(
          'execution',
          'MISCONFIGURED',
          `The project's Python environment does not start (${(error as Error).message}): run \`arium install\``,
          {
            details: { runner: 'py-runner', environment: 'broken' },
          },
        );
      }
    }
    const isolation = await this.isolation();
    // Before the look for a running server below: nothing may wait between that look and the start.
    const libraries = isolation.mode === 'rlimits' ? null : await sharedLibraries(interpreter);
    const key = serverKey(group, slot);
    const existing = this.#retireIfMoved(key, environment);
    if (existing?.accepting) return existing;
    const harness = harnessDir();
    const namespaces = isolation.mode !== 'rlimits';
    const asRoot = privileged();
    const processes = this.#options.processes ?? 32;
    // rlimits: the calls' working folders; unshare: the empty folder the sandbox's root is built on.
    const workRoot = isolation.mode === 'bubblewrap' ? null : mkdtempSync(`${tmpdir()}${sep}arium-py-`);
    const paths =
      environment === null
        ? { executable: interpreter.executable, roots: interpreter.roots, harness, tools: toolsDir, needs: interpreter.needs, libraries }
        : environmentPaths(interpreter, base, environment, harness, toolsDir, libraries);
    // The environment as the server sees it: at ENV_MOUNT with namespaces, where it is without.
    const venv = environment === null ? null : { host: environment, path: namespaces ? ENV_MOUNT : environment };
    // Each call's working folder inside is its own uid's, mode 0700; this one only lets them be reached.
    if (workRoot) chmodSync(workRoot, 0o711);
    const config = {
      namespaces,
      seccomp: true,
      tools_dir: namespaces ? '/tools' : toolsDir,
      tools_prefix: namespaces ? '/tools/' : `${toolsDir}/`,
      work_root: workRoot,
      uid_base: asRoot ? UID_BASE : null,
      uid_slots: UID_SLOTS,
      processes,
      // Without a uid of its own, RLIMIT_NPROC counts every process of the engine's user.
      nproc: asRoot ? null : processesOfThisUser() + processes,
      open_files: this.#options.openFiles ?? 64,
      file_bytes: (this.#options.fileMb ?? 16) * 1024 * 1024,
      tmp_kb: (this.#options.tmpMb ?? 64) * 1024,
      tmp_inodes: this.#options.tmpInodes ?? 4096,
      max_frame: 256 * 1024 * 1024,
      // Call processes forked ahead of time, so a call does not wait for a fork.
      warm: this.#options.warm ?? 2,
      compile_wait_s: (this.#options.compileWaitMs ?? DEFAULT_COMPILE_WAIT_MS) / 1000,
      stdlib: interpreter.stdlib,
      venv,
      ...(isolation.mode === 'unshare' && workRoot ? { unshare: { layout: sandboxLayout(paths), root: workRoot } } : {}),
      // The engine's tests check the frames between the server and its call processes, which only the server sees.
      ...(checking() ? { protocol: protocolSchema().$defs } : {}),
    };
    const inBwrap = isolation.mode === 'bubblewrap';
    const serverArgs = ['-I', '-B', `${inBwrap ? '/arium' : harness}/arium_server.py`, JSON.stringify(config)];
    const start = inBwrap
      ? { command: 'bwrap', args: bwrapCommand(paths, serverArgs), cwd: '/' }
      : { command: interpreter.executable, args: serverArgs, cwd: workRoot ?? '/' };
    const server = new ServerProcess(start);
    this.#starts++;
    this.#servers.set(key, server);
    this.#load.set(server, this.#load.get(server) ?? 0);
    this.#lastUsed.set(server, Date.now());
    // Idle counts from when it could first take a call.
    server.ready.then(
      () => this.#lastUsed.set(server, Date.now()),
      () => {},
    );
    if (slot > 0) this.#watchIdle();
    this.#environments.set(server, environment);
    if (workRoot) this.#workRoots.set(server, workRoot);
    server.onCompileRefused = (entry, why) => {
      this.#compileRefusals++;
      this.#lastCompileRefusal = `${entry}: ${why}`;
    };
    server.onExit = () => {
      if (this.#servers.get(key) === server) {
        this.#servers.delete(key);
        if (!this.#closed && server.info !== null) {
          this.#crashes++;
          this.#lastProblem = server.lastError() || null;
        }
      }
      const dir = this.#workRoots.get(server);
      if (dir) rmSync(dir, { recursive: true, force: true });
      this.#workRoots.delete(server);
      this.#environments.delete(server);
      this.#load.delete(server);
      this.#lastUsed.delete(server);
    };
    return server;
  }

  /**
   * While a tools folder has more than one server, ends those idle for `idle_ms`, the later slots first
   * and never slot 0 (the one back-to-back calls go to), so an idle engine keeps one server per folder.
   */
  #watchIdle(): void {
    if (this.#shrinkTimer !== null || this.#closed) return;
    const every = Math.max(10, Math.min(1_000, Math.floor(this.#sizing.idle_ms / 2)));
    this.#shrinkTimer = setInterval(() => {
      const now = Date.now();
      let extra = 0;
      for (const [key, server] of this.#servers) {
        const first = serverKey(key.slice(0, key.lastIndexOf('\u0000')), 0);
        if (key === first) continue;
        const idle = (this.#load.get(server) ?? 0) === 0 && server.inFlight === 0 && server.info !== null;
        if (idle && now - (this.#lastUsed.get(server) ?? now) >= this.#sizing.idle_ms && this.#servers.has(first)) {
          this.#servers.delete(key);
          server.retire();
        } else {
          extra++;
        }
      }
      if (extra === 0 && this.#shrinkTimer !== null) {
        clearInterval(this.#shrinkTimer);
        this.#shrinkTimer = null;
      }
    }, every);
    this.#shrinkTimer.unref();
  }

  #unavailable(error: unknown): ToolFailure {
    if (error instanceof ToolFailure) return error;
    const reason = String((error as Error)?.message ?? error).split('\n')[0] ?? '';
    return new ToolFailure(
      'execution',
      'UNAVAILABLE',
      `The Python sandbox could not start (${reason}). Run \`arium doctor\` to see what is missing`,
      {
        details: { runner: 'py-runner' },
      },
    );
  }
}

function serverKey(group: string, slot: number): string {
  return `${group}\u0000${slot}`;
}

/**
 * Which servers a tool's calls go to: those of its tools folder, in the project's environment of the
 * moment (a new install replaces them); on a worker, where one tools folder serves every engine, those
 * of the environment shipped with it, so calls of several projects do not replace each other's servers.
 */
function serverGroup(toolsDir: string, tool: Tool): string {
  return tool.environment === undefined ? toolsDir : `${toolsDir}\u0000${tool.environment}`;
}
