// Over 500 lines: one class, the committed VFS, whose commits, journal, snapshots and open transactions share its tree and sequence.
import { ToolFailure } from '../errors.js';
import type { VfsQuota } from '../limits.js';
import { FileStateStore } from '../store/file-store.js';
import { JournalCorruptError, type JournalOp } from '../store/journal.js';
import { MemoryObjectStore, type Objects } from '../store/memory-objects.js';
import { CorruptObjectError, ObjectStore, PACK_MIN_OBJECTS } from '../store/objects.js';
import type { JournalPort, StateStore } from '../store/port.js';
import type { ChangeLog } from './change-log.js';
import { parentOf } from './path.js';
import { History, imageOf, ReadView } from './read-view.js';
import { InconsistentReadError, type RecoveryReport, StateCorruptError, StateLoader } from './state-load.js';
import { applyOps, type OpTarget, Transaction } from './transaction.js';
import { TreeIndex } from './tree-index.js';
import { Vfs, type WriteOptions } from './vfs.js';

export { InconsistentReadError, type RecoveryReport, StateCorruptError } from './state-load.js';

export interface SnapshotInfo {
  id: string;
  at: string;
  label: string | null;
  message: string | null;
  /** Hash of the root tree. Two snapshots with equal roots hold exactly the same files. */
  root: string;
  files: number;
  dirs: number;
  bytes: number;
}

export interface StateOptions {
  /**
   * Where the state is kept: a folder (`<project>/.arium`, a FileStateStore), another `StateStore`, or
   * null to keep the tree in memory with no journal at all (nothing survives the engine).
   */
  dir: string | StateStore | null;
  quota?: Partial<VfsQuota>;
  /** Open a damaged state by keeping what is intact instead of refusing to start. */
  recover?: boolean;
  /** Fold the journal into a checkpoint once it is this large. */
  checkpointBytes?: number;
  /**
   * Read the durable state of a project another engine holds, without its lock and without writing
   * anything; changes are refused. Throws InconsistentReadError when the holder changed the state
   * while it was read (read it again).
   */
  readOnly?: boolean;
}

/**
 * Above this many new object bytes, or from as many new objects as the store writes as one pack, a
 * snapshot syncs its objects in place rather than journaling them: a pack costs one fsync whatever the
 * number of objects in it, about what the journal's fdatasync of the same bytes costs, and the bytes
 * are written once instead of twice (10,000 objects of 200 bytes: 0.25 s instead of 0.4 s).
 */
const INLINE_SNAPSHOT_BYTES = 8 * 1024 * 1024;

/**
 * The committed VFS and what makes it durable, over a StateStore (src/store/port.ts): the write-ahead
 * journal of acknowledged calls, the content-addressed objects, the live checkpoint and the snapshot
 * log. Start-up loads the checkpoint and replays the journal records after its seq, so a record folded
 * into a checkpoint just before a crash is not applied twice.
 */
export class VfsState {
  readonly vfs: Vfs;
  /** Null when nothing is kept beyond the engine. */
  readonly store: StateStore | null;
  readonly recovery: RecoveryReport = { torn_bytes: 0, lost: [] };
  readonly objects: Objects;
  /** Keeps what each committed call changed, when someone looks at calls (`EngineOptions.changeLog`). */
  changeLog: ChangeLog | null = null;
  /** Replaces the project's secret values in text the state keeps (snapshot labels and messages); set by the engine. */
  scrub: (text: string) => string = (text) => text;
  /** The same, for the beginning of a longer text (a patch cut at its limit): see `Scrubber.head`. */
  scrubHead: (text: string) => string = (text) => text;
  readonly #index = new TreeIndex();
  #journal: JournalPort | null = null;
  readonly #checkpointBytes: number;
  #snapshots: SnapshotInfo[] = [];
  /** Snapshots recorded in the journal but not yet in snapshots.jsonl (the next checkpoint adds them). */
  #unlogged: SnapshotInfo[] = [];
  #seq = 0;
  #folded = 0;
  #changes = 0;
  #closed = false;
  #readOnly: { holder: number | null } | null = null;
  /** Views of the transactions begun and not yet committed or ended, oldest first. */
  readonly #active = new Set<ReadView>();
  /** The pre-images those views read what later commits changed from. */
  readonly #history = new History();

