/**
 * Concurrency slots a provider's own policies set, besides the engine's: at most `limit(tool)` calls of
 * one tool and `total` calls in all. A call past either waits in one FIFO queue (a waiter whose tool is
 * full does not hold back waiters of other tools); past `queueLength` waiters it is refused at once, so a
 * burst cannot pile up without bound.
 */
export type Release = () => void;

interface Waiter {
  tool: string;
  grant: (release: Release) => void;
}

export class SlotsFull extends Error {
  override readonly name = 'SlotsFull';
}

export class Slots {
  readonly #running = new Map<string, number>();
  readonly #queue: Waiter[] = [];
  #active = 0;

  constructor(
    readonly total: number,
    readonly limit: (tool: string) => number,
    readonly queueLength: number,
  ) {}

  running(tool: string): number {
    return this.#running.get(tool) ?? 0;
  }

  get queued(): number {
    return this.#queue.length;
  }

  #free(tool: string): boolean {
    return this.#active < this.total && this.running(tool) < this.limit(tool);
  }

  #take(tool: string): Release {
    this.#active++;
    this.#running.set(tool, this.running(tool) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#active--;
      const n = this.running(tool) - 1;
      if (n === 0) this.#running.delete(tool);
      else this.#running.set(tool, n);
      this.#drain();
    };
  }

  #drain(): void {
    for (let i = 0; i < this.#queue.length && this.#active < this.total; ) {
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
   * A slot for one call of `tool`: at once when one is free, else when one frees. Rejects with `SlotsFull`
   * when the queue is full, and with the signal's reason when it aborts first.
   */
  acquire(tool: string, signal: AbortSignal): Promise<Release> {
    if (this.#free(tool)) return Promise.resolve(this.#take(tool));
    if (this.#queue.length >= this.queueLength) {
      return Promise.reject(new SlotsFull(`${this.#queue.length} calls already wait for a slot (at most ${this.queueLength})`));
    }
    return new Promise<Release>((resolve, reject) => {
      const onAbort = () => {
        const i = this.#queue.indexOf(waiter);
        if (i !== -1) this.#queue.splice(i, 1);
        reject(signal.reason);
      };
      const waiter: Waiter = {
        tool,
        grant: (release) => {
          signal.removeEventListener('abort', onAbort);
          resolve(release);
        },
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.#queue.push(waiter);
    });
  }
}
