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
 * The pre-images of the paths commits changed while transactions were open, kept once for all their
 * views: `image` is the state a path had just before the commit numbered `seq` (the state's change
 * count after it) changed it. A view that began at change count `start` sees, for each path, the first
 * pre-image with `seq > start` (the path as it was when the view began), and the live tree for a path no
 * commit since changed.
 *
 * Each commit keeps one pre-image a path, however many calls are in flight, and only while an open view
 * may read it: one that began between the path's change before (`after`) and this one. One no open
 * view needs any more is dropped when its path changes again, or once the oldest open view began after
 * it, so that one long call does not keep alive what the short calls beside it needed.
 */
export class History {
  /** Each path's kept pre-images, in commit order (never empty). */
  readonly #byPath = new Map<string, Kept[]>();
  /** The paths with pre-images, by their parent folder. */
  readonly #byParent = new Map<string, Set<string>>();
  /** Every pre-image in commit order, from `#head` on; dropped ones stay until the log is compacted. */
  #log: Kept[] = [];
  #head = 0;
  #dropped = 0;
  /** The starts of the open views, in order (views begin in the order of their starts). */
  readonly #starts: number[] = [];

  /** A view began at change count `start` (at or after every open one's). */
  open(start: number): void {
    this.#starts.push(start);
  }

  /**
   * A view that began at `start` ended. What only it needed is dropped later (`tidy`), not now: a
   * commit ends its transaction before it checks the view for conflicts against these pre-images.
   */
  close(start: number): void {
    const starts = this.#starts;
    const i = lowerBound(starts, start);
    if (starts[i] === start) starts.splice(i, 1);
  }

  /** Drops what no open view can read: everything when none is open, else what came before the oldest began. */
  tidy(): void {
    if (this.#starts.length === 0) this.#clear();
    else this.#prune(this.#starts[0] as number);
  }

  /**
   * Whether the commit being made should keep `path`'s pre-image: some open view began after the
   * path's last kept change (or none is kept), so the state it began with is not kept yet.
   */
  wants(path: string): boolean {
    const starts = this.#starts;
    if (starts.length === 0) return false;
    const list = this.#byPath.get(path);
    // A commit after the newest view began already kept this path's state at that view's start.
    return list === undefined || (list[list.length - 1] as Kept).seq <= (starts[starts.length - 1] as number);
  }

  /** The newest commit any kept pre-image belongs to (0: none kept). */
  get latest(): number {
    for (let i = this.#log.length - 1; i >= this.#head; i--) {
      const kept = this.#log[i] as Kept;
      if (!kept.dropped) return kept.seq;
    }
    return 0;
  }

  record(path: string, seq: number, image: NodeImage): void {
    let list = this.#byPath.get(path);
    let after = -1;
    if (list === undefined) {
      list = [];
      this.#byPath.set(path, list);
      const parent = parentOf(path);
      let siblings = this.#byParent.get(parent);
      if (!siblings) {
        siblings = new Set();
        this.#byParent.set(parent, siblings);
      }
      siblings.add(path);
    } else {
      after = (list[list.length - 1] as Kept).seq;
      // The path's older pre-images that no open view can read any more go now.
      let kept = 0;
      for (const entry of list) {
        if (this.#needed(entry)) list[kept++] = entry;
        else this.#drop(entry);
      }
      list.length = kept;
    }
    const entry: Kept = { seq, after, path, image, dropped: false };
    list.push(entry);
    this.#log.push(entry);
  }

  /** Whether an open view began after the path's change before `entry` and before `entry`'s commit. */
  #needed(entry: Kept): boolean {
    const starts = this.#starts;
    const i = lowerBound(starts, entry.after);
    return i < starts.length && (starts[i] as number) < entry.seq;
  }

  #drop(entry: Kept): void {
    entry.dropped = true;
    this.#dropped++;
  }

  /** The state `path` had at change count `start`, or undefined when no commit since changed it. */
  at(path: string, start: number): NodeImage | undefined {
    const list = this.#byPath.get(path);
    if (list === undefined || (list[list.length - 1] as Kept).seq <= start) return undefined;
    return (list[firstWhere(0, list.length, (i) => (list[i] as Kept).seq > start)] as Kept).image;
  }

