import { dirname } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { CodeProblem, RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { Shipment } from '../remote/shipment.js';
import type { Pinning } from '../shared/affinity.js';
import type { PoolSizing } from '../shared/pool.js';
import { SandboxPool } from '../shared/sandbox-pool.js';
import type { ToolCallServer } from '../shared/sandbox-process.js';
import { type BundleOutcome, Bundler } from './bundle.js';
import { packageDir, workerPath } from './locate.js';
import { jsSyntaxProblem } from './syntax.js';

export interface JsRunnerOptions {
  /** Folder of the isolated-vm package to use. Default: the one installed with the engine. */
  isolatedVm?: string;
  /** Isolates the sandbox process keeps at most; each runs one call at a time. Default 16. */
  maxIsolates?: number;
  /**
   * Isolates a sandbox process serves its calls with before it makes more: calls beyond them wait for
   * one of them, and one more is made (up to maxIsolates) for each call that has held its isolate for
   * longCallMs or whose program waits on the tools it called. Default 8.
   */
  rotation?: number;
  /** How long a call holds its isolate before it stops counting against the rotation. Default 1000. */
  longCallMs?: number;
  /** Confine the sandbox process with Node's permission model (reads only its own code and the tools folder, no child processes). Default true where Node has it. */
  permissionModel?: boolean;
  /** Sandbox processes at most (1 to POOL_LIMITS.max_members). Default one per available core. */
  processes?: number;
  /** A sandbox process with no call for this long ends, down to one. Default POOL_LIMITS.idle_ms. */
  idleMs?: number;
  /** Cores to size the pool from instead of os.availableParallelism(). */
  cores?: number;
  /**
   * While two or more sandbox processes run, run each on cores of its own (taskset,
   * runners/shared/affinity.ts), so its threads stay on them. Default true on Linux with taskset and
   * two or more cores, for pools of two or more.
   */
  pinCores?: boolean;
  /** For tests: the cores to pin to instead of those the engine may use. */
  pinTo?: readonly number[];
}

/**
 * Runs `js-runner` tools: ES modules (`export default async function run(input, ctx)`) in isolated-vm
 * isolates, one isolate and a fresh context per call, inside sandbox processes of their own (a pool of
 * them, runners/shared/sandbox-pool.ts, running worker/). THREAT_MODEL.md says what this does and does
 * not guarantee.
 *
 * isolated-vm is never loaded in the engine process: when it is missing or does not load, only JS
 * calls fail (UNAVAILABLE, with how to fix the install); builtins and Python tools are unaffected.
 */
export class JsRunner implements Runner {
  readonly name = 'js-runner' as const;
  readonly interruptible = true;
  readonly #pool: SandboxPool;
  readonly #bundler = new Bundler();

  constructor(options: JsRunnerOptions = {}) {
    for (const [name, max] of [
      ['maxIsolates', 1024],
      ['rotation', 1024],
      ['longCallMs', 3_600_000],
    ] as const) {
      const value = options[name];
      if (value !== undefined && !(Number.isInteger(value) && value >= 1 && value <= max)) {
        throw new RangeError(`JsRunner option ${name} must be an integer from 1 to ${max}; got ${String(value)}`);
      }
    }
    const typescriptDir = packageDir('typescript');
    this.#pool = new SandboxPool({
      runner: this.name,
      label: 'JS',
      tools: 'JavaScript tools',
      worker: workerPath,
      where: 'JsRunner option processes',
      ...options,
      // The folder holding typescript, which the worker loads to strip types.
      readable: typescriptDir ? [dirname(typescriptDir)] : [],
      workerConfig: {
        typescriptDir,
        maxIsolates: options.maxIsolates ?? 16,
        // Defaults (8, 1000) in the worker's pool.mjs.
        rotation: options.rotation,
        longCallMs: options.longCallMs,
      },
    });
  }

  /** How large the pool grows and why. */
  get sizing(): PoolSizing {
    return this.#pool.sizing;
  }

  /** Whether each sandbox process runs on cores of its own, and why. */
  get pinning(): Pinning {
    return this.#pool.pinning;
  }

  async run(ctx: RunContext): Promise<unknown> {
    // A warm call finds its tool's outcome known and its process started: it waits for neither.
    const known = this.#current(ctx.tool);
    const bundled = known !== undefined ? known : await this.#bundle(ctx.tool);
    if (bundled && 'problem' in bundled) throw loadFailure(ctx.tool, bundled.problem);
    return this.#pool.use(ctx.tool, (sandbox) => {
      if (!bundled) return sandbox.call(ctx);
      const { ref } = bundled;
      const builtMs = this.#bundler.takeBuildTime(ctx.tool);
      ctx.meta.bundle = { bytes: ref.bytes, ...(builtMs !== undefined ? { built_ms: builtMs } : {}) };
      return sandbox.call(ctx, { entry: ref.entry, root: ref.root });
    });
  }

  /**
   * Runs a code-mode program (code.run) in the sandbox, contained as a tool is: `program` is the body
   * of an async function of `tools`, TypeScript or JavaScript; each tool call it makes is served by
   * `tools`. `ctx` is the code.run call's.
   */
  async program(ctx: RunContext, program: string, tools: ToolCallServer): Promise<unknown> {
    return this.#pool.use(ctx.tool, (sandbox) => sandbox.program(ctx, program, tools));
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

  ready(tool: Tool): Promise<void> | undefined {
    try {
      if (this.#current(tool) !== undefined) return undefined;
    } catch {
      // Reported by the call's `run`.
    }
    // The bundle's outcome is kept: `run` finds it built and reports a problem it had.
    return this.#bundle(tool).then(
      () => {},
      () => {},
    );
  }

  async check(tool: Tool): Promise<CodeProblem | null> {
    if (!tool.entryPath || !tool.toolsDir) return null;
    const syntax = await jsSyntaxProblem(tool.entryPath, tool.toolsDir);
    if (syntax) return syntax;
    const bundled = await this.#bundle(tool);
    return bundled && 'problem' in bundled ? { ...bundled.problem, kind: 'import' } : null;
  }

  prepare(tool: Tool): void {
    if (!tool.entryPath || this.#pool.closed) return;
    void this.#bundle(tool).then(
      (bundled) => {
        if (this.#pool.closed || (bundled && 'problem' in bundled)) return;
        this.#pool.prepare(tool, bundled ? { entry: bundled.ref.entry, root: bundled.ref.root } : undefined);
      },
      () => {},
    );
  }

  forget(tool: Tool): void {
    this.#bundler.forget(tool);
    this.#pool.forget(tool);
  }

  /** The bundle of a tool that imports packages (its folder readable by the sandbox process), or null. */
  async #bundle(tool: Tool): Promise<BundleOutcome | null> {
    return this.#readable(await this.#bundler.outcome(tool));
  }

  /** `#bundle`'s answer when it is known without waiting (see Bundler.current); undefined otherwise. */
  #current(tool: Tool): BundleOutcome | null | undefined {
    const outcome = this.#bundler.current(tool);
    return outcome === undefined ? undefined : this.#readable(outcome);
  }

  /** A bundle's folder joins those the sandbox processes may read. */
  #readable(outcome: BundleOutcome | null): BundleOutcome | null {
    if (outcome && 'ref' in outcome) this.#pool.allowRead(dirname(outcome.ref.root));
    return outcome;
  }

  status(): Promise<RunnerStatus> {
    return this.#pool.status(
      'isolated-vm: a V8 isolate per running call and a fresh context per call (a context kept between calls for a tool that declares "context": "persistent"), in a separate sandbox process',
    );
  }

  /** For tests: what the sandbox process itself may do (read outside its folders, start processes). */
  probe(): Promise<Record<string, unknown>> {
    return this.#pool.probe();
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}

/** A tool whose bundle cannot be made (a package not installed, a Node built-in in its imports) fails each call with why. */
function loadFailure(tool: Tool, problem: CodeProblem): ToolFailure {
  return new ToolFailure('execution', 'TOOL_ERROR', `${tool.spec.id} cannot be loaded: ${problem.message}`, {
    details: { file: `tools/${problem.file}`, line: problem.line, column: problem.column },
  });
}
