import { ToolFailure } from '../../src/errors.js';
import type { RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { Builtin } from './define.js';
import { DISCOVERY_BUILTINS } from './discovery-tools.js';
import { ExecService } from './exec/service.js';
import { type ExecSettings, execSettings } from './exec/settings.js';
import { systemExec } from './exec/tool.js';
import { FS_BUILTINS } from './fs-tools.js';
import { systemHash } from './hash-tool.js';
import { BuiltinHost } from './host.js';
import { shellRun } from './shell-tool.js';
import { VFS_BUILTINS } from './vfs-tools.js';

export const BUILTINS: readonly Builtin[] = [...FS_BUILTINS, systemHash, systemExec, ...VFS_BUILTINS, shellRun, ...DISCOVERY_BUILTINS];

/**
 * Runs the engine's own tools in-process: VFS primitives and hashing, synchronously; `shell.run`, whose
 * script runs in a worker thread, and `system.exec`, which waits for its sandboxed program, while the
 * call waits (`asyncTools` entries).
 */
export class BuiltinRunner implements Runner {
  readonly name = 'builtin' as const;
  // The builtins that wait (asyncTools) get a deadline from the executor all the same; the others run
  // through runSync, where it arms none.
  readonly interruptible = false;
  // Snapshots, diff and restore work on the durable state itself, not on one call's view of it;
  // tools.call runs its tool as a step of its own call; discovery shows the caller's callable tools.
  readonly capabilities = ['history', 'steps', 'catalog'] as const;
  readonly asyncTools: ReadonlySet<string>;
  readonly #handlers = new Map<string, Builtin['handler']>();
  readonly #host: BuiltinHost;

  constructor(builtins: readonly Builtin[] = BUILTINS, exec: ExecSettings = execSettings(undefined, process.cwd())) {
    for (const b of builtins) this.#handlers.set(b.tool.spec.id, b.handler);
    this.asyncTools = new Set(builtins.filter((b) => b.async).map((b) => b.tool.spec.id));
    this.#host = new BuiltinHost(new ExecService(exec));
  }

  tools(): Tool[] {
    return BUILTINS.map((b) => b.tool);
  }

  async run(ctx: RunContext): Promise<unknown> {
    return this.runSync(ctx);
  }

  runSync(ctx: RunContext): unknown {
    const handler = this.#handlers.get(ctx.tool.spec.id);
    if (!handler) throw new ToolFailure('execution', 'INTERNAL', `No builtin implementation for ${ctx.tool.spec.id}`);
    return handler(ctx.input as Record<string, unknown>, ctx, this.#host);
  }

  async status(): Promise<RunnerStatus> {
    const problem = await this.#host.exec.problem();
    // shell: the worker threads of shell.run (none until the first shell call).
    return {
      available: true,
      exec: problem ? { available: false, reason: problem.message } : { available: true },
      shell: this.#host.status(),
    };
  }

  async close(): Promise<void> {
    this.#host.exec.close();
    await this.#host.close();
  }
}
