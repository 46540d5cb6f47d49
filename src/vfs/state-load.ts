import { JournalCorruptError, type JournalRecord } from '../store/journal.js';
import type { Objects } from '../store/memory-objects.js';
import { CorruptObjectError } from '../store/objects.js';
import type { JournalPort, LiveRef, StateStore } from '../store/port.js';
import type { SnapshotInfo } from './state.js';
import { applyOps, type OpTarget } from './transaction.js';
import { decodeTree, type TreeIndex } from './tree-index.js';
import type { Vfs } from './vfs.js';

/** The state folder could not be read as it is; the message says what is wrong and how to recover. */
export class StateCorruptError extends Error {
  override readonly name = 'StateCorruptError';
}

export interface RecoveryReport {
  /** Bytes of a torn last journal record that was never acknowledged, dropped. */
  torn_bytes: number;
  /** What `recover` had to give up, one line each. */
  lost: string[];
}

export interface RecoveryReport {
  /** Bytes of a torn last journal record that was never acknowledged, dropped. */
  torn_bytes: number;
  /** What `recover` had to give up, one line each. */
  lost: string[];
}

/** A read-only open met the state mid-change by the engine that holds it: reading it again will do. */
export class InconsistentReadError extends Error {
  override readonly name = 'InconsistentReadError';
}

/** Where a state being opened is loaded into: the VfsState's own tree, index, objects and recovery report. */
export interface LoadTarget {
  store: StateStore;
  vfs: Vfs;
  index: TreeIndex;
  objects: Objects;
  recovery: RecoveryReport;
  /** Opened read-only: a torn record is the holder's record being appended, not a loss. */
  readOnly: boolean;
  /** The committed tree as journal records are applied to it (see VfsState's #target). */
  target: () => OpTarget;
}

/**
 * Reads a state back when it is opened: the snapshot log, the live checkpoint and the tree it names,
 * then the journal records after the checkpoint's seq, so a record folded into a checkpoint just
 * before a crash is not applied twice. With `recover`, what is damaged is skipped and said in the
 * recovery report; without it, damage is a StateCorruptError that says how to recover.
 */
export class StateLoader {
  snapshots: SnapshotInfo[] = [];
  /** Snapshots recorded in the journal but not yet in the snapshot log (the next checkpoint adds them). */
  unlogged: SnapshotInfo[] = [];
  seq = 0;
  /** The seq the live checkpoint holds everything up to. */
  folded = 0;
  journal: JournalPort | null = null;
  readonly #store: StateStore;
  readonly #vfs: Vfs;
  readonly #index: TreeIndex;
  readonly #objects: Objects;
  readonly #recovery: RecoveryReport;
  readonly #readOnly: boolean;
  readonly #target: () => OpTarget;

  constructor(into: LoadTarget) {
    this.#store = into.store;
    this.#vfs = into.vfs;
    this.#index = into.index;
    this.#objects = into.objects;
    this.#recovery = into.recovery;
    this.#readOnly = into.readOnly;
    this.#target = into.target;
  }

  load(recover: boolean): void {
    this.snapshots = this.#readSnapshots(recover);
    const live = this.#readLive(recover);
    this.seq = live.seq;
    this.folded = live.seq;
    if (live.root) this.#materialize(live.root, recover);
    this.journal = this.#store.journal();
    // A project opened read-only may have no journal yet: nothing to replay.
    if (this.journal || !this.#readOnly) this.#replay(recover);
  }

  #replaySnapshot(record: JournalRecord, known: Set<string>, recover: boolean): void {
    for (const object of record.objects ?? []) this.#objects.restore(object);
    const info = record.snapshot as SnapshotInfo;
    if (typeof info?.id !== 'string' || typeof info.root !== 'string') {
      if (!recover) throw new StateCorruptError(`Journal record ${record.seq} holds no readable snapshot; start with recover to skip it`);
      this.#recovery.lost.push(`the snapshot of journal record ${record.seq} was unreadable and skipped`);
      return;
    }
    if (known.has(info.id)) return;
    known.add(info.id);
    this.snapshots.push(info);
    this.unlogged.push(info);
  }

