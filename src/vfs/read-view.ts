import { ToolFailure } from '../errors.js';
import { isWithin, parentOf } from './path.js';
import type { EntryType, ListOptions, Vfs, VfsEntry, VfsStat } from './vfs.js';

/** What a transaction reads its committed tree through: the live `Vfs`, or a `ReadView` of it. */
export interface TreeView {
  resolve(path: unknown): string;
  typeOf(path: string): EntryType | null;
  read(path: string): Buffer;
  /**
   * A file's bytes as this view sees them, without counting as read: for what the call's outcome does
   * not depend on (the size a write replaces, for its quota check, which the commit makes again).
   */
  peek(path: string): Buffer;
  stat(path: string): VfsStat;
  list(path: string, options?: ListOptions): { entries: VfsEntry[]; truncated: boolean };
  checkQuota(deltaBytes: number, deltaNodes: number, path: string, fileBytes: number): void;
}

/** A path's state just before a commit first changed it: null when nothing was there. */
export type NodeImage =
  | { type: 'file'; data: Buffer; mtime: string; birthtime: string }
  | { type: 'directory'; mtime: string; birthtime: string }
  | null;

/** Reads the state of one normalized path of the live tree, as a pre-image. */
export function imageOf(vfs: Vfs, path: string): NodeImage {
  const type = vfs.typeOf(path);
  if (type === null) return null;
  const st = vfs.stat(path);
  if (type === 'directory') return { type, mtime: st.mtime, birthtime: st.birthtime };
  return { type, data: vfs.read(path), mtime: st.mtime, birthtime: st.birthtime };
}

/**
 * A folder's entries, and with `recursive` those below, depth first in name order, up to `limit`:
 * `children` gives one folder's own entries, sorted.
 */
export function walkEntries(path: string, options: ListOptions, children: (dir: string) => VfsEntry[]): { entries: VfsEntry[]; truncated: boolean } {
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  const entries: VfsEntry[] = [];
  const walk = (dir: string): boolean => {
    for (const entry of children(dir)) {
      if (entries.length >= limit) return false;
      entries.push(entry);
      if (entry.type === 'directory' && options.recursive && !walk(entry.path)) return false;
    }
    return true;
  };
  return { entries, truncated: !walk(path) };
}

function fail(code: 'NOT_FOUND' | 'NOT_A_DIRECTORY' | 'IS_A_DIRECTORY', message: string, path: string): ToolFailure {
  return new ToolFailure('execution', code, message, { details: { path } });
}

/**
 * The committed tree as one transaction sees it: as it was when the transaction began, whatever other
 * calls commit meanwhile, and a record of everything the transaction looked at.
 *
 * When another transaction commits while this one runs, the committing state hands this view the
 * pre-image of every path it changes (`capture`); the first pre-image of a path is its state at this
 * view's start, because nothing changed it before. Every other path is unchanged since the start, so
 * the live tree answers for it. A folder's listing at the start is its live listing with the captured
 * children put back as they were.
 *
 * The same captures say what changed under the transaction: `conflict()` is the first thing it read
 * (a path's content or stat; a folder's listing) that a commit changed after it began, or a path whose
 * type alone it looked at (`exists`, the checks of a write's target and parents) and whose type is no
 * longer the one it saw. A transaction whose reads all still hold can commit as if it had run alone
 * (serializable); one that wrote nothing never conflicts, since it saw one consistent tree. Two calls
 * replacing the same file without reading it therefore both commit, the later one's content winning,
 * as if they had run one after the other.
 */
export class ReadView implements TreeView {
  readonly #vfs: Vfs;
  /** Paths whose content or stat the transaction read. */
  readonly #reads = new Set<string>();
  /** Paths whose type alone it looked at: a change that keeps the type keeps what it saw. */
  readonly #types = new Set<string>();
  /** Folders whose direct children it listed. */
  readonly #listed = new Set<string>();
  /** Folders it listed recursively. */
  readonly #listedDeep = new Set<string>();
  /** Pre-images of the paths other transactions changed since this one began. */
  #images: Map<string, NodeImage> | null = null;
  /** The captured paths by their parent folder. */
  #byParent: Map<string, Set<string>> | null = null;

  constructor(vfs: Vfs) {
    this.#vfs = vfs;
  }

  resolve(path: unknown): string {
    return this.#vfs.resolve(path);
  }

  checkQuota(deltaBytes: number, deltaNodes: number, path: string, fileBytes: number): void {
    this.#vfs.checkQuota(deltaBytes, deltaNodes, path, fileBytes);
  }

  typeOf(path: string): EntryType | null {
    this.#types.add(path);
    return this.#typeAtStart(path);
  }

