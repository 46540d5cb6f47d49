import { dirname, posix } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { CodeProblem, RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { installAdvice, isolatedVmDir, permissionFlag } from '../js/locate.js';
import type { WasmSetup } from '../js/protocol.js';
import { IsolatedVmUnloadable, SandboxProcess } from '../js/sandbox-process.js';
import { StartBackoff } from '../shared/supervision.js';
import { wasmProblem } from './check.js';
import { wasmWorkerFile } from './locate.js';

export interface WasmRunnerOptions {
  /** Folder of the isolated-vm package to use. Default: the one installed with the engine. */
  isolatedVm?: string;
  /** Isolates the sandbox process keeps at most; each runs one call at a time. Default 16. */
  maxIsolates?: number;
  /** Confine the sandbox process with Node's permission model (reads only its own code and the tools folders). Default true where Node has it. */
  permissionModel?: boolean;
}

/** After a failed start, calls fail at once with its reason for this long before a new start is tried. */
const RETRY_START_MS = 5_000;

/**
 * Runs `wasm-runner` tools: WASI preview 1 commands (`tool.wasm`, a program with `main`), input JSON on
 * stdin, output JSON on stdout, logs on stderr. Each call runs in an isolated-vm isolate of a sandbox
 * process of its own (the JS runner's sandbox process, with the wasm worker in runners/wasm/worker/),
 * so the deadline, the memory cap and a crash are enforced there as for JS tools. THREAT_MODEL.md says
 * what this does and does not guarantee.
 */
export class WasmRunner implements Runner {
  readonly name = 'wasm-runner' as const;
  readonly interruptible = true;
  readonly #options: WasmRunnerOptions;
  #current: SandboxProcess | null = null;
  readonly #all = new Set<SandboxProcess>();
  readonly #roots = new Set<string>();
  readonly #prepared = new Map<string, Tool>();
  readonly #startFailure = new StartBackoff(RETRY_START_MS);
  #starts = 0;
  #lastProblem: string | null = null;
  #closed = false;

  constructor(options: WasmRunnerOptions = {}) {
    this.#options = options;
  }

  async run(ctx: RunContext): Promise<unknown> {
    const sandbox = this.#sandbox(ctx.tool);
    try {
      await sandbox.ready;
    } catch (error) {
      throw this.#unavailable(error);
    }
    return sandbox.call(ctx, undefined, wasmSetup(ctx.tool));
  }

  check(tool: Tool): Promise<CodeProblem | null> {
    return wasmProblem(tool);
  }

  prepare(tool: Tool): void {
    if (!tool.entryPath || this.#closed) return;
    this.#prepared.set(tool.spec.id, tool);
    try {
      this.#sandbox(tool).prepare(tool);
    } catch {
      // Unavailable: the first call reports why.
    }
  }

  forget(tool: Tool): void {
    this.#prepared.delete(tool.spec.id);
    this.#current?.forget(tool);
  }

  async status(): Promise<RunnerStatus> {
    const base = {
      isolation: 'isolated-vm: WebAssembly in a V8 isolate per running call, in a separate sandbox process; linear memory capped per call',
      permission_model: this.#permissionFlag() !== null,
      process_starts: this.#starts,
      last_problem: this.#lastProblem,
    };
    if (!this.#ivmDir()) return { available: false, reason: `isolated-vm is not installed. ${installAdvice()}`, ...base };
    const sandbox = this.#current ?? (this.#closed ? null : this.#start());
    if (!sandbox) return { available: false, reason: 'the runner is closed', ...base };
    try {
      const info = await sandbox.ready;
      const stats = await sandbox.ask('stats');
      // host: the WASI calls served by the engine (VFS) and the time the modules' isolates waited for them.
      return {
        available: true,
        ...base,
        node: info.node,
        isolated_vm: info.isolatedVm,
        pool: stats.pool,
        host: stats.host,
        in_flight: sandbox.inFlight,
      };
    } catch (error) {
      return { available: false, reason: this.#unavailable(error).message, ...base };
    }
  }

  /** For tests: what the sandbox process itself may do. */
  async probe(): Promise<Record<string, unknown>> {
    const sandbox = this.#current ?? this.#start();
    await sandbox.ready;
    return sandbox.ask('probe');
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#current = null;
    await Promise.all([...this.#all].map((p) => p.close()));
  }

  #sandbox(tool: Tool): SandboxProcess {
    if (this.#closed) throw new ToolFailure('execution', 'UNAVAILABLE', 'The wasm runner has been closed');
    if (tool.toolsDir && !this.#roots.has(tool.toolsDir)) {
      this.#roots.add(tool.toolsDir);
      // With the permission model on, a running process cannot read the new folder: start one that can.
      if (this.#current && this.#permissionFlag() !== null) this.#retire(this.#current);
    }
    if (this.#current?.accepting) return this.#current;
    const blocking = this.#startFailure.blocking();
    if (blocking !== null) throw this.#unavailable(blocking);
    return this.#start();
  }

  #start(): SandboxProcess {
    const ivmDir = this.#ivmDir();
    if (!ivmDir) throw new ToolFailure('execution', 'MISCONFIGURED', `isolated-vm is not installed. ${installAdvice()}`);
    const worker = wasmWorkerFile('main.mjs');
    const execArgv = ['--no-node-snapshot', '--no-warnings'];
    const permission = this.#permissionFlag();
    if (permission) {
      execArgv.push(permission, '--allow-addons');
      for (const dir of new Set([dirname(worker), dirname(ivmDir), ...this.#roots, '/etc/alpine-release'])) execArgv.push(`--allow-fs-read=${dir}`);
    }
    const sandbox = new SandboxProcess({ workerPath: worker, execArgv, workerConfig: { ivmDir, maxIsolates: this.#options.maxIsolates ?? 16 } });
    this.#starts++;
    this.#current = sandbox;
    this.#all.add(sandbox);
    sandbox.onDrain = () => this.#retire(sandbox);
    sandbox.onExit = () => {
      this.#all.delete(sandbox);
      if (this.#current === sandbox) this.#current = null;
    };
    for (const tool of this.#prepared.values()) {
      if (tool.toolsDir && this.#roots.has(tool.toolsDir)) sandbox.prepare(tool);
    }
    sandbox.ready.then(
      () => this.#startFailure.succeeded(),
      (error: unknown) => {
        this.#lastProblem = String((error as Error)?.message ?? error);
        this.#startFailure.failedWith(error);
      },
    );
    return sandbox;
  }

  #retire(sandbox: SandboxProcess): void {
    if (this.#current === sandbox) this.#current = null;
    sandbox.retire();
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
    const gist = reason.replace(/(?:\/[^\s'"]+)+/g, '…');
    const code = error instanceof IsolatedVmUnloadable ? 'MISCONFIGURED' : 'UNAVAILABLE';
    return new ToolFailure('execution', code, `The wasm sandbox could not start (${gist}). ${installAdvice()}`, {
      details: { runner: 'wasm-runner' },
    });
  }
}

/**
 * What a module starts with, from its definition only: argv is the entry's file name, the environment
 * names the tool, and the preopened folders are those its `vfs.read` / `vfs.write` permissions reach
 * (the literal part of each scope; every operation is still checked against the scopes themselves).
 */
export function wasmSetup(tool: Tool): WasmSetup {
  const preopens = new Set<string>();
  for (const permission of tool.declared) {
    if (permission.name !== 'vfs.read' && permission.name !== 'vfs.write') continue;
    if (permission.scope === null) {
      preopens.add('/');
      continue;
    }
    const literal = permission.prefix === permission.scope ? posix.dirname(permission.prefix) : permission.prefix.replace(/\/[^/]*$/, '');
    preopens.add(literal === '' ? '/' : posix.normalize(literal));
  }
  return {
    args: [posix.basename(tool.spec.entry ?? 'tool.wasm')],
    env: [`ARIUM_TOOL=${tool.spec.id}`],
    preopens: [...preopens].sort(),
  };
}