  #readLive(recover: boolean): LiveRef {
    const where = `The live checkpoint ${this.#store.describe('live')}`;
    let live: LiveRef | null;
    try {
      live = this.#store.readLive();
      if (live !== null && ((live.root !== null && typeof live.root !== 'string') || !Number.isInteger(live.seq)))
        throw new Error('unexpected fields');
    } catch (error) {
      const latest = this.snapshots[this.snapshots.length - 1];
      if (!recover) {
        throw new StateCorruptError(
          `${where} is unreadable (${(error as Error).message}). Start with recover (arium --recover, or createEngine({ recover: true })) to rebuild it from ${latest ? `the newest snapshot ${latest.id}` : 'an empty tree'} plus the journal.`,
        );
      }
      this.#recovery.lost.push(`live.json was unreadable; restarted from ${latest ? `snapshot ${latest.id}` : 'an empty tree'}`);
      return { root: latest?.root ?? null, seq: 0 };
    }
    if (live !== null) return live;
    // A checkpoint is written before the first snapshot: snapshots without one means it was lost.
    const latest = this.snapshots[this.snapshots.length - 1];
    if (!latest) return { root: null, seq: 0 };
    if (!recover) {
      throw new StateCorruptError(
        `${where} is missing although the project has snapshots. Start with recover (arium --recover, or createEngine({ recover: true })) to rebuild it from the newest snapshot ${latest.id} plus the journal.`,
      );
    }
    this.#recovery.lost.push(`live.json was missing; restarted from snapshot ${latest.id}`);
    return { root: latest.root, seq: 0 };
  }

  #readSnapshots(recover: boolean): SnapshotInfo[] {
    const { lines, tornBytes } = this.#store.readSnapshotLog();
    if (!this.#readOnly) this.#recovery.torn_bytes += tornBytes;
    const out: SnapshotInfo[] = [];
    lines.forEach((line, i) => {
      if (line.trim() === '') return;
      try {
        const info = JSON.parse(line) as SnapshotInfo;
        if (typeof info?.id !== 'string' || typeof info.root !== 'string') throw new Error('not a snapshot');
        out.push(info);
      } catch {
        if (!recover) {
          throw new StateCorruptError(
            `Line ${i + 1} of ${this.#store.describe('snapshot log')} is not a snapshot record; start with recover to skip it`,
          );
        }
        this.#recovery.lost.push(`snapshot record on line ${i + 1} was unreadable and skipped`);
      }
    });
    return out;
  }

  #materialize(root: string, recover: boolean): void {
    const walk = (hash: string, dir: string): void => {
      let entries: ReturnType<typeof decodeTree>;
      try {
        entries = decodeTree(this.#objects.get('tree', hash));
      } catch (error) {
        if (!recover || !(error instanceof CorruptObjectError)) throw this.#corrupt(error, dir);
        this.#recovery.lost.push(`folder ${dir}: ${error.message}`);
        return;
      }
      if (dir !== '/') this.#vfs.mkdir(dir, { parents: true });
      this.#index.seed(dir, 'd', hash);
      for (const [name, kind, child, size] of entries) {
        const path = dir === '/' ? `/${name}` : `${dir}/${name}`;
        if (kind === 'd') {
          walk(child, path);
          continue;
        }
        try {
          this.#vfs.write(path, this.#objects.get('blob', child), { parents: true });
          this.#index.seed(path, 'f', child, size);
        } catch (error) {
          if (!recover || !(error instanceof CorruptObjectError)) throw this.#corrupt(error, path);
          this.#recovery.lost.push(`file ${path}: ${error.message}`);
          this.#index.invalidate(path);
        }
      }
    };
    walk(root, '/');
    if (this.#recovery.lost.length > 0) this.#index.invalidate('/');
  }

  #corrupt(error: unknown, path: string): Error {
    if (error instanceof CorruptObjectError) {
      return new StateCorruptError(`${error.message} (needed for ${path}). Start with recover to load everything that is intact.`);
    }
    return error as Error;
  }

  #replay(recover: boolean): void {
    const journal = this.journal as JournalPort;
    let records: JournalRecord[];
    try {
      const result = journal.replay(recover);
      records = result.records;
      if (result.corruptAt === null) {
        this.#recovery.torn_bytes += result.droppedBytes;
      } else {
        this.#recovery.lost.push(`journal records from byte ${result.corruptAt} on were damaged and dropped (${result.droppedBytes} bytes)`);
      }
    } catch (error) {
      if (error instanceof JournalCorruptError) {
        throw new StateCorruptError(`${error.message}. Start with recover to keep those ${error.intact} records and drop the rest.`);
      }
      throw error;
    }
    const known = new Set(this.snapshots.map((x) => x.id));
    for (const record of records) {
      // Snapshot records count even when folded: a crash after live.json was written and before the
      // snapshot log was appended leaves them only here. One already in the log is not added twice.
      if (record.snapshot !== undefined) this.#replaySnapshot(record, known, recover);
      if (record.seq <= this.folded) continue;
      if (record.seq !== this.seq + 1 && !recover && this.folded === this.seq) {
        throw new StateCorruptError(
          `Journal record ${record.seq} follows checkpoint ${this.seq}: the records in between are missing (was live.json lost or replaced?). Start with recover to apply what the journal holds.`,
        );
      }
      try {
        applyOps(this.#target(), record.ops);
      } catch (error) {
        if (!recover) {
          throw new StateCorruptError(
            `Journal record ${record.seq} does not apply to the checkpoint (${(error as Error).message}); start with recover to stop before it`,
          );
        }
        this.#recovery.lost.push(`journal record ${record.seq} and later did not apply and were dropped`);
        break;
      }
      this.seq = record.seq;
    }
  }
}
