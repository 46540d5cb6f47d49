import { Volume } from 'memfs';
import { ToolFailure } from '../errors.js';
import { DEFAULT_VFS_QUOTA, type VfsQuota } from '../limits.js';
import { isWithin, normalizePath, parentOf } from './path.js';
import type { VfsView } from './view.js';

const EMPTY = Buffer.alloc(0);

/**
 * The parts of memfs's (4.x) core the VFS uses directly: the link tree, to find a path's node in one
 * walk (the fs API's walk stamps an access time on every folder it passes, builds a Stats object for
 * each lstat, and opens a file descriptor for each read and write: most of a small write's cost), and
 * a node's buffer, to store and read a file without copies. `coreOf` checks the shape once; without
 * it every operation goes through the fs API.
 */
interface MemfsNode {
  buf: Buffer;
  size: number;
  isDirectory(): boolean;
  isSymlink(): boolean;
  _setBuf(buf: Buffer): void;
}
interface MemfsLink {
  children: Map<string, MemfsLink | undefined>;
  getNode(): MemfsNode;
}
interface MemfsCore {
  root: MemfsLink;
}

function coreOf(vol: Volume): MemfsCore | null {
  const core = (vol as unknown as { _core?: Partial<MemfsCore> })._core;
  const root = core?.root;
  if (!root || !(root.children instanceof Map) || typeof root.getNode !== 'function') return null;
  const node = root.getNode() as Partial<MemfsNode>;
  if (typeof node.isDirectory !== 'function' || typeof node.isSymlink !== 'function' || typeof node._setBuf !== 'function') return null;
  return core as MemfsCore;
}

/**
 * What memfs asks of `process`. Its path walk asks for the uid and gid at every step (16 of each per
 * `fs.write`), and where a system call costs microseconds (measured 1.5 µs per `getuid` on a gVisor-like
 * sandbox) that was most of a write. The ids never change within a process, so they are read once;
 * they must be the real ones, as memfs stamps new nodes with `process.getuid()` itself. Relative paths
 * never reach memfs (every path is normalized first), so the working directory is fixed at the root.
 */
export const MEMFS_PROCESS = (() => {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  return {
    cwd: () => '/',
    platform: 'linux' as NodeJS.Platform,
    emitWarning: () => {},
    env: {},
    getuid: () => uid,
    getgid: () => gid,
  };
})();

/**
 * The engine's virtual filesystem: an in-memory POSIX tree on memfs. Nothing here imports `node:fs`;
 * a test spies on the host filesystem to prove no VFS operation reaches it. Every public method takes
 * raw, untrusted paths and normalizes them itself.
 */

export type EntryType = 'file' | 'directory';

export interface VfsEntry {
  path: string;
  name: string;
  type: EntryType;
  size: number;
}

export interface VfsStat {
  path: string;
  type: EntryType;
  size: number;
  mtime: string;
  birthtime: string;
}

export interface WriteOutcome {
  created: boolean;
  /**
   * The content the file had before, or null when it was created. A call's transaction gives it only
   * when the write asked for it (`previous`, or an append): handing it over makes it a read of the file.
   */
  previous: Buffer | null;
  size: number;
}

export interface WriteOptions {
  /** Create missing parent directories (default true). */
  parents?: boolean;
  /** Add to the end of an existing file instead of replacing it. */
  append?: boolean;
  /** Fail with ALREADY_EXISTS if the file exists. */
  exclusive?: boolean;
  /**
   * The caller uses the replaced content (`previous`: fs.write's diff). In a call's transaction that
   * content then counts as read, so another call's change to the file refuses this call's commit;
   * without it, replacing a file depends only on its type, and does not conflict with another write.
   */
  previous?: boolean;
}

export interface ListOptions {
  recursive?: boolean;
  /** Stop after this many entries (the caller reports truncation). */
  limit?: number;
}

