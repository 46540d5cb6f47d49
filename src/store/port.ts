import type { JournalRecord } from './journal.js';
import type { Objects } from './memory-objects.js';

/**
 * What the durable VFS (src/vfs/state.ts) needs from storage. The live tree, commits, recovery
 * decisions and the meaning of each record stay above this port; a store keeps bytes and records and
 * says when they are durable. Three stores implement it (FileStateStore, MemoryStateStore,
 * JetStreamStore) and pass one contract suite (test/store.contract.test.ts); another implements it the
 * same way and is passed to `createEngine({ store })`.
 */
export interface StateStore {
  /** Where the state is, for messages: a folder path, or a name such as `memory`. */
  readonly location: string;
  /** Where one part of the state is, for messages: a file path, or a description. */
  describe(part: 'live' | 'snapshot log'): string;
  /** Content-addressed blobs and trees (checkpoints and snapshots are made of them). */
  readonly objects: Objects;
  /** Whether this store was opened to read only: nothing may be written, and no hold is taken. */
  readonly readOnly: boolean;
  /** Takes the store for this engine alone; throws `ProjectLockedError` (naming the holder) when another has it. */
  acquire(): void;
  /** Lets the store go; idempotent. */
  release(): void;
  /** The process holding the store, when known (a read-only open reports it). */
  holder(): number | null;
  /** The last checkpoint, or null when none was written. Throws when it exists but cannot be read. */
  readLive(): LiveRef | null;
  /** Replaces the checkpoint atomically and durably. */
  writeLive(ref: LiveRef): void;
  /** Something that changes whenever the checkpoint is replaced (null when there is none): a reader compares it before and after. */
  liveStamp(): string | null;
  /**
   * The snapshot log's whole lines (each a JSON record, in the order appended). A last line torn by a
   * crash is cut off (left alone when read-only) and its length reported.
   */
  readSnapshotLog(): { lines: string[]; tornBytes: number };
  /** Appends lines (each without its newline) durably: all of them, or none. */
  appendSnapshotLog(lines: readonly string[]): void;
  /** The write-ahead journal; null when a read-only open finds none. */
  journal(): JournalPort | null;
  /** Closes the journal and anything else open (not the hold: see `release`). */
  close(): void;
}

export interface LiveRef {
  root: string | null;
  /** The last journal record folded into `root`. */
  seq: number;
}

/** The write-ahead journal: records of committed calls, appended durably, read back at start-up. */
export interface JournalPort {
  /** Bytes held (the state folds the journal into a checkpoint past a size). */
  readonly size: number;
  /** Appends one record; when it returns, the record survives a crash. On a throw nothing was appended. */
  append(record: JournalRecord): void;
  /**
   * Every whole record, oldest first. A torn last record is dropped (`droppedBytes`); damage before the
   * end throws `JournalCorruptError`, or with `recover` is cut off there (`corruptAt`).
   */
  replay(recover?: boolean): { records: JournalRecord[]; droppedBytes: number; corruptAt: number | null };
  /** Empties the journal (its records were folded into a checkpoint). */
  reset(): void;
}
