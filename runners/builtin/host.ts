import type { ExecService } from './exec/service.js';
import type { ShellPool, ShellPoolStatus } from './shell/pool.js';

/**
 * What the builtin runner keeps for its tools between calls: system.exec's settings and mirror, and
 * the worker threads of `shell.run`, made at the first shell call (a start that runs no script loads
 * none of it) and ended with the engine.
 */
export class BuiltinHost {
  constructor(readonly exec: ExecService) {}

  #shells: Promise<ShellPool> | null = null;
  #pool: ShellPool | null = null;
  #closed = false;

  /** The shell's threads (the module is imported at the first call). */
  shells(): Promise<ShellPool> {
    this.#shells ??= import('./shell/pool.js').then(({ ShellPool }) => {
      this.#pool = new ShellPool();
      if (this.#closed) void this.#pool.close();
      return this.#pool;
    });
    return this.#shells;
  }

  status(): ShellPoolStatus {
    return this.#pool?.status() ?? { workers: 0, idle: 0, started: 0 };
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#pool?.close();
  }
}