/** A file node's bytes as stored (its buffer may be longer than the file when memfs wrote it). */
function held(node: MemfsNode): Buffer {
  return node.buf.length === node.size ? node.buf : node.buf.subarray(0, node.size);
}

function fail(code: 'NOT_FOUND' | 'ALREADY_EXISTS' | 'NOT_A_DIRECTORY' | 'IS_A_DIRECTORY' | 'NOT_EMPTY', message: string, path: string) {
  return new ToolFailure('execution', code, message, { details: { path } });
}

interface FsErrorLike {
  code?: string;
}

export class Vfs implements VfsView {
  readonly quota: Readonly<VfsQuota>;
  readonly #vol = Volume.fromJSON({}, '/', { process: MEMFS_PROCESS });
  readonly #core: MemfsCore | null;
  #bytes = 0;
  /** Files and directories, not counting the root. */
  #nodes = 0;
  /** Directories among the nodes (snapshots report files and folders apart without walking the tree). */
  #dirs = 0;

  /** `direct: false` makes every operation go through memfs's fs API, as without its core (tests compare the two). */
  constructor(quota: Partial<VfsQuota> = {}, options: { direct?: boolean } = {}) {
    this.quota = Object.freeze({ ...DEFAULT_VFS_QUOTA, ...quota });
    this.#core = options.direct === false ? null : coreOf(this.#vol);
  }

  /** Normalizes an untrusted path (throws INVALID_PATH / QUOTA_EXCEEDED). */
  resolve(path: unknown): string {
    return normalizePath(path, this.quota);
  }

  /** `files` counts files and folders together (what the `max_files` quota limits); `dirs` the folders. */
  usage(): { bytes: number; files: number; dirs: number } {
    return { bytes: this.#bytes, files: this.#nodes, dirs: this.#dirs };
  }

  /** The type of an already-normalized path, or null when nothing is there. */
  typeOf(path: string): EntryType | null {
    if (path === '/') return 'directory';
    return this.#typeOf(path);
  }

  #typeOf(path: string): EntryType | null {
    if (this.#core) {
      const node = this.#lookup(path);
      if (node === null) return null;
      // The VFS API creates no symlinks; one found here is refused rather than followed.
      if (node.isSymlink())
        throw new ToolFailure('execution', 'INVALID_PATH', `Refusing to follow a symbolic link at ${path}`, { details: { path } });
      return node.isDirectory() ? 'directory' : 'file';
    }
    try {
      const st = this.#vol.lstatSync(path);
      if (st.isSymbolicLink()) {
        // The VFS API creates no symlinks; one found here is refused rather than followed.
        throw new ToolFailure('execution', 'INVALID_PATH', `Refusing to follow a symbolic link at ${path}`, { details: { path } });
      }
      return st.isDirectory() ? 'directory' : 'file';
    } catch (error) {
      if (error instanceof ToolFailure) throw error;
      const code = (error as FsErrorLike).code;
      if (code === 'ENOENT') return null;
      if (code === 'ENOTDIR') return null;
      throw error;
    }
  }

  /**
   * The node at a normalized path, or null when nothing is there or a file stands where a folder
   * should (as lstat reports ENOENT or ENOTDIR). A symlink on the way is not followed: the VFS makes
   * none, and one met before the last step counts as nothing there.
   */
  #lookup(path: string): MemfsNode | null {
    let link = (this.#core as MemfsCore).root;
    if (path === '/') return link.getNode();
    let from = 1;
    for (;;) {
      const end = path.indexOf('/', from);
      const next = link.children.get(end === -1 ? path.slice(from) : path.slice(from, end));
      if (next === undefined) return null;
      const node = next.getNode();
      if (end === -1) return node;
      if (!node.isDirectory()) return null;
      link = next;
      from = end + 1;
    }
  }