  constructor(options: StateOptions) {
    this.vfs = new Vfs(options.quota);
    this.#checkpointBytes = options.checkpointBytes ?? 64 * 1024 * 1024;
    const given = options.dir;
    const store = typeof given === 'string' ? new FileStateStore(given, { readOnly: options.readOnly === true }) : given;
    this.store = store;
    if (store === null) {
      this.objects = new MemoryObjectStore();
      return;
    }
    this.objects = store.objects;
    if (options.readOnly) {
      this.#readOnly = { holder: store.holder() };
      this.#readWithoutLock(store);
      return;
    }
    store.acquire();
    try {
      this.#load(store, options.recover === true);
      // Save the repaired state now, so the next start is a normal one instead of hitting the same damage.
      if (this.recovery.lost.length > 0) this.#writeCheckpoint();
    } catch (error) {
      store.close();
      store.release();
      throw error;
    }
  }

  /**
   * Loads what the holder made durable: the checkpoint, the journal's whole records (a record being
   * appended is not there yet) and the snapshot log. The holder may fold its journal into a new
   * checkpoint, or collect garbage, while this reads: a journal that does not continue the checkpoint
   * read, an object gone, or the checkpoint replaced meanwhile means a mixed view, and InconsistentReadError.
   */
  #readWithoutLock(store: StateStore): void {
    const before = store.liveStamp();
    try {
      this.#load(store, false);
    } catch (error) {
      store.close();
      if (error instanceof StateCorruptError || error instanceof CorruptObjectError || error instanceof JournalCorruptError) {
        throw new InconsistentReadError(`the state changed while it was read (${error.message})`, { cause: error });
      }
      throw error;
    }
    if (store.liveStamp() !== before) {
      store.close();
      throw new InconsistentReadError('the live checkpoint was replaced while the state was read');
    }
  }

  /** Reads the state back (state-load.ts) into this tree, index and objects. */
  #load(store: StateStore, recover: boolean): void {
    const loader = new StateLoader({
      store,
      vfs: this.vfs,
      index: this.#index,
      objects: this.objects,
      recovery: this.recovery,
      readOnly: this.#readOnly !== null,
      target: () => this.#target(),
    });
    loader.load(recover);
    this.#snapshots = loader.snapshots;
    this.#unlogged = loader.unlogged;
    this.#seq = loader.seq;
    this.#folded = loader.folded;
    this.#journal = loader.journal;
  }

  /** Set when the state was opened read-only: the pid of the engine that holds it, if known. */
  get readOnly(): { holder: number | null } | null {
    return this.#readOnly;
  }

  get snapshots(): readonly SnapshotInfo[] {
    return this.#snapshots;
  }

  /** Counts committed changes in this engine: a whole-tree change computed at one count must commit at it. */
  get changes(): number {
    return this.#changes;
  }

  /** Starts a call's transaction; end it with `commit` or `end`. */
  begin(): Transaction {
    this.#history.tidy();
    const view = new ReadView(this.vfs, this.#history, this.#changes);
    this.#history.open(view.start);
    this.#active.add(view);
    return new Transaction(view, view, this.vfs.quota.max_call_bytes);
  }

  /**
   * Makes a change of the host's own (engine.vfs, an import) as one committed transaction. `apply` runs
   * synchronously on the live tree, so no other commit can come between its reads and its commit.
   */
  change<T>(apply: (txn: Transaction) => T): T {
    const txn = new Transaction(this.vfs);
    const result = apply(txn);
    this.commit(txn);
    return result;
  }

  /**
   * Ends a transaction without committing it (a failed call); safe to call more than once. What only
   * its view needed of the history is dropped at the next begin or commit: `commit` ends the
   * transaction before it checks it for conflicts.
   */
  end(txn: Transaction): void {
    if (txn.view && this.#active.delete(txn.view)) this.#history.close(txn.view.start);
  }

  /** Pre-images kept for the open transactions (tests: what one long call keeps alive). */
  get preImages(): number {
    return this.#history.size;
  }

  /** Transactions begun and not ended (status, and tests that nothing leaks). */
  get open(): number {
    return this.#active.size;
  }

  /**
   * Makes a transaction's changes the committed state, and ends it. Refused with CONFLICT, before
   * anything changes, when another commit changed something the transaction read after it began (so
   * every committed call acts as if it had run alone), or when its changes no longer apply; with
   * UNAVAILABLE when they cannot be made durable.
   */
  commit(txn: Transaction, runId?: string): void {
    this.end(txn);
    if (txn.ops.length === 0) return;
    this.assertWritable('The call');
    if (txn.basis !== null && txn.basis !== this.#changes) {
      throw new ToolFailure(
        'execution',
        'CONFLICT',
        'The tree changed while the restore ran (another call committed first); nothing was changed; retry the restore',
        { details: { reason: 'tree changed' } },
      );
    }
    const changed = txn.view?.conflict() ?? null;
    if (changed !== null) {
      throw new ToolFailure(
        'execution',
        'CONFLICT',
        `Another call changed ${changed} after this call read it; nothing was changed (run the call again to act on the new state)`,
        { details: { reason: 'read changed', path: changed } },
      );
    }
    try {
      applyOps(new Transaction(this.vfs), txn.ops);
    } catch (error) {
      if (error instanceof ToolFailure && error.code === 'QUOTA_EXCEEDED') throw error;
      const reason = error instanceof Error ? error.message : String(error);
      throw new ToolFailure('execution', 'CONFLICT', `The call's changes conflict with a change committed while it ran: ${reason}`, {
        details: { reason },
        cause: error,
      });
    }
    const recording = runId !== undefined && this.changeLog ? this.changeLog.begin(this.vfs, txn.ops) : null;
    this.#durably(txn.handOver(), true);
    recording?.finish(runId as string);
  }

  /** Journals `ops` (when durable) and applies them to the committed tree. */
  #durably(ops: JournalOp[], consume = false): void {
    if (this.#journal) {
      try {
        this.#journal.append({ seq: this.#seq + 1, ops: [...ops] });
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        throw new ToolFailure(
          'execution',
          'UNAVAILABLE',
          `The change could not be made durable (${code ?? (error as Error).message}); nothing was changed`,
          {
            details: { errno: code ?? null },
            cause: error,
          },
        );
      }
    }
    this.#seq++;
    this.#changes++;
    applyOps(this.#target(), ops, consume);
    if (this.#journal && this.#journal.size > this.#checkpointBytes) {
      try {
        this.#writeCheckpoint();
      } catch {
        // The change is durable in the journal already, so the call succeeded; folding the journal
        // (e.g. on a full disk) is tried again after the next change, and by the next start.
      }
    }
  }

  /**
   * The committed tree as an OpTarget that keeps the tree index in step, and keeps the pre-image of
   * every path an op is about to change for the open transactions (nothing to do when none is open).
   */
  #target(): OpTarget {
    const vfs = this.vfs;
    const index = this.#index;
    const history = this.#history;
    const capture = (paths: Iterable<string>): void => {
      if (this.#active.size === 0) return;
      history.tidy();
      const seq = this.#changes;
      for (const path of paths) if (history.wants(path)) history.record(path, seq, imageOf(vfs, path));
    };
    return {
      typeOf: (path) => vfs.typeOf(path),
      write: (path: string, data: Buffer, options: WriteOptions) => {
        const created: string[] = [path];
        for (let dir = parentOf(path); dir !== '/' && vfs.typeOf(dir) === null; dir = parentOf(dir)) created.push(dir);
        capture(created);
        for (const dir of created.slice(1)) index.invalidate(dir);
        index.invalidate(path);
        return vfs.write(path, data, options);
      },
      mkdir: (path, options) => {
        capture([path]);
        index.invalidate(path);
        return vfs.mkdir(path, options);
      },
      delete: (path, options) => {
        capture(subtree(vfs, path));
        index.invalidate(path, vfs.typeOf(path) === 'directory');
        if (path === '/') index.clear();
        return vfs.delete(path, options);
      },
      move: (from, to, options) => {
        if (this.#active.size > 0) {
          const moved = subtree(vfs, from);
          capture([...moved, ...moved.map((p) => to + p.slice(from.length)), ...subtree(vfs, to)]);
        }
        index.invalidate(from, vfs.typeOf(from) === 'directory');
        index.invalidate(to, vfs.typeOf(to) === 'directory');
        return vfs.move(from, to, options);
      },
    };
  }

  /** Folds the journal into the live checkpoint. Throws UNAVAILABLE when the disk refuses (the journal still holds everything). */
  checkpoint(): string {
    this.assertWritable('Garbage collection');
    return unavailable('The checkpoint', () => this.#writeCheckpoint(false));
  }

  /**
   * Makes every object durable, then points live.json at the live root, then logs the snapshots the
   * journal holds, then empties the journal. A crash between two steps loses nothing: the journal is
   * replayed over the checkpoint it was folded into (its snapshot records always, see #replay).
   */
  #writeCheckpoint(force = true): string {
    const root = this.#index.write(this.vfs, this.objects);
    this.objects.sync();
    const store = this.store;
    if (store && this.#journal && (force || this.#folded !== this.#seq || this.#unlogged.length > 0 || store.liveStamp() === null)) {
      store.writeLive({ root, seq: this.#seq });
      this.#folded = this.#seq;
      if (this.#unlogged.length > 0) {
        store.appendSnapshotLog(this.#unlogged.map((info) => JSON.stringify(info)));
        this.#unlogged = [];
      }
      this.#journal.reset();
    }
    return root;
  }

  /** The root tree hash of the live tree; its new objects are held in memory until a snapshot or checkpoint. */
  liveRoot(): string {
    this.#ensureOpen();
    return this.#index.write(this.vfs, this.objects);
  }

  /**
   * Records the live tree as a snapshot. On disk this is one journal record holding the snapshot and
   * the objects new since the last one (about the size of what changed), made durable by one
   * fdatasync; the objects stay in memory until the next checkpoint writes them to the store (the
   * journal, which holds them too, is folded past `checkpointBytes`, which bounds that memory). A snapshot
   * that adds many objects or bytes (the first one of a big tree) syncs its objects in place instead,
   * so the journal does not hold the tree twice.
   */
  snapshot(given: { label?: string; message?: string } = {}): SnapshotInfo {
    this.assertWritable('A snapshot');
    // Labels and messages are kept for good and shown everywhere: a secret's value never goes in.
    const options = {
      ...(given.label !== undefined ? { label: this.scrub(given.label) } : {}),
      ...(given.message !== undefined ? { message: this.scrub(given.message) } : {}),
    };
    const root = this.#index.write(this.vfs, this.objects);
    const stats = this.vfs.usage();
    const dirs = stats.dirs;
    const at = new Date().toISOString();
    const idSource = `${root}\u0000${at}\u0000${this.#snapshots.length}\u0000${options.label ?? ''}`;
    const info: SnapshotInfo = {
      id: ObjectStore.hash('blob', Buffer.from(idSource)).slice(0, 12),
      at,
      label: options.label ?? null,
      message: options.message ?? null,
      root,
      files: stats.files - dirs,
      dirs,
      bytes: stats.bytes,
    };
    const journal = this.#journal;
    if (journal) {
      unavailable('The snapshot', () => {
        let objects = this.objects.pending();
        if (objects.length >= PACK_MIN_OBJECTS || objects.reduce((n, o) => n + o.stored.length, 0) > INLINE_SNAPSHOT_BYTES) {
          this.objects.sync();
          objects = [];
        }
        journal.append({ seq: this.#seq + 1, ops: [], snapshot: info, objects });
        this.objects.journaled(objects);
      });
      this.#seq++;
      this.#unlogged.push(info);
    }
    this.#snapshots.push(info);
    if (journal && journal.size > this.#checkpointBytes) {
      try {
        this.#writeCheckpoint();
      } catch {
        // Durable in the journal already; folded later (see #durably).
      }
    }
    return info;
  }

  /** A snapshot by id (or unique id prefix of 4+ characters), by label (the newest with it), or `latest`. */
  resolveSnapshot(ref: string): SnapshotInfo {
    const list = this.#snapshots;
    if (ref === 'latest' && list.length > 0) return list[list.length - 1] as SnapshotInfo;
    const exact = list.find((s) => s.id === ref);
    if (exact) return exact;
    const labelled = [...list].reverse().find((s) => s.label === ref);
    if (labelled) return labelled;
    const byPrefix = ref.length >= 4 ? list.filter((s) => s.id.startsWith(ref)) : [];
    if (byPrefix.length === 1) return byPrefix[0] as SnapshotInfo;
    const why =
      byPrefix.length > 1
        ? `the prefix "${ref}" matches ${byPrefix.length} snapshots; give more characters`
        : `no snapshot has the id or label "${ref}"`;
    throw new ToolFailure('execution', 'NOT_FOUND', `Unknown snapshot: ${why} (list them with vfs.log / arium log)`, {
      details: { snapshot: ref, known: list.length },
    });
  }

  /** Brings the live tree to a snapshot's content as one durable, atomic change. */
  applyRoot(root: string, build: (root: string) => JournalOp[]): JournalOp[] {
    this.assertWritable('The restore');
    const ops = build(root);
    if (ops.length > 0) {
      applyOps(new Transaction(this.vfs), ops);
      this.#durably(ops);
    }
    return ops;
  }

  close(): void {
    if (this.#closed) return;
    try {
      if (this.#journal && !this.#readOnly) this.#writeCheckpoint(false);
    } catch {
      // Nothing is lost: the journal holds every acknowledged change and the next start replays it.
    } finally {
      this.#closed = true;
      this.store?.close();
      if (!this.#readOnly) this.store?.release();
    }
  }

  #ensureOpen(): void {
    if (this.#closed) throw new ToolFailure('execution', 'UNAVAILABLE', 'The engine is closed');
  }

  /** Refuses a change of a state opened read-only, saying whose it is and how to change it. */
  assertWritable(what: string): void {
    this.#ensureOpen();
    if (!this.#readOnly) return;
    const holder = this.#readOnly.holder;
    throw new ToolFailure(
      'execution',
      'UNAVAILABLE',
      `${what} needs to change the project, which another engine${holder === null ? '' : ` (pid ${holder})`} holds: it was opened read-only, to inspect it. Make the change through that engine, or stop it and try again`,
      { details: { reason: 'read-only', holder } },
    );
  }
}

/** `path` and every path below it, outermost first (the root itself is never changed, only emptied). */
function subtree(vfs: Vfs, path: string): string[] {
  const type = vfs.typeOf(path);
  if (type === null) return [];
  const own = path === '/' ? [] : [path];
  if (type === 'file') return own;
  return [...own, ...vfs.list(path, { recursive: true }).entries.map((e) => e.path)];
}

/** Runs a write to the state folder; a refusal from the disk (ENOSPC, EIO, EROFS…) becomes UNAVAILABLE. */
function unavailable<T>(what: string, write: () => T): T {
  try {
    return write();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (error instanceof ToolFailure || typeof code !== 'string' || !/^E[A-Z]+$/.test(code)) throw error;
    throw new ToolFailure('execution', 'UNAVAILABLE', `${what} could not be written to disk (${code}); nothing was changed`, {
      details: { errno: code },
      cause: error,
    });
  }
}
