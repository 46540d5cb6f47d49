import type { CodeProblem, RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { SandboxPool } from '../shared/sandbox-pool.js';
import { wasmProblem } from './check.js';
import { wasmWorkerFile } from './locate.js';
import { wasmSetup } from './setup.js';

export interface WasmRunnerOptions {
  /** Folder of the isolated-vm package to use. Default: the one installed with the engine. */
  isolatedVm?: string;
  /** Isolates a sandbox process keeps at most; each runs one call at a time. Default 16. */
  maxIsolates?: number;
  /** Confine the sandbox processes with Node's permission model (they read only their own code and the tools folders). Default true where Node has it. */
  permissionModel?: boolean;
  /** Sandbox processes at most (1 to POOL_LIMITS.max_members). Default one per available core. */
  processes?: number;
  /** A sandbox process with no call for this long ends, down to one. Default POOL_LIMITS.idle_ms. */
  idleMs?: number;
  /** While two or more sandbox processes run, run each on cores of its own (runners/shared/affinity.ts). Default true where it can be done. */
  pinCores?: boolean;
}

/**
 * Runs `wasm-runner` tools: WASI preview 1 commands (`tool.wasm`, a program with `main`), input JSON on
 * stdin, output JSON on stdout, logs on stderr. Each call runs in an isolated-vm isolate of a sandbox
 * process (the shared host, runners/shared/sandbox-pool.ts, running worker/), so the deadline, the
 * memory cap and a crash are enforced there as for any tool in an isolate. THREAT_MODEL.md says what
 * this does and does not guarantee.
 */
export class WasmRunner implements Runner {
  readonly name = 'wasm-runner' as const;
  readonly interruptible = true;
  readonly #pool: SandboxPool;

  constructor(options: WasmRunnerOptions = {}) {
    this.#pool = new SandboxPool({
      runner: this.name,
      label: 'WASM',
      tools: 'WebAssembly tools',
      worker: () => wasmWorkerFile('main.mjs'),
      where: 'WasmRunner option processes',
      ...options,
      workerConfig: { maxIsolates: options.maxIsolates ?? 16 },
    });
  }

  run(ctx: RunContext): Promise<unknown> {
    return this.#pool.use(ctx.tool, (sandbox) => sandbox.call(ctx, undefined, { ...wasmSetup(ctx.tool) }));
  }

  check(tool: Tool): Promise<CodeProblem | null> {
    return wasmProblem(tool);
  }

  prepare(tool: Tool): void {
    this.#pool.prepare(tool);
  }

  forget(tool: Tool): void {
    this.#pool.forget(tool);
  }

  status(): Promise<RunnerStatus> {
    // host: the WASI calls served by the engine (VFS) and the time the modules' isolates waited for them.
    return this.#pool.status(
      'isolated-vm: WebAssembly in a V8 isolate per running call, in a separate sandbox process; linear memory capped per call',
    );
  }

  /** For tests: what the sandbox process itself may do. */
  probe(): Promise<Record<string, unknown>> {
    return this.#pool.probe();
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}
