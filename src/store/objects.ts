import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { fsyncDir, writeSynced } from './atomic.js';
import { applyDelta, decodeDelta, decodeTree, diffEntries, encodeDelta, encodeTree, isDelta, MAX_DELTA_DEPTH } from './tree-format.js';

/** `bytes` as a Buffer over the same memory. */
export function owned(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export type ObjectKind = 'blob' | 'tree';

/** Thrown when a stored object is missing or its bytes no longer match its name. */
export class CorruptObjectError extends Error {
  override readonly name = 'CorruptObjectError';
  constructor(
    message: string,
    readonly hash: string,
  ) {
    super(message);
  }
}

/** An object as it is stored: a blob's bytes, or a tree whole or as a delta (see tree-format.ts). */
export interface StoredObject {
  kind: ObjectKind;
  hash: string;
  stored: Buffer;
}

const HASH = /^[0-9a-f]{64}$/;
/** Bytes of whole trees kept decoded in memory: the trees a diff or a snapshot reads again and again. */
const TREE_CACHE_BYTES = 32 * 1024 * 1024;

interface Tree {
  canonical: Buffer;
  depth: number;
}

/**
 * Content-addressed objects on disk, named by the SHA-256 of their kind and bytes (git's scheme: the
 * kind prefix keeps a blob that happens to look like a tree from sharing its name). An object is
 * written once, whatever the number of snapshots holding it, and verified against its name when read.
 * A tree's name is the hash of its canonical (whole) bytes even when it is stored as a delta, so equal
 * folders have equal names however they were written.
 *
 * Three states of an object, so that a snapshot costs one journal fdatasync instead of one fsync per
 * object: *pending* (in memory only, e.g. the live tree hashed for a diff), *written* (on disk, not yet
 * fsynced — the caller has made it durable by other means, a journal record holding its bytes), and
 * *synced*. `sync()` makes everything synced; a checkpoint calls it before it lets go of the journal.
 */
export class ObjectStore {
  readonly dir: string;
  readonly #pending = new Map<string, StoredObject>();
  /** Paths written without fsync since the last `sync`. */
  readonly #unsynced = new Set<string>();
  /** Folders that got new names since the last `sync`, which makes those names durable together. */
  readonly #dirtyDirs = new Set<string>();
  readonly #trees = new Map<string, Tree>();
  #treeBytes = 0;
  /** Whether a prefix folder was created since the last `sync` (then the store folder needs syncing too). */
  #newPrefix = false;
  /** Whether the store folder itself was created by this engine (then its parent needs syncing once). */
  #newStore: boolean;

  /** Reads the store and never writes to it: what would be written stays in memory (a read-only view). */
  readonly #readOnly: boolean;

  constructor(dir: string, options: { readOnly?: boolean } = {}) {
    this.dir = dir;
    this.#readOnly = options.readOnly === true;
    // A new store's own name becomes durable with the first sync (its parent folder is synced then).
    this.#newStore = !existsSync(dir);
    if (!this.#readOnly) mkdirSync(dir, { recursive: true });
  }

  static hash(kind: ObjectKind, bytes: Uint8Array): string {
    return createHash('sha256').update(kind).update('\u0000').update(bytes).digest('hex');
  }

  #path(hash: string): string {
    return join(this.dir, hash.slice(0, 2), hash.slice(2));
  }

  has(hash: string): boolean {
    return HASH.test(hash) && (this.#pending.has(hash) || existsSync(this.#path(hash)));
  }

  /**
   * Adds an object (in memory until `writePending` or `sync`) unless already present. A tree given a
   * `base` (the previous version of the same folder) is stored as a delta against it when that is
   * much smaller and the chain of deltas is short.
   */
  put(kind: ObjectKind, bytes: Uint8Array, base?: string): string {
    const hash = ObjectStore.hash(kind, bytes);
    if ((kind === 'tree' && this.#trees.has(hash)) || this.#pending.has(hash) || existsSync(this.#path(hash))) return hash;
    // Taken, not copied: callers hand over bytes that nothing changes afterwards (a VFS file's own
    // buffer, a freshly encoded tree).
    const canonical = owned(bytes);
    let stored: Buffer = canonical;
    if (kind === 'tree') {
      let depth = 0;
      const delta = base !== undefined && base !== hash ? this.#delta(base, canonical) : null;
      if (delta) {
        stored = encodeDelta(delta);
        depth = delta.depth;
      }
      this.#remember(hash, { canonical, depth });
    }
    this.#pending.set(hash, { kind, hash, stored });
    return hash;
  }

  #delta(base: string, canonical: Buffer): ReturnType<typeof decodeDelta> | null {
    let from: Tree;
    try {
      from = this.#tree(base);
    } catch {
      return null; // no usable base: store the tree whole
    }
    if (from.depth + 1 > MAX_DELTA_DEPTH) return null;
    const change = diffEntries(decodeTree(from.canonical), decodeTree(canonical), canonical.length);
    return change ? { base, depth: from.depth + 1, ...change } : null;
  }

  /** Objects added since they were last written: what a journal record must carry to make them durable. */
  pending(): StoredObject[] {
    return [...this.#pending.values()];
  }

  /**
   * Writes the pending objects to disk. `synced`: each is fsynced before it takes its name (after a
   * power loss an object under a valid name is whole); otherwise the caller has made their bytes
   * durable elsewhere (a journal record) and `sync()` fsyncs them later.
   */
  writePending(synced: boolean): void {
    if (this.#readOnly) return;
    for (const object of this.#pending.values()) this.#write(object.hash, object.stored, synced);
    this.#pending.clear();
  }

  #write(hash: string, stored: Buffer, synced: boolean): void {
    const path = this.#path(hash);
    const dir = dirname(path);
    if (!existsSync(dir)) {
      mkdirSync(dir, { recursive: true });
      this.#newPrefix = true;
    }
    const tmp = `${path}.tmp-${process.pid}`;
    if (synced) {
      // Were it renamed first, a crash could leave an empty file under the name, and since a later put
      // of the same content finds the name taken, every later snapshot would refer to the damaged object.
      writeSynced(tmp, stored);
      this.#unsynced.delete(path);
    } else {
      writeFileSync(tmp, stored, { mode: 0o600 });
      this.#unsynced.add(path);
    }
    // A crash before the rename leaves a stray .tmp file (removed by gc), never a short object.
    renameSync(tmp, path);
    this.#dirtyDirs.add(dir);
  }

  /**
   * Puts back an object a journal record carried, exactly as stored then. After a power loss, a file
   * written without fsync may be short or empty under its valid name: it is rewritten.
   */
  restore(object: StoredObject): void {
    if (!HASH.test(object.hash)) throw new CorruptObjectError(`Malformed object name "${object.hash}"`, object.hash);
    if (this.#readOnly) {
      this.#pending.set(object.hash, object);
      return;
    }
    const path = this.#path(object.hash);
    let current: Buffer | null = null;
    try {
      current = readFileSync(path);
    } catch {}
    if (current?.equals(object.stored)) this.#unsynced.add(path);
    else this.#write(object.hash, object.stored, false);
  }

  /** Makes every object written or added since the last call durable, names included. */
  sync(): void {
    if (this.#readOnly) return;
    this.writePending(true);
    for (const path of this.#unsynced) {
      const fd = openSync(path, 'r');
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    this.#unsynced.clear();
    for (const dir of this.#dirtyDirs) fsyncDir(dir);
    this.#dirtyDirs.clear();
    if (this.#newPrefix) fsyncDir(this.dir);
    this.#newPrefix = false;
    if (this.#newStore) fsyncDir(dirname(this.dir));
    this.#newStore = false;
  }

  /** The canonical bytes of an object, verified against its name. */
  get(kind: ObjectKind, hash: string): Buffer {
    if (kind === 'tree') return this.#tree(hash).canonical;
    const pending = this.#pending.get(hash);
    if (pending) return pending.stored;
    const bytes = this.#read(kind, hash);
    if (ObjectStore.hash(kind, bytes) !== hash) throw corrupted(kind, hash);
    return bytes;
  }

  #read(kind: ObjectKind, hash: string): Buffer {
    if (!HASH.test(hash)) throw new CorruptObjectError(`Malformed object name "${hash}"`, hash);
    try {
      return readFileSync(this.#path(hash));
    } catch {
      throw new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is missing from the store`, hash);
    }
  }

  #tree(hash: string): Tree {
    const cached = this.#trees.get(hash);
    if (cached) return cached;
    const stored = this.#pending.get(hash)?.stored ?? this.#read('tree', hash);
    let tree: Tree;
    if (isDelta(stored)) {
      let canonical: Buffer;
      let depth: number;
      try {
        const delta = decodeDelta(stored);
        if (delta.depth > MAX_DELTA_DEPTH) throw new Error('delta chain too deep');
        const base = this.#tree(delta.base);
        depth = delta.depth;
        canonical = encodeTree(applyDelta(decodeTree(base.canonical), delta));
      } catch (error) {
        if (error instanceof CorruptObjectError && error.hash !== hash) {
          throw new CorruptObjectError(`The tree object ${hash.slice(0, 12)} is stored as a change to a damaged tree (${error.message})`, error.hash);
        }
        throw corrupted('tree', hash);
      }
      tree = { canonical, depth };
    } else {
      tree = { canonical: stored, depth: 0 };
    }
    if (ObjectStore.hash('tree', tree.canonical) !== hash) throw corrupted('tree', hash);
    this.#remember(hash, tree);
    return tree;
  }

  #remember(hash: string, tree: Tree): void {
    this.#trees.set(hash, tree);
    this.#treeBytes += tree.canonical.length;
    for (const [key, old] of this.#trees) {
      if (this.#treeBytes <= TREE_CACHE_BYTES) break;
      this.#trees.delete(key);
      this.#treeBytes -= old.canonical.length;
    }
  }

  /** The tree a stored delta is based on (null for blobs and whole trees): garbage collection keeps it. */
  baseOf(hash: string): string | null {
    let stored: Buffer;
    try {
      stored = this.#pending.get(hash)?.stored ?? this.#read('tree', hash);
    } catch {
      return null;
    }
    if (!isDelta(stored)) return null;
    try {
      return decodeDelta(stored).base;
    } catch {
      return null;
    }
  }

  /** Every stored object name (for garbage collection). */
  *list(): Generator<string> {
    yield* this.#pending.keys();
    for (const prefix of readdirSync(this.dir)) {
      if (!/^[0-9a-f]{2}$/.test(prefix)) continue;
      for (const rest of readdirSync(join(this.dir, prefix))) {
        if (/^[0-9a-f]{62}$/.test(rest)) {
          if (!this.#pending.has(prefix + rest)) yield prefix + rest;
        } else if (rest.includes('.tmp-')) rmSync(join(this.dir, prefix, rest), { force: true });
      }
    }
  }

  /** Stored size of an object in bytes (0 when absent). */
  size(hash: string): number {
    const pending = this.#pending.get(hash);
    if (pending) return pending.stored.length;
    try {
      return HASH.test(hash) ? statSync(this.#path(hash)).size : 0;
    } catch {
      return 0;
    }
  }

  delete(hash: string): void {
    this.#pending.delete(hash);
    const tree = this.#trees.get(hash);
    if (tree) {
      this.#trees.delete(hash);
      this.#treeBytes -= tree.canonical.length;
    }
    if (HASH.test(hash)) {
      this.#unsynced.delete(this.#path(hash));
      rmSync(this.#path(hash), { force: true });
    }
  }
}

function corrupted(kind: ObjectKind, hash: string): CorruptObjectError {
  return new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is corrupted (its content no longer matches its hash)`, hash);
}
