import { ToolFailure } from '../../src/errors.js';
import type { RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { Builtin } from './define.js';
import { FS_BUILTINS } from './fs-tools.js';
import { systemHash } from './hash-tool.js';
import { VFS_BUILTINS } from './vfs-tools.js';

export const BUILTINS: readonly Builtin[] = [...FS_BUILTINS, systemHash, ...VFS_BUILTINS];

/** Runs the engine's own tools in-process: VFS primitives and hashing. */
export class BuiltinRunner implements Runner {
  readonly name = 'builtin' as const;
  readonly interruptible = false;
  // Snapshots, diff and restore work on the durable state itself, not on one call's view of it.
  readonly capabilities = ['history'] as const;
  readonly #handlers = new Map<string, Builtin['handler']>();

  constructor(builtins: readonly Builtin[] = BUILTINS) {
    for (const b of builtins) this.#handlers.set(b.tool.spec.id, b.handler);
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
    return handler(ctx.input as Record<string, unknown>, ctx);
  }

  async status(): Promise<RunnerStatus> {
    return { available: true };
  }

  async close(): Promise<void> {}
}