  /** Checks every ancestor of `path`: each must be a directory (or absent when `allowMissing`). */
  #checkAncestors(path: string, allowMissing: boolean): string[] {
    const missing: string[] = [];
    let dir = parentOf(path);
    while (dir !== '/') {
      const type = this.#typeOf(dir);
      if (type === 'file') throw fail('NOT_A_DIRECTORY', `Not a directory: ${dir}`, dir);
      if (type === null) {
        if (!allowMissing) throw fail('NOT_FOUND', `Directory not found: ${dir}`, dir);
        missing.push(dir);
      }
      dir = parentOf(dir);
    }
    return missing.reverse();
  }

  exists(rawPath: unknown): boolean {
    const path = this.resolve(rawPath);
    return path === '/' || this.#typeOf(path) !== null;
  }

  /**
   * A file's bytes as the VFS holds them, not a copy (`read` copies): for the engine's own readers that
   * only hash or store them, such as checkpoints and snapshots. The caller must not change them.
   */
  peek(path: string): Buffer {
    const node = this.#core ? this.#lookup(path) : null;
    if (node && !node.isDirectory() && !node.isSymlink()) return held(node);
    return this.read(path);
  }

  read(rawPath: unknown): Buffer {
    const path = this.resolve(rawPath);
    if (this.#core) {
      const node = this.#lookup(path);
      if (node && !node.isDirectory() && !node.isSymlink()) return Buffer.from(held(node));
    }
    // One memfs call on the hot path; the type checks run only when it fails. The VFS API creates no
    // symlinks, so there is none to follow here.
    try {
      return this.#vol.readFileSync(path) as Buffer;
    } catch (error) {
      const type = path === '/' ? 'directory' : this.#typeOf(path);
      if (type === null) throw fail('NOT_FOUND', `File not found: ${path}`, path);
      if (type === 'directory') throw fail('IS_A_DIRECTORY', `Is a directory, not a file: ${path}`, path);
      throw error;
    }
  }

  stat(rawPath: unknown): VfsStat {
    const path = this.resolve(rawPath);
    if (path !== '/' && this.#typeOf(path) === null) throw fail('NOT_FOUND', `No such file or directory: ${path}`, path);
    const st = this.#vol.statSync(path);
    return {
      path,
      type: st.isDirectory() ? 'directory' : 'file',
      size: st.isDirectory() ? 0 : Number(st.size),
      mtime: st.mtime.toISOString(),
      birthtime: st.birthtime.toISOString(),
    };
  }

  write(rawPath: unknown, data: Buffer | string, options: WriteOptions = {}): WriteOutcome {
    const path = this.resolve(rawPath);
    if (path === '/') throw fail('IS_A_DIRECTORY', 'Cannot write to the root directory', path);
    const parents = options.parents ?? true;
    const missing = this.#checkAncestors(path, parents);
    const type = this.#typeOf(path);
    if (type === 'directory') throw fail('IS_A_DIRECTORY', `Is a directory, not a file: ${path}`, path);
    if (type === 'file' && options.exclusive) throw fail('ALREADY_EXISTS', `File already exists: ${path}`, path);
    // Not a copy: the stored buffer is replaced by the write, never changed (see #store).
    const previous = type === 'file' ? this.peek(path) : null;
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const content = options.append && previous ? Buffer.concat([previous, bytes]) : bytes;
    this.checkQuota(content.length - (previous?.length ?? 0), missing.length + (previous ? 0 : 1), path, content.length);
    for (const dir of missing) this.#vol.mkdirSync(dir);
    this.#store(path, content);
    this.#bytes += content.length - (previous?.length ?? 0);
    this.#nodes += missing.length + (previous ? 0 : 1);
    this.#dirs += missing.length;
    return { created: previous === null, previous, size: content.length };
  }

  /**
   * Makes `content` the file's bytes. memfs copies what `writeFileSync` is given into a buffer of the
   * next power of two (a 96 MiB file took 128 MiB, held beside the caller's copy until it was freed), so
   * the file's node is handed `content` itself: the VFS owns it from here (callers pass buffers of their
   * own; `engine.vfs` copies what the host gives). memfs never changes a stored buffer in place (reads
   * copy, writes replace), so sharing it with a journal record or a snapshot is safe. Should a memfs
   * version lack the node API, the copy is made.
   */
  #store(path: string, content: Buffer): void {
    if (!this.#core) {
      this.#vol.writeFileSync(path, content);
      return;
    }
    let node = this.#lookup(path);
    if (node === null) {
      this.#vol.writeFileSync(path, EMPTY);
      node = this.#lookup(path) as MemfsNode;
    }
    node._setBuf(content);
  }

  mkdir(rawPath: unknown, options: { parents?: boolean } = {}): { created: boolean; path: string } {
    const path = this.resolve(rawPath);
    if (path === '/') return { created: false, path };
    const parents = options.parents ?? true;
    const missing = this.#checkAncestors(path, parents);
    const type = this.#typeOf(path);
    if (type === 'file') throw fail('ALREADY_EXISTS', `A file already exists at ${path}`, path);
    if (type === 'directory') return { created: false, path };
    this.checkQuota(0, missing.length + 1, path, 0);
    for (const dir of missing) this.#vol.mkdirSync(dir);
    this.#vol.mkdirSync(path);
    this.#nodes += missing.length + 1;
    this.#dirs += missing.length + 1;
    return { created: true, path };
  }

  list(rawPath: unknown, options: ListOptions = {}): { entries: VfsEntry[]; truncated: boolean } {
    const path = this.resolve(rawPath);
    const type = path === '/' ? 'directory' : this.#typeOf(path);
    if (type === null) throw fail('NOT_FOUND', `Directory not found: ${path}`, path);
    if (type === 'file') throw fail('NOT_A_DIRECTORY', `Not a directory: ${path}`, path);
    const limit = options.limit ?? Number.POSITIVE_INFINITY;
    const entries: VfsEntry[] = [];
    const walk = (dir: string): boolean => {
      const names = (this.#vol.readdirSync(dir) as string[]).map(String).sort();
      for (const name of names) {
        if (entries.length >= limit) return false;
        const child = dir === '/' ? `/${name}` : `${dir}/${name}`;
        const st = this.#vol.lstatSync(child);
        const isDir = st.isDirectory();
        entries.push({ path: child, name, type: isDir ? 'directory' : 'file', size: isDir ? 0 : Number(st.size) });
        if (isDir && options.recursive && !walk(child)) return false;
      }
      return true;
    };
    const complete = walk(path);
    return { entries, truncated: !complete };
  }

  /**
   * The names and types of a folder's entries, sorted like `list`, for the tree index: no stat per entry
   * (memfs builds a Stats object, with two syscalls, for each), so a snapshot after one change does not
   * pay for the hundred neighbours of the changed file. `dir` must be a normalized folder path.
   */
  entries(dir: string): Array<{ name: string; type: EntryType }> {
    const dirents = this.#vol.readdirSync(dir, { withFileTypes: true }) as Array<{ name: unknown; isDirectory(): boolean }>;
    return dirents
      .map((d) => ({ name: String(d.name), type: d.isDirectory() ? ('directory' as const) : ('file' as const) }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Deletes a file, or a directory (non-empty only with `recursive`). Returns how many entries went. */
  delete(rawPath: unknown, options: { recursive?: boolean } = {}): { deleted: number; bytes: number } {
    const path = this.resolve(rawPath);
    const type = path === '/' ? 'directory' : this.#typeOf(path);
    if (type === null) throw fail('NOT_FOUND', `No such file or directory: ${path}`, path);
    if (type === 'file') {
      const size = Number(this.#vol.statSync(path).size);
      this.#vol.unlinkSync(path);
      this.#bytes -= size;
      this.#nodes -= 1;
      return { deleted: 1, bytes: size };
    }
    const { entries } = this.list(path, { recursive: true });
    if (entries.length > 0 && !options.recursive) {
      throw fail('NOT_EMPTY', `Directory not empty: ${path} (pass recursive: true to delete it with its contents)`, path);
    }
    const bytes = entries.reduce((sum, e) => sum + e.size, 0);
    if (path === '/') {
      for (const name of this.#vol.readdirSync('/') as string[]) this.#vol.rmSync(`/${name}`, { recursive: true });
    } else {
      this.#vol.rmSync(path, { recursive: true });
    }
    const deleted = entries.length + (path === '/' ? 0 : 1);
    this.#bytes -= bytes;
    this.#nodes -= deleted;
    this.#dirs -= entries.filter((e) => e.type === 'directory').length + (path === '/' ? 0 : 1);
    return { deleted, bytes };
  }

  move(rawFrom: unknown, rawTo: unknown, options: { overwrite?: boolean } = {}): { from: string; to: string; overwritten: boolean } {
    const from = this.resolve(rawFrom);
    const to = this.resolve(rawTo);
    if (from === '/') throw fail('IS_A_DIRECTORY', 'Cannot move the root directory', from);
    const type = this.#typeOf(from);
    if (type === null) throw fail('NOT_FOUND', `No such file or directory: ${from}`, from);
    if (from === to) return { from, to, overwritten: false };
    if (isWithin(to, from)) {
      throw new ToolFailure('execution', 'INVALID_PATH', `Cannot move ${from} into itself (${to})`, { details: { from, to } });
    }
    if (isWithin(from, to)) {
      throw new ToolFailure('execution', 'INVALID_PATH', `Cannot move ${from} over ${to}, which contains it`, { details: { from, to } });
    }
    const missing = this.#checkAncestors(to, true);
    const target = to === '/' ? 'directory' : this.#typeOf(to);
    let overwritten = false;
    if (target !== null) {
      if (!options.overwrite) throw fail('ALREADY_EXISTS', `Destination exists: ${to} (pass overwrite: true to replace it)`, to);
      if (target !== type) {
        throw fail(target === 'directory' ? 'IS_A_DIRECTORY' : 'NOT_A_DIRECTORY', `Cannot replace a ${target} with a ${type}: ${to}`, to);
      }
      this.delete(to, { recursive: true });
      overwritten = true;
    }
    this.checkQuota(0, missing.length, to, 0);
    for (const dir of missing) this.#vol.mkdirSync(dir);
    this.#nodes += missing.length;
    this.#dirs += missing.length;
    this.#vol.renameSync(from, to);
    return { from, to, overwritten };
  }

  /** Throws QUOTA_EXCEEDED before anything changes when a change would pass a quota. */
  checkQuota(deltaBytes: number, deltaNodes: number, path: string, fileBytes: number): void {
    const q = this.quota;
    if (fileBytes > q.max_file_bytes) {
      throw quotaFailure(
        `File of ${fileBytes} bytes exceeds the per-file quota of ${q.max_file_bytes} bytes`,
        path,
        'max_file_bytes',
        q.max_file_bytes,
      );
    }
    if (this.#bytes + deltaBytes > q.max_bytes) {
      throw quotaFailure(
        `Write would bring the VFS to ${this.#bytes + deltaBytes} bytes, over its quota of ${q.max_bytes}`,
        path,
        'max_bytes',
        q.max_bytes,
      );
    }
    if (this.#nodes + deltaNodes > q.max_files) {
      throw quotaFailure(`The VFS would hold more than ${q.max_files} files and directories`, path, 'max_files', q.max_files);
    }
  }
}

function quotaFailure(message: string, path: string, limit: keyof VfsQuota, max: number): ToolFailure {
  return new ToolFailure('execution', 'QUOTA_EXCEEDED', message, { details: { path, limit, max } });
}
