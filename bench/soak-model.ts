/**
 * What the soak benchmark expects the tracked files to hold, from what each caller was told. Writes
 * to one path are never in flight together (the soak holds a per-path lock), so a path's writes have
 * an order. Each path keeps the set of contents it may hold now: the last acknowledged write's
 * content, joined by any later write whose outcome is unknown (its answer was lost: it may or may not
 * have landed). A failed write leaves the set alone: a call that fails changes nothing. `null` is
 * "absent".
 *
 * `vfs.restore` replaces the whole tree, so snapshots and restores run while no tracked write is in
 * flight (`Gate`): the set of every path is then exactly known, copied for an acknowledged snapshot,
 * and put back by an acknowledged restore of it (joined to the current one when the restore's
 * outcome is unknown).
 */

export type Outcome = 'ok' | 'failed' | 'unknown';
type Model = Map<string, Set<string | null>>;

export class WriteModel {
  readonly #paths: string[];
  #now: Model = new Map();
  readonly #busy = new Set<string>();
  readonly #snapshots = new Map<string, Model>();
  readonly #order: string[] = [];
  acknowledged = 0;
  unknown = 0;

  constructor(paths: string[]) {
    this.#paths = paths;
    for (const path of paths) this.#now.set(path, new Set([null]));
  }

  /** A path no write is in flight to, taken until `settle`; null when all are busy. */
  take(random: () => number): string | null {
    for (let i = 0; i < 8; i++) {
      const path = this.#paths[Math.floor(random() * this.#paths.length)] as string;
      if (!this.#busy.has(path)) {
        this.#busy.add(path);
        return path;
      }
    }
    return null;
  }

  settle(path: string, content: string, outcome: Outcome): void {
    this.#busy.delete(path);
    if (outcome === 'ok') {
      this.acknowledged++;
      this.#now.set(path, new Set([content]));
    } else if (outcome === 'unknown') {
      this.unknown++;
      this.#now.get(path)?.add(content);
    }
  }

  /** Called with no write in flight: the tree now is exactly what a snapshot taken now holds. */
  snapshotTaken(id: string, keep = 8): void {
    this.#snapshots.set(id, copy(this.#now));
    this.#order.push(id);
    while (this.#order.length > keep) this.#snapshots.delete(this.#order.shift() as string);
  }

  /** A snapshot that may be restored (one of the last few acknowledged), or null. */
  restorable(random: () => number): string | null {
    if (this.#order.length === 0) return null;
    return this.#order[Math.floor(random() * this.#order.length)] as string;
  }

  restored(id: string, outcome: Outcome): void {
    const model = this.#snapshots.get(id);
    if (!model || outcome === 'failed') return;
    if (outcome === 'ok') {
      this.#now = copy(model);
      return;
    }
    for (const [path, may] of model) for (const content of may) this.#now.get(path)?.add(content);
  }

  get paths(): readonly string[] {
    return this.#paths;
  }

  /** Paths whose content is none of those it may hold, with what was found and expected. */
  check(found: ReadonlyArray<string | null>): Array<{ path: string; found: string | null; expected: Array<string | null> }> {
    const lost: Array<{ path: string; found: string | null; expected: Array<string | null> }> = [];
    this.#paths.forEach((path, i) => {
      const may = this.#now.get(path) as Set<string | null>;
      const got = found[i] ?? null;
      if (!may.has(got)) lost.push({ path, found: got, expected: [...may] });
      // What was found is now the one content it may hold: a later check must not accept an older one.
      else this.#now.set(path, new Set([got]));
    });
    return lost;
  }
}

function copy(model: Model): Model {
  return new Map([...model].map(([path, may]) => [path, new Set(may)]));
}

/**
 * Tracked writes share the gate; snapshots, restores and the check of every path take it alone, once
 * the writes in flight have ended. A waiting exclusive holder keeps new writes out, so it is not starved.
 */
export class Gate {
  #shared = 0;
  #exclusive = false;
  #waiting: Array<() => void> = [];
  #exclusiveWaiting = 0;

  async shared<T>(fn: () => Promise<T>): Promise<T> {
    while (this.#exclusive || this.#exclusiveWaiting > 0) await new Promise<void>((r) => this.#waiting.push(r));
    this.#shared++;
    try {
      return await fn();
    } finally {
      this.#shared--;
      this.#wake();
    }
  }

  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    this.#exclusiveWaiting++;
    while (this.#exclusive || this.#shared > 0) await new Promise<void>((r) => this.#waiting.push(r));
    this.#exclusiveWaiting--;
    this.#exclusive = true;
    try {
      return await fn();
    } finally {
      this.#exclusive = false;
      this.#wake();
    }
  }

  #wake(): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const wake of waiting) wake();
  }
}