  #typeAtStart(path: string): EntryType | null {
    const images = this.#images;
    if (images?.has(path)) return images.get(path)?.type ?? null;
    return this.#vfs.typeOf(path);
  }

  peek(path: string): Buffer {
    const images = this.#images;
    if (images?.has(path)) {
      const image = images.get(path) ?? null;
      if (image?.type !== 'file') throw fail('NOT_FOUND', `File not found: ${path}`, path);
      return image.data;
    }
    return this.#vfs.peek(path);
  }

  read(path: string): Buffer {
    this.#reads.add(path);
    const images = this.#images;
    if (images?.has(path)) {
      const image = images.get(path) ?? null;
      if (image === null) throw fail('NOT_FOUND', `File not found: ${path}`, path);
      if (image.type === 'directory') throw fail('IS_A_DIRECTORY', `Is a directory, not a file: ${path}`, path);
      return image.data;
    }
    return this.#vfs.read(path);
  }

  stat(path: string): VfsStat {
    this.#reads.add(path);
    const images = this.#images;
    if (images?.has(path)) {
      const image = images.get(path) ?? null;
      if (image === null) throw fail('NOT_FOUND', `No such file or directory: ${path}`, path);
      const size = image.type === 'file' ? image.data.length : 0;
      return { path, type: image.type, size, mtime: image.mtime, birthtime: image.birthtime };
    }
    return this.#vfs.stat(path);
  }

  list(path: string, options: ListOptions = {}): { entries: VfsEntry[]; truncated: boolean } {
    this.#reads.add(path);
    (options.recursive ? this.#listedDeep : this.#listed).add(path);
    if (this.#images === null) return this.#vfs.list(path, options);
    const type = this.#typeAtStart(path);
    if (type === null) throw fail('NOT_FOUND', `Directory not found: ${path}`, path);
    if (type === 'file') throw fail('NOT_A_DIRECTORY', `Not a directory: ${path}`, path);
    return walkEntries(path, options, (dir) => this.#children(dir));
  }

  /** A folder's entries at the start: the live ones that no commit touched, and the captured ones as they were. */
  #children(dir: string): VfsEntry[] {
    const images = this.#images as Map<string, NodeImage>;
    const captured = this.#byParent?.get(dir);
    const byName = new Map<string, VfsEntry>();
    if (this.#vfs.typeOf(dir) === 'directory') {
      for (const e of this.#vfs.list(dir).entries) if (!images.has(e.path)) byName.set(e.name, e);
    }
    for (const path of captured ?? []) {
      const image = images.get(path) ?? null;
      if (image === null) continue;
      const name = path.slice(dir === '/' ? 1 : dir.length + 1);
      byName.set(name, { path, name, type: image.type, size: image.type === 'file' ? image.data.length : 0 });
    }
    return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** Whether the view already holds the state `path` had at its start. */
  captured(path: string): boolean {
    return this.#images?.has(path) === true;
  }

  /** Keeps the state `path` had before a commit that is about to change it, unless an earlier one was kept. */
  capture(path: string, image: NodeImage): void {
    this.#images ??= new Map();
    if (this.#images.has(path)) return;
    this.#images.set(path, image);
    this.#byParent ??= new Map();
    const parent = parentOf(path);
    let siblings = this.#byParent.get(parent);
    if (!siblings) {
      siblings = new Set();
      this.#byParent.set(parent, siblings);
    }
    siblings.add(path);
  }

  /** The first path the transaction read that a commit changed after it began, or null. */
  conflict(): string | null {
    const images = this.#images;
    if (images === null) return null;
    // Each test runs over the smaller side: a call that read little in a busy tree, or read much while
    // little changed.
    if (this.#reads.size <= images.size) {
      for (const path of this.#reads) if (images.has(path)) return path;
    } else {
      for (const path of images.keys()) if (this.#reads.has(path)) return path;
    }
    const typeChanged = (path: string) => (images.get(path)?.type ?? null) !== this.#vfs.typeOf(path);
    if (this.#types.size <= images.size) {
      for (const path of this.#types) if (images.has(path) && typeChanged(path)) return path;
    } else {
      for (const path of images.keys()) if (this.#types.has(path) && typeChanged(path)) return path;
    }
    const byParent = this.#byParent as Map<string, Set<string>>;
    for (const dir of this.#listed) {
      const changed = byParent.get(dir);
      if (changed) return changed.values().next().value ?? dir;
    }
    if (this.#listedDeep.size > 0) {
      for (const path of images.keys()) {
        for (const dir of this.#listedDeep) if (path !== dir && isWithin(path, dir)) return path;
      }
    }
    return null;
  }
}
