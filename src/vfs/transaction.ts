import { ToolFailure } from '../errors.js';
import type { JournalOp } from '../store/journal.js';
import { isWithin, parentOf } from './path.js';
import { type ReadView, type TreeView, walkEntries } from './read-view.js';
import type { EntryType, ListOptions, VfsEntry, VfsStat, WriteOptions, WriteOutcome } from './vfs.js';
import type { VfsView } from './view.js';

/** `mtime` in ms since the epoch: formatted only when a stat asks (a write made the string for nothing). */
type OverlayEntry = { type: 'file'; data: Buffer; mtime: number } | { type: 'directory'; mtime: number } | { type: 'deleted' };

function fail(code: 'NOT_FOUND' | 'ALREADY_EXISTS' | 'NOT_A_DIRECTORY' | 'IS_A_DIRECTORY' | 'NOT_EMPTY', message: string, path: string) {
  return new ToolFailure('execution', code, message, { details: { path } });
}

/**
 * One call's private view of the VFS: its changes live in an overlay over the committed tree, so a call
 * that fails leaves nothing behind and calls running at once never see each other's uncommitted
 * writes. Every change is also logged as a journal op; `VfsState.commit` (state.ts) replays that log on the
 * committed tree. A path present in the overlay hides the committed tree at and below it: a deleted
 * folder hides its old contents, a folder created or moved in by the call holds exactly its overlay
 * children.
 *
 * A call's transaction reads the committed tree through a `ReadView`: the tree as it was when the call
 * began, which also records what the call read, so that its commit can be refused when another call
 * changed any of it meanwhile (see VfsState.commit). A scratch transaction reads the live tree itself.
 */
export class Transaction implements VfsView {
  readonly ops: JournalOp[] = [];
  /** Set when the ops were computed against the committed tree as of this change count (see VfsState.changes). */
  basis: number | null = null;
  /** The call's view of the committed tree, or null for a scratch transaction over the live tree. */
  readonly view: ReadView | null;
  readonly #base: TreeView;
  readonly #overlay = new Map<string, OverlayEntry>();
  #deltaBytes = 0;
  #deltaNodes = 0;

  /** File content this transaction may write in all (null: unbounded, for the host's own changes). */
  readonly #maxWritten: number | null;
  #written = 0;

  constructor(base: TreeView, view: ReadView | null = null, maxWritten: number | null = null) {
    this.#base = base;
    this.view = view;
    this.#maxWritten = maxWritten;
  }

  resolve(path: unknown): string {
    return this.#base.resolve(path);
  }

