import type { JournalOp, JournalRecord } from './journal.js';
import { ProjectLockedError } from './lock.js';
import { MemoryObjectStore } from './memory-objects.js';
import type { JournalPort, LiveRef, StateStore } from './port.js';

/**
 * A state kept in this process's memory: it outlives the engines opened on it (close one, open
 * another on the same store, and the tree and snapshots are back), never a restart of the process.
 * For tests, for agents that want a fresh project per run with snapshots, and as the smallest example
 * of the storage port.
 */
export class MemoryStateStore implements StateStore {
  readonly location: string;
  readonly objects = new MemoryObjectStore();
  readonly readOnly = false;
  #held = false;
  #live: LiveRef | null = null;
  #liveVersion = 0;
  #log: string[] = [];
  readonly #journal = new MemoryJournal();

  constructor(name = 'memory') {
    this.location = name;
  }

  describe(part: 'live' | 'snapshot log'): string {
    return `the ${part === 'live' ? 'checkpoint' : 'snapshot log'} of the memory store "${this.location}"`;
  }

  acquire(): void {
    if (this.#held) throw new ProjectLockedError(`The state store "${this.location}" is in use by another engine of this process`, process.pid);
    this.#held = true;
  }

  release(): void {
    this.#held = false;
  }

  holder(): number | null {
    return this.#held ? process.pid : null;
  }

  readLive(): LiveRef | null {
    return this.#live === null ? null : { ...this.#live };
  }

  writeLive(ref: LiveRef): void {
    this.#live = { root: ref.root, seq: ref.seq };
    this.#liveVersion++;
  }

  liveStamp(): string | null {
    return this.#live === null ? null : String(this.#liveVersion);
  }

  readSnapshotLog(): { lines: string[]; tornBytes: number } {
    return { lines: [...this.#log], tornBytes: 0 };
  }

  appendSnapshotLog(lines: readonly string[]): void {
    for (const line of lines) {
      if (line.includes('\n')) throw new Error('a snapshot log line must not hold a newline');
    }
    this.#log = [...this.#log, ...lines];
  }

  journal(): JournalPort {
    return this.#journal;
  }

  close(): void {}
}

class MemoryJournal implements JournalPort {
  #records: JournalRecord[] = [];
  #size = 0;

  get size(): number {
    return this.#size;
  }

  append(record: JournalRecord): void {
    // Copied: the live tree adopts the buffers it is given, and this record must not change with it.
    this.#records.push({ ...record, ops: copyOps(record.ops) });
    this.#size += recordBytes(record);
  }

  replay(): { records: JournalRecord[]; droppedBytes: number; corruptAt: number | null } {
    const records = this.#records.map((r) => ({
      ...r,
      ops: copyOps(r.ops),
    }));
    return { records, droppedBytes: 0, corruptAt: null };
  }

  reset(): void {
    this.#records = [];
    this.#size = 0;
  }
}

/** Ops with their own copies of the bytes: the live tree adopts the buffers it is given. */
function copyOps(ops: readonly JournalOp[]): JournalOp[] {
  return ops.map((op) => (op.op === 'write' ? { ...op, data: Buffer.from(op.data) } : { ...op }));
}

/** About what the record would take on disk: what the state compares with its checkpoint threshold. */
function recordBytes(record: JournalRecord): number {
  let bytes = 64;
  for (const op of record.ops as JournalOp[]) {
    bytes += 32;
    if (op.op === 'move') bytes += op.from.length + op.to.length;
    else bytes += op.path.length;
    if (op.op === 'write') bytes += op.data.length;
  }
  for (const object of record.objects ?? []) bytes += object.stored.length + 80;
  return bytes;
}
