import { ToolFailure } from '../../src/errors.js';
import type { RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { Builtin, BuiltinHost } from './define.js';
import { ExecService } from './exec/service.js';
import { type ExecSettings, execSettings } from './exec/settings.js';
import { systemExec } from './exec/tool.js';
import { FS_BUILTINS } from './fs-tools.js';
import { systemHash } from './hash-tool.js';
import { VFS_BUILTINS } from './vfs-tools.js';

export const BUILTINS: readonly Builtin[] = [...FS_BUILTINS, systemHash, systemExec, ...VFS_BUILTINS];

/** Runs the engine's own tools in-process: VFS primitives and hashing; system.exec waits for its sandboxed program. */
export class BuiltinRunner implements Runner {
  readonly name = 'builtin' as const;
  // Only the async builtins (system.exec) reach `run` with a deadline to keep; the others run through
  // runSync, where the executor arms none.
  readonly interruptible = true;
  // Snapshots, diff and restore work on the durable state itself, not on one call's view of it.
  readonly capabilities = ['history'] as const;
  readonly #handlers = new Map<string, Builtin['handler']>();
  readonly #async = new Set<string>();
  readonly #host: BuiltinHost;

  constructor(builtins: readonly Builtin[] = BUILTINS, exec: ExecSettings = execSettings(undefined, process.cwd())) {
    for (const b of builtins) {
      this.#handlers.set(b.tool.spec.id, b.handler);
      if (b.async) this.#async.add(b.tool.spec.id);
    }
    this.#host = { exec: new ExecService(exec) };
  }

  tools(): Tool[] {
    return BUILTINS.map((b) => b.tool);
  }

  waits(tool: Tool): boolean {
    return this.#async.has(tool.spec.id);
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
    return { available: true, exec: problem ? { available: false, reason: problem.message } : { available: true } };
  }

  async close(): Promise<void> {
    this.#host.exec.close();
  }
}