  /**
   * The paths commits after change count `start` changed, in commit order. For an open view that began
   * at `start`, every path changed since is among them: the first pre-image after its start is kept.
   */
  *changedSince(start: number): Generator<string> {
    const log = this.#log;
    for (let i = this.#firstAfter(start); i < log.length; i++) {
      const entry = log[i] as Kept;
      if (!entry.dropped) yield entry.path;
    }
  }

  /** About how many pre-images belong to commits after change count `start` (dropped ones included). */
  countSince(start: number): number {
    return this.#log.length - this.#firstAfter(start);
  }

  /** The index in the log of the first pre-image of a commit after change count `start`. */
  #firstAfter(start: number): number {
    const log = this.#log;
    return firstWhere(this.#head, log.length, (i) => (log[i] as Kept).seq > start);
  }

  /** The paths directly in `dir` that have pre-images. */
  childrenOf(dir: string): ReadonlySet<string> | undefined {
    return this.#byParent.get(dir);
  }

  /** How many pre-images are kept (status and tests). */
  get size(): number {
    return this.#log.length - this.#head - this.#dropped;
  }

  /** Drops the pre-images of commits at or before change count `oldest` (the oldest open view's start). */
  #prune(oldest: number): void {
    const log = this.#log;
    while (this.#head < log.length && (log[this.#head] as Kept).seq <= oldest) {
      const entry = log[this.#head] as Kept;
      this.#head++;
      if (entry.dropped) {
        this.#dropped--;
        continue;
      }
      // The oldest kept pre-image of its path: first in the path's list.
      const list = this.#byPath.get(entry.path) as Kept[];
      list.shift();
      if (list.length === 0) this.#forgetPath(entry.path);
    }
    if (this.#head === log.length) this.#clear();
    else if (this.#head + this.#dropped > 1024 && (this.#head + this.#dropped) * 2 > log.length) {
      this.#log = log.slice(this.#head).filter((entry) => !entry.dropped);
      this.#head = 0;
      this.#dropped = 0;
    }
  }

  #forgetPath(path: string): void {
    this.#byPath.delete(path);
    const parent = parentOf(path);
    const siblings = this.#byParent.get(parent);
    siblings?.delete(path);
    if (siblings?.size === 0) this.#byParent.delete(parent);
  }

  #clear(): void {
    if (this.#log.length === 0) return;
    this.#byPath.clear();
    this.#byParent.clear();
    this.#log = [];
    this.#head = 0;
    this.#dropped = 0;
  }
}

/** A pre-image, the commit it was kept for, and the path's change before that one (-1: not known). */
interface Kept {
  readonly seq: number;
  readonly after: number;
  readonly path: string;
  readonly image: NodeImage;
  dropped: boolean;
}

/** The first index of sorted `values` whose value is at least `value`. */
function lowerBound(values: readonly number[], value: number): number {
  return firstWhere(0, values.length, (i) => (values[i] as number) >= value);
}

/** The first index from `low` to `high` (exclusive) where `test` holds, for a test that holds from some index on; `high` when none. */
function firstWhere(low: number, high: number, test: (index: number) => boolean): number {
  while (low < high) {
    const mid = (low + high) >> 1;
    if (test(mid)) high = mid;
    else low = mid + 1;
  }
  return low;
}

/**
 * The committed tree as one transaction sees it: as it was when the transaction began, whatever other
 * calls commit meanwhile, and a record of everything the transaction looked at.
 *
 * Commits that change a path while the transaction runs keep its pre-image in the state's `History`;
 * the first one after this view's start is the path's state at the start, because nothing changed it
 * before. Every other path is unchanged since the start, so the live tree answers for it. A folder's
 * listing at the start is its live listing with the changed children put back as they were.
 *
 * The same pre-images say what changed under the transaction: `conflict()` is the first thing it read
 * (a path's content or stat; a folder's listing) that a commit changed after it began, or a path whose
 * type alone it looked at (`exists`, the checks of a write's target and parents) and whose type is no
 * longer the one it saw. A transaction whose reads all still hold can commit as if it had run alone
 * (serializable); one that wrote nothing never conflicts, since it saw one consistent tree. Two calls
 * replacing the same file without reading it therefore both commit, the later one's content winning,
 * as if they had run one after the other.
 */
export class ReadView implements TreeView {
  readonly #vfs: Vfs;
  readonly #history: History;
  /** The state's change count when the transaction began. */
  readonly start: number;
  /** Paths whose content or stat the transaction read. */
  readonly #reads = new Set<string>();
  /** Paths whose type alone it looked at: a change that keeps the type keeps what it saw. */
  readonly #types = new Set<string>();
  /** Folders whose direct children it listed. */
  readonly #listed = new Set<string>();
  /** Folders it listed recursively. */
  readonly #listedDeep = new Set<string>();

