import { ToolFailure } from './errors.js';

export type Release = () => void;

interface Waiter {
  tool: string;
  grant: (release: Release) => void;
}

/**
 * Global and per-tool concurrency slots with one bounded FIFO queue. A waiter whose tool is at its own
 * limit does not block waiters of other tools behind it. Past the queue length, calls fail fast with
 * `BUSY` (retryable) instead of piling up.
 */
export class Limiter {
  readonly #global: number;
  readonly #perTool: number;
  readonly #queueLength: number;
  readonly #running = new Map<string, number>();
  readonly #queue: Waiter[] = [];
  #active = 0;

  constructor(global: number, perTool: number, queueLength: number) {
    this.#global = global;
    this.#perTool = perTool;
    this.#queueLength = queueLength;
  }

  get active(): number {
    return this.#active;
  }

  get queued(): number {
    return this.#queue.length;
  }

  #free(tool: string): boolean {
    return this.#active < this.#global && (this.#running.get(tool) ?? 0) < this.#perTool;
  }

  #take(tool: string): Release {
    this.#active++;
    this.#running.set(tool, (this.#running.get(tool) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#active--;
      const n = (this.#running.get(tool) ?? 1) - 1;
      if (n === 0) this.#running.delete(tool);
      else this.#running.set(tool, n);
      this.#drain();
    };
  }

  #drain(): void {
    for (let i = 0; i < this.#queue.length && this.#active < this.#global; ) {
      const waiter = this.#queue[i] as Waiter;
      if (this.#free(waiter.tool)) {
        this.#queue.splice(i, 1);
        waiter.grant(this.#take(waiter.tool));
      } else {
        i++;
      }
    }
  }

  /**
   * Takes a slot now if one is free (no queueing, no allocation of a promise). Every release drains the
   * queue, so a waiter still queued cannot run now: it waits on the global limit (then `#free` is false
   * for every tool) or on its own tool's limit (then `#free` is false for that tool). A free slot can
   * therefore go to this call without overtaking anyone: requiring an empty queue instead let one
   * saturated tool hold every other tool's calls in the queue while global slots sat idle.
   */
  tryAcquire(tool: string): Release | null {
    return this.#free(tool) ? this.#take(tool) : null;
  }

  acquire(tool: string, signal?: AbortSignal): Promise<Release> {
    const now = this.tryAcquire(tool);
    if (now) return Promise.resolve(now);
    if (this.#queue.length >= this.#queueLength) {
      return Promise.reject(
        new ToolFailure('execution', 'BUSY', `The engine is at capacity (${this.#active} running, ${this.#queue.length} queued); retry later`, {
          details: { running: this.#active, queued: this.#queue.length, queue_length: this.#queueLength },
        }),
      );
    }
    return new Promise<Release>((resolve, reject) => {
      const onAbort = () => {
        const i = this.#queue.indexOf(waiter);
        if (i !== -1) this.#queue.splice(i, 1);
        reject(new ToolFailure('execution', 'CANCELLED', 'The call was cancelled while waiting for a free slot'));
      };
      const waiter: Waiter = {
        tool,
        grant: (release) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(release);
        },
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#queue.push(waiter);
    });
  }
}

/**
 * A first-come, first-served exclusive hold on committing. A call that keeps losing races to other
 * calls' commits makes its last run while holding it: no other call commits until that run has
 * committed, so it cannot lose again. Other calls wait before committing (not before running) while
 * it is held or asked for.
 */
export class CommitGate {
  /** Settles when the last holder asked for so far lets go. */
  #tail: Promise<void> = Promise.resolve();
  #holders = 0;

  /** Whether a call holds the gate or waits for it. */
  get held(): boolean {
    return this.#holders > 0;
  }

  async hold(): Promise<Release> {
    this.#holders++;
    const before = this.#tail;
    let open!: () => void;
    this.#tail = new Promise<void>((resolve) => {
      open = resolve;
    });
    await before;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#holders--;
      open();
    };
  }

  /** Waits until nobody holds or waits for the gate, or `signal` aborts (then rejects with CANCELLED). */
  async passed(signal?: AbortSignal): Promise<void> {
    while (this.#holders > 0) {
      if (signal?.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call was cancelled while waiting to commit');
      const free = this.#tail;
      if (!signal) {
        await free;
        continue;
      }
      await new Promise<void>((resolve) => {
        const done = () => {
          signal.removeEventListener('abort', done);
          resolve();
        };
        signal.addEventListener('abort', done, { once: true });
        free.then(done);
      });
    }
  }
}