  typeOf(path: string): EntryType | null {
    if (this.#overlay.size === 0) return this.#base.typeOf(path);
    const own = this.#overlay.get(path);
    if (own) return own.type === 'deleted' ? null : own.type;
    for (let dir = parentOf(path); dir !== '/'; dir = parentOf(dir)) {
      const entry = this.#overlay.get(dir);
      if (entry) return null; // a deleted or replaced ancestor, or a folder whose children are all in the overlay
    }
    return this.#base.typeOf(path);
  }

  exists(raw: unknown): boolean {
    return this.typeOf(this.resolve(raw)) !== null;
  }

  read(raw: unknown): Buffer {
    const path = this.resolve(raw);
    if (this.#overlay.size === 0) return this.#base.read(path);
    const own = this.#overlay.get(path);
    if (own?.type === 'file') return own.data;
    const type = this.typeOf(path);
    if (type === null) throw fail('NOT_FOUND', `File not found: ${path}`, path);
    if (type === 'directory') throw fail('IS_A_DIRECTORY', `Is a directory, not a file: ${path}`, path);
    return this.#base.read(path);
  }

  stat(raw: unknown): VfsStat {
    const path = this.resolve(raw);
    const own = this.#overlay.get(path);
    if (own && own.type !== 'deleted') {
      const size = own.type === 'file' ? own.data.length : 0;
      const mtime = new Date(own.mtime).toISOString();
      return { path, type: own.type, size, mtime, birthtime: mtime };
    }
    if (this.typeOf(path) === null) throw fail('NOT_FOUND', `No such file or directory: ${path}`, path);
    return this.#base.stat(path);
  }

  list(raw: unknown, options: ListOptions = {}): { entries: VfsEntry[]; truncated: boolean } {
    const path = this.resolve(raw);
    if (this.#overlay.size === 0) return this.#base.list(path, options);
    const type = this.typeOf(path);
    if (type === null) throw fail('NOT_FOUND', `Directory not found: ${path}`, path);
    if (type === 'file') throw fail('NOT_A_DIRECTORY', `Not a directory: ${path}`, path);
    return walkEntries(path, options, (dir) => this.#children(dir));
  }

  #children(dir: string): VfsEntry[] {
    const byName = new Map<string, VfsEntry>();
    // Committed children show unless the folder itself is in the overlay (then the overlay holds them all).
    if (!this.#overlay.has(dir) && this.#base.typeOf(dir) === 'directory') {
      for (const e of this.#base.list(dir).entries) if (!this.#overlay.has(e.path)) byName.set(e.name, e);
    }
    for (const [path, entry] of this.#overlay) {
      if (path === '/' || parentOf(path) !== dir || entry.type === 'deleted') continue;
      const name = path.slice(dir === '/' ? 1 : dir.length + 1);
      byName.set(name, { path, name, type: entry.type, size: entry.type === 'file' ? entry.data.length : 0 });
    }
    return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** Folders to create for `path`, outermost first; throws when a file is in the way or `parents` is off. */
  #missingParents(path: string, parents: boolean): string[] {
    const missing: string[] = [];
    for (let dir = parentOf(path); dir !== '/'; dir = parentOf(dir)) {
      const type = this.typeOf(dir);
      if (type === 'directory') break;
      if (type === 'file') throw fail('NOT_A_DIRECTORY', `Not a directory: ${dir}`, dir);
      if (!parents) throw fail('NOT_FOUND', `Directory not found: ${dir}`, dir);
      missing.push(dir);
    }
    return missing.reverse();
  }

  #createDirs(dirs: readonly string[]): void {
    if (dirs.length === 0) return;
    const mtime = Date.now();
    for (const dir of dirs) {
      this.#overlay.set(dir, { type: 'directory', mtime });
      this.ops.push({ op: 'mkdir', path: dir });
    }
  }

  write(raw: unknown, data: Buffer | string, options: WriteOptions = {}): WriteOutcome {
    const path = this.resolve(raw);
    if (path === '/') throw fail('IS_A_DIRECTORY', 'Cannot write to the root directory', path);
    const missing = this.#missingParents(path, options.parents ?? true);
    const type = missing.length > 0 ? null : this.typeOf(path);
    if (type === 'directory') throw fail('IS_A_DIRECTORY', `Is a directory, not a file: ${path}`, path);
    if (type === 'file' && options.exclusive) throw fail('ALREADY_EXISTS', `File already exists: ${path}`, path);
    // The replaced content is read only when the outcome depends on it (an append, a caller that shows
    // it): otherwise it is only measured, and another call's write to the file is no conflict for this one.
    const reads = options.append === true || options.previous === true;
    const previous = type === 'file' && reads ? this.read(path) : null;
    const replaced = type === 'file' ? (previous ?? this.#peek(path)).length : 0;
    // A Buffer is taken as it is, not copied: every caller hands over one of its own (engine.vfs copies
    // the host's), and the committed tree keeps this same buffer. A copy held each write twice.
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.isBuffer(data) ? data : Buffer.from(data);
    this.#spend(bytes.length, path);
    const content = options.append && previous ? Buffer.concat([previous, bytes]) : bytes;
    const nodes = missing.length + (type === 'file' ? 0 : 1);
    this.#reserve(content.length - replaced, nodes, path, content.length);
    this.#createDirs(missing);
    this.#overlay.set(path, { type: 'file', data: content, mtime: Date.now() });
    // An append is journaled as what was added, a create as a create: replayed at commit on a tree another
    // call may have changed meanwhile, they keep their meaning (no lost appends, no doubly created file).
    const op: JournalOp = { op: 'write', path, data: options.append ? bytes : content };
    if (options.append) op.append = true;
    if (options.exclusive) op.create = true;
    this.ops.push(op);
    return { created: type !== 'file', previous, size: content.length };
  }

  /** A file's content as this transaction sees it, without counting as read (see TreeView.peek). */
  #peek(path: string): Buffer {
    const own = this.#overlay.get(path);
    return own?.type === 'file' ? own.data : this.#base.peek(path);
  }

  mkdir(raw: unknown, options: { parents?: boolean } = {}): { created: boolean; path: string } {
    const path = this.resolve(raw);
    if (path === '/') return { created: false, path };
    const missing = this.#missingParents(path, options.parents ?? true);
    const type = missing.length > 0 ? null : this.typeOf(path);
    if (type === 'file') throw fail('ALREADY_EXISTS', `A file already exists at ${path}`, path);
    if (type === 'directory') return { created: false, path };
    this.#reserve(0, missing.length + 1, path, 0);
    this.#createDirs([...missing, path]);
    return { created: true, path };
  }

  delete(raw: unknown, options: { recursive?: boolean } = {}): { deleted: number; bytes: number } {
    const path = this.resolve(raw);
    const type = this.typeOf(path);
    if (type === null) throw fail('NOT_FOUND', `No such file or directory: ${path}`, path);
    let bytes = 0;
    let deleted = path === '/' ? 0 : 1;
    if (type === 'file') {
      bytes = this.read(path).length;
    } else {
      const { entries } = this.list(path, { recursive: true });
      if (entries.length > 0 && !options.recursive) {
        throw fail('NOT_EMPTY', `Directory not empty: ${path} (pass recursive: true to delete it with its contents)`, path);
      }
      for (const e of entries) bytes += e.size;
      deleted += entries.length;
    }
    const top = path === '/' ? this.#children('/').map((e) => e.path) : [path];
    for (const key of [...this.#overlay.keys()]) if (top.some((t) => isWithin(key, t))) this.#overlay.delete(key);
    for (const t of top) this.#overlay.set(t, { type: 'deleted' });
    this.#deltaBytes -= bytes;
    this.#deltaNodes -= deleted;
    this.ops.push({ op: 'delete', path });
    return { deleted, bytes };
  }

  move(rawFrom: unknown, rawTo: unknown, options: { overwrite?: boolean } = {}): { from: string; to: string; overwritten: boolean } {
    const from = this.resolve(rawFrom);
    const to = this.resolve(rawTo);
    if (from === '/') throw fail('IS_A_DIRECTORY', 'Cannot move the root directory', from);
    const type = this.typeOf(from);
    if (type === null) throw fail('NOT_FOUND', `No such file or directory: ${from}`, from);
    if (from === to) return { from, to, overwritten: false };
    if (isWithin(to, from)) throw new ToolFailure('execution', 'INVALID_PATH', `Cannot move ${from} into itself (${to})`, { details: { from, to } });
    // Replacing a folder that contains the source would delete the source first: refused, not a CONFLICT at commit.
    if (isWithin(from, to))
      throw new ToolFailure('execution', 'INVALID_PATH', `Cannot move ${from} over ${to}, which contains it`, { details: { from, to } });
    const missing = this.#missingParents(to, true);
    const target = missing.length > 0 ? null : this.typeOf(to);
    if (target !== null) {
      if (!options.overwrite) throw fail('ALREADY_EXISTS', `Destination exists: ${to} (pass overwrite: true to replace it)`, to);
      if (target !== type) {
        throw fail(target === 'directory' ? 'IS_A_DIRECTORY' : 'NOT_A_DIRECTORY', `Cannot replace a ${target} with a ${type}: ${to}`, to);
      }
    }
    this.#reserve(0, missing.length, to, 0);
    const moved: Array<[string, OverlayEntry]> = [];
    const mtime = Date.now();
    if (type === 'file') {
      moved.push([to, { type: 'file', data: this.read(from), mtime }]);
    } else {
      moved.push([to, { type: 'directory', mtime }]);
      for (const e of this.list(from, { recursive: true }).entries) {
        const dest = to + e.path.slice(from.length);
        moved.push([dest, e.type === 'file' ? { type: 'file', data: this.read(e.path), mtime } : { type: 'directory', mtime }]);
      }
    }
    this.#createDirs(missing);
    if (target !== null) this.delete(to, { recursive: true });
    for (const key of [...this.#overlay.keys()]) if (isWithin(key, from)) this.#overlay.delete(key);
    this.#overlay.set(from, { type: 'deleted' });
    for (const [path, entry] of moved) this.#overlay.set(path, entry);
    this.ops.push({ op: 'move', from, to });
    return { from, to, overwritten: target !== null };
  }

  /**
   * Hands the transaction's ops to its commit and forgets its changes, so that what it wrote is held by
   * the ops alone and freed as the commit applies them.
   */
  handOver(): JournalOp[] {
    this.#overlay.clear();
    return this.ops.splice(0);
  }

  /** Counts what a write hands the engine to hold until commit, against the call's bound. */
  #spend(bytes: number, path: string): void {
    if (this.#maxWritten !== null && this.#written + bytes > this.#maxWritten) {
      throw new ToolFailure(
        'execution',
        'QUOTA_EXCEEDED',
        `This call would have written ${this.#written + bytes} bytes in all, over the ${this.#maxWritten} one call may write (max_call_bytes); write less in one call`,
        { details: { path, limit: 'max_call_bytes', max: this.#maxWritten } },
      );
    }
    this.#written += bytes;
  }

  #reserve(deltaBytes: number, deltaNodes: number, path: string, fileBytes: number): void {
    this.#base.checkQuota(this.#deltaBytes + deltaBytes, this.#deltaNodes + deltaNodes, path, fileBytes);
    this.#deltaBytes += deltaBytes;
    this.#deltaNodes += deltaNodes;
  }
}

/** The operations a transaction, journal record or restore applies to a tree, in order. */
export interface OpTarget {
  write(path: string, data: Buffer, options: WriteOptions): unknown;
  mkdir(path: string, options: { parents?: boolean }): unknown;
  delete(path: string, options: { recursive?: boolean }): unknown;
  move(from: string, to: string, options: { overwrite?: boolean }): unknown;
  typeOf(path: string): EntryType | null;
}

/**
 * Replays journal ops on `target`. A delete of something already gone is not an error (it is what was
 * wanted). With `consume`, each op is dropped from `ops` once applied, so the content it carried can be
 * freed while the rest are applied (the target keeps a copy of its own).
 */
export function applyOps(target: OpTarget, ops: JournalOp[] | readonly JournalOp[], consume = false): void {
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i] as JournalOp;
    if (consume) (ops as Array<JournalOp | null>)[i] = null;
    switch (op.op) {
      case 'write':
        target.write(op.path, op.data, { parents: false, append: op.append === true, exclusive: op.create === true });
        break;
      case 'mkdir':
        target.mkdir(op.path, { parents: false });
        break;
      case 'delete':
        if (op.path === '/' || target.typeOf(op.path) !== null) target.delete(op.path, { recursive: true });
        break;
      case 'move':
        target.move(op.from, op.to, { overwrite: false });
        break;
    }
  }
}