  constructor(vfs: Vfs, history: History, start: number) {
    this.#vfs = vfs;
    this.#history = history;
    this.start = start;
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
    const image = this.#history.at(path, this.start);
    if (image !== undefined) return image?.type ?? null;
    return this.#vfs.typeOf(path);
  }

  peek(path: string): Buffer {
    const image = this.#history.at(path, this.start);
    if (image !== undefined) {
      if (image?.type !== 'file') throw fail('NOT_FOUND', `File not found: ${path}`, path);
      return image.data;
    }
    return this.#vfs.peek(path);
  }

  read(path: string): Buffer {
    this.#reads.add(path);
    const image = this.#history.at(path, this.start);
    if (image !== undefined) {
      if (image === null) throw fail('NOT_FOUND', `File not found: ${path}`, path);
      if (image.type === 'directory') throw fail('IS_A_DIRECTORY', `Is a directory, not a file: ${path}`, path);
      return image.data;
    }
    return this.#vfs.read(path);
  }

  stat(path: string): VfsStat {
    this.#reads.add(path);
    const image = this.#history.at(path, this.start);
    if (image !== undefined) {
      if (image === null) throw fail('NOT_FOUND', `No such file or directory: ${path}`, path);
      const size = image.type === 'file' ? image.data.length : 0;
      return { path, type: image.type, size, mtime: image.mtime, birthtime: image.birthtime };
    }
    return this.#vfs.stat(path);
  }

  list(path: string, options: ListOptions = {}): { entries: VfsEntry[]; truncated: boolean } {
    this.#reads.add(path);
    (options.recursive ? this.#listedDeep : this.#listed).add(path);
    if (this.#history.latest <= this.start) return this.#vfs.list(path, options);
    const type = this.#typeAtStart(path);
    if (type === null) throw fail('NOT_FOUND', `Directory not found: ${path}`, path);
    if (type === 'file') throw fail('NOT_A_DIRECTORY', `Not a directory: ${path}`, path);
    return walkEntries(path, options, (dir) => this.#children(dir));
  }

  /** A folder's entries at the start: the live ones that no commit since changed, and the changed ones as they were. */
  #children(dir: string): VfsEntry[] {
    const history = this.#history;
    const byName = new Map<string, VfsEntry>();
    if (this.#vfs.typeOf(dir) === 'directory') {
      for (const e of this.#vfs.list(dir).entries) if (history.at(e.path, this.start) === undefined) byName.set(e.name, e);
    }
    for (const path of history.childrenOf(dir) ?? []) {
      const image = history.at(path, this.start);
      if (image === undefined || image === null) continue;
      const name = path.slice(dir === '/' ? 1 : dir.length + 1);
      byName.set(name, { path, name, type: image.type, size: image.type === 'file' ? image.data.length : 0 });
    }
    return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** The first path the transaction read that a commit changed after it began, or null. */
  conflict(): string | null {
    const history = this.#history;
    const start = this.start;
    if (history.latest <= start) return null;
    const changedHere = (path: string) => history.at(path, start) !== undefined;
    // Each test runs over the smaller side: a call that read little in a busy tree, or read much while
    // little changed.
    const changes = history.countSince(start);
    if (this.#reads.size <= changes) {
      for (const path of this.#reads) if (changedHere(path)) return path;
    } else {
      for (const path of history.changedSince(start)) if (this.#reads.has(path)) return path;
    }
    const typeChanged = (path: string) => ((history.at(path, start) as NodeImage)?.type ?? null) !== this.#vfs.typeOf(path);
    if (this.#types.size <= changes) {
      for (const path of this.#types) if (changedHere(path) && typeChanged(path)) return path;
    } else {
      for (const path of history.changedSince(start)) if (this.#types.has(path) && typeChanged(path)) return path;
    }
    for (const dir of this.#listed) {
      for (const path of history.childrenOf(dir) ?? []) if (changedHere(path)) return path;
    }
    if (this.#listedDeep.size > 0) {
      for (const path of history.changedSince(start)) {
        for (const dir of this.#listedDeep) if (path !== dir && isWithin(path, dir)) return path;
      }
    }
    return null;
  }
}
