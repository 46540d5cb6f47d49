// Over 500 lines: one class, the on-disk object store, whose writes, reads, tree cache and collection share its indexes.
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
import { basename, dirname, join } from 'node:path';
import { fsyncDir, writeFileAtomic, writeSynced } from './atomic.js';
import { DEAD_SUFFIX, PACK_SUFFIX, Pack } from './packs.js';
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
/**
 * A batch of at least this many objects of at most PACK_OBJECT_BYTES each is written as one pack.
 * Below it, loose files cost little (a snapshot after a few changes writes three or four), and garbage
 * collection deletes each on its own; above it, their per-file cost (create, rename, fsync) dominates:
 * 10,000 objects of 200 bytes took 1.4 s to write and 3 to 22 s to fsync as files, one pack 15 ms.
 */
export const PACK_MIN_OBJECTS = 64;
const PACK_OBJECT_BYTES = 1024 * 1024;
/**
 * A pack is rewritten without its unreachable objects once they are at least this share of its bytes;
 * until then they stay in it, listed as dead beside it. Rewriting a pack whenever one object in it
 * died would copy a whole imported tree to drop one old file; this way each byte is copied at most
 * about as often as the pack's size halves.
 */
const PACK_REWRITE_DEAD_SHARE = 0.5;

interface Tree {
  canonical: Buffer;
  depth: number;
  /** The tree its stored form is a delta of (null when stored whole). */
  base: string | null;
}

/**
 * Content-addressed objects on disk, named by the SHA-256 of their kind and bytes (git's scheme: the
 * kind prefix keeps a blob that happens to look like a tree from sharing its name). An object is
 * written once, whatever the number of snapshots holding it, and verified against its name when read.
 * A tree's name is the hash of its canonical (whole) bytes even when it is stored as a delta, so equal
 * folders have equal names however they were written.
 *
 * An object is a loose file (`<dir>/ab/cdef…`) or a record of a pack (`<dir>/pack/*.pack`, packs.ts):
 * a batch of many small objects (the first snapshot of a big tree, a checkpoint after an import) is
 * one pack, written and synced as one file. Packs never change once written. A name may have copies in
 * several places (a pack and a loose file, after a crash): a read takes the first that verifies.
 *
 * Three states of an object, so that a snapshot costs one journal fdatasync instead of one fsync per
 * object: *pending* (in memory only, e.g. the live tree hashed for a diff), *written* (on disk, not yet
 * fsynced — the caller has made it durable by other means, a journal record holding its bytes), and
 * *synced*. `sync()` makes everything synced; a checkpoint calls it before it lets go of the journal.
 */
export class ObjectStore {
  readonly dir: string;
  readonly #packDir: string;
  readonly #pending = new Map<string, StoredObject>();
  /** Pending objects put back from a journal record (`restore`): that record keeps them durable, so `pending()` leaves them out. */
  readonly #journaled = new Set<string>();
  /** Paths written without fsync since the last `sync`. */
  readonly #unsynced = new Set<string>();
  readonly #unsyncedPacks = new Set<Pack>();
  /** Folders that got new names since the last `sync`, which makes those names durable together. */
  readonly #dirtyDirs = new Set<string>();
  readonly #trees = new Map<string, Tree>();
  #treeBytes = 0;
  #packs: Pack[] = [];
  /** The loose objects' prefix folders known to exist (read when first needed). */
  #prefixes: Set<string> | null = null;
  /** File names of the packs loaded (a read that misses looks for packs written since). */
  readonly #packNames = new Set<string>();
  /** Packs with objects found dead since the last `compact`. */
  readonly #dying = new Set<Pack>();
  /** Whether a prefix folder was created since the last `sync` (then the store folder needs syncing too). */
  #newPrefix = false;
  /** Whether the store folder itself was created by this engine (then its parent needs syncing once). */
  #newStore: boolean;

  /** Reads the store and never writes to it: what would be written stays in memory (a read-only view). */
  readonly #readOnly: boolean;

  constructor(dir: string, options: { readOnly?: boolean } = {}) {
    this.dir = dir;
    this.#packDir = join(dir, 'pack');
    this.#readOnly = options.readOnly === true;
    // A new store's own name becomes durable with the first sync (its parent folder is synced then).
    this.#newStore = !existsSync(dir);
    if (!this.#readOnly) mkdirSync(dir, { recursive: true });
    this.#loadPacks();
  }

  static hash(kind: ObjectKind, bytes: Uint8Array): string {
    return createHash('sha256').update(kind).update('\u0000').update(bytes).digest('hex');
  }

  #path(hash: string): string {
    return join(this.dir, hash.slice(0, 2), hash.slice(2));
  }

  /** Loads the packs not loaded yet; returns them. */
  #loadPacks(): Pack[] {
    let names: string[];
    try {
      names = readdirSync(this.#packDir);
    } catch {
      return [];
    }
    const loaded: Pack[] = [];
    for (const name of names.sort()) {
      if (!name.endsWith(PACK_SUFFIX) || name.startsWith('.') || this.#packNames.has(name)) continue;
      let pack: Pack;
      try {
        pack = Pack.open(join(this.#packDir, name));
      } catch (error) {
        // Removed by the gc of the engine holding the store, between the listing and the open.
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw error;
      }
      let dead: string[] = [];
      try {
        dead = readFileSync(`${pack.path}${DEAD_SUFFIX}`, 'utf8').split('\n');
      } catch {}
      for (const hash of dead) if (HASH.test(hash)) pack.dead.add(hash);
      this.#packs.push(pack);
      this.#packNames.add(name);
      loaded.push(pack);
    }
    return loaded;
  }

  has(hash: string): boolean {
    if (!HASH.test(hash)) return false;
    if (this.#pending.has(hash)) return true;
    const key = Buffer.from(hash, 'hex');
    return this.#packs.some((pack) => pack.holds(hash, key)) || (this.#hasPrefix(hash) && existsSync(this.#path(hash)));
  }

  /**
   * Whether the folder a loose object of this name would be in exists. Asked before looking for the
   * file: in a store whose objects are packed, most of the 256 folders never exist, and the first
   * snapshot of 10,000 files spent a third of its time (0.1 s) finding out that each was not there.
   */
  #hasPrefix(hash: string): boolean {
    if (this.#prefixes === null) {
      this.#prefixes = new Set();
      try {
        for (const name of readdirSync(this.dir)) if (/^[0-9a-f]{2}$/.test(name)) this.#prefixes.add(name);
      } catch {}
    }
    return this.#prefixes.has(hash.slice(0, 2));
  }

  /**
   * Adds an object (in memory until `writePending` or `sync`) unless already present. A tree given a
   * `base` (the previous version of the same folder) is stored as a delta against it when that is
   * much smaller and the chain of deltas is short.
   */
  put(kind: ObjectKind, bytes: Uint8Array, base?: string): string {
    const hash = ObjectStore.hash(kind, bytes);
    if ((kind === 'tree' && this.#trees.has(hash)) || this.has(hash)) return hash;
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
      this.#remember(hash, { canonical, depth, base: delta ? delta.base : null });
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
    const out: StoredObject[] = [];
    for (const object of this.#pending.values()) if (!this.#journaled.has(object.hash)) out.push(object);
    return out;
  }

  /**
   * Says that a journal record now carries these objects (they were `pending()`): that record keeps
   * them durable, so they stay in memory and are written with the next `sync` (a checkpoint), where
   * the few new objects of many snapshots go to disk together, most often as one pack. Writing each
   * snapshot's three or four objects as loose files at once cost 1–7 ms a snapshot on a packed store,
   * whose prefix folders mostly do not exist yet (BENCHMARKS.md).
   */
  journaled(objects: readonly StoredObject[]): void {
    for (const object of objects) if (this.#pending.has(object.hash)) this.#journaled.add(object.hash);
  }

  /**
   * Writes the pending objects to disk. `synced`: each is fsynced before it takes its name (after a
   * power loss an object under a valid name is whole); otherwise the caller has made their bytes
   * durable elsewhere (a journal record) and `sync()` fsyncs them later. Many small objects go to one
   * new pack, the rest to loose files.
   */
  writePending(synced: boolean): void {
    if (this.#readOnly || this.#pending.size === 0) return;
    const packed: StoredObject[] = [];
    for (const object of this.#pending.values()) if (object.stored.length <= PACK_OBJECT_BYTES) packed.push(object);
    if (packed.length >= PACK_MIN_OBJECTS) {
      this.#writePack(packed, synced);
      for (const object of packed) {
        this.#pending.delete(object.hash);
        this.#journaled.delete(object.hash);
      }
    }
    for (const object of this.#pending.values()) this.#write(object.hash, object.stored, synced);
    this.#pending.clear();
    this.#journaled.clear();
  }

  #writePack(objects: StoredObject[], synced: boolean): void {
    if (!existsSync(this.#packDir)) {
      mkdirSync(this.#packDir, { recursive: true });
      this.#newPrefix = true;
    }
    // Written under its final name: a crash while it is written leaves a pack whose torn records are
    // found by their CRC and ignored (packs.ts), never an object that reads as whole but is not.
    const pack = Pack.write(this.#packDir, objects, synced);
    this.#packs.push(pack);
    this.#packNames.add(basename(pack.path));
    if (!synced) this.#unsyncedPacks.add(pack);
    this.#dirtyDirs.add(this.#packDir);
  }

  #write(hash: string, stored: Buffer, synced: boolean): void {
    const path = this.#path(hash);
    const dir = dirname(path);
    if (!existsSync(dir)) {
      mkdirSync(dir, { recursive: true });
      this.#newPrefix = true;
    }
    this.#prefixes?.add(hash.slice(0, 2));
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
   * written without fsync may be short or empty under its valid name (rewritten), and a pack written
   * without fsync may have lost records (the object is written again with the next batch).
   */
  restore(object: StoredObject): void {
    const hash = object.hash;
    if (!HASH.test(hash)) throw new CorruptObjectError(`Malformed object name "${hash}"`, hash);
    if (this.#readOnly) {
      this.#pending.set(hash, object);
      return;
    }
    if (this.#pending.has(hash)) return;
    const key = Buffer.from(hash, 'hex');
    for (const pack of this.#packs) {
      const at = pack.find(key);
      if (at === -1 || pack.dead.has(hash)) continue;
      let current: Buffer | null = null;
      try {
        current = pack.read(at);
      } catch {}
      if (current?.equals(object.stored)) {
        this.#unsyncedPacks.add(pack);
        this.#dirtyDirs.add(this.#packDir);
        return;
      }
    }
    const path = this.#path(hash);
    let current: Buffer | null = null;
    try {
      current = readFileSync(path);
    } catch {}
    if (current?.equals(object.stored)) {
      this.#unsynced.add(path);
      this.#dirtyDirs.add(dirname(path));
    } else if (current) {
      this.#write(hash, object.stored, false);
    } else {
      this.#pending.set(hash, object);
      this.#journaled.add(hash);
    }
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
    for (const pack of this.#unsyncedPacks) pack.sync();
    this.#unsyncedPacks.clear();
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
    let damaged = false;
    for (const bytes of this.#copies(hash)) {
      if (ObjectStore.hash(kind, bytes) === hash) return bytes;
      damaged = true;
    }
    throw damaged ? corrupted(kind, hash) : missing(kind, hash);
  }

  /**
   * The stored bytes of every copy of an object on disk, packs first; when there is none, packs
   * written since the store was opened (by the engine holding it, for a read-only view) are looked at.
   */
  *#copies(hash: string): Generator<Buffer> {
    if (!HASH.test(hash)) throw new CorruptObjectError(`Malformed object name "${hash}"`, hash);
    const key = Buffer.from(hash, 'hex');
    let found = false;
    const inPacks = function* (packs: Pack[]): Generator<Buffer> {
      for (const pack of packs) {
        const at = pack.find(key);
        if (at === -1 || pack.dead.has(hash)) continue;
        let bytes: Buffer;
        try {
          bytes = pack.read(at);
        } catch (error) {
          // Removed by a gc since it was listed: another copy may be in the pack that replaced it.
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
          throw error;
        }
        found = true;
        yield bytes;
      }
    };
    yield* inPacks(this.#packs);
    let loose: Buffer | null = null;
    try {
      loose = readFileSync(this.#path(hash));
    } catch {}
    if (loose) {
      found = true;
      yield loose;
    }
    if (!found) yield* inPacks(this.#loadPacks());
  }

  #tree(hash: string): Tree {
    const cached = this.#trees.get(hash);
    if (cached) return cached;
    const pending = this.#pending.get(hash);
    let failure: CorruptObjectError | null = null;
    for (const stored of pending ? [pending.stored] : this.#copies(hash)) {
      try {
        const tree = this.#decode(hash, stored);
        this.#remember(hash, tree);
        return tree;
      } catch (error) {
        if (!(error instanceof CorruptObjectError)) throw error;
        failure = error;
      }
    }
    throw failure ?? missing('tree', hash);
  }

  /** A tree from its stored bytes (whole, or a delta of its base), verified against its name. */
  #decode(hash: string, stored: Buffer): Tree {
    let tree: Tree;
    if (isDelta(stored)) {
      let canonical: Buffer;
      let depth: number;
      let base: string;
      try {
        const delta = decodeDelta(stored);
        if (delta.depth > MAX_DELTA_DEPTH) throw new Error('delta chain too deep');
        base = delta.base;
        const from = this.#tree(delta.base);
        depth = delta.depth;
        canonical = encodeTree(applyDelta(decodeTree(from.canonical), delta));
      } catch (error) {
        if (error instanceof CorruptObjectError && error.hash !== hash) {
          throw new CorruptObjectError(`The tree object ${hash.slice(0, 12)} is stored as a change to a damaged tree (${error.message})`, error.hash);
        }
        throw corrupted('tree', hash);
      }
      tree = { canonical, depth, base };
    } else {
      tree = { canonical: stored, depth: 0, base: null };
    }
    if (ObjectStore.hash('tree', tree.canonical) !== hash) throw corrupted('tree', hash);
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

  /**
   * The tree the stored form of a tree is a delta of (null for blobs, whole trees and unreadable ones):
   * garbage collection keeps it. Of several copies, that of the copy reads use.
   */
  baseOf(hash: string): string | null {
    try {
      return this.#tree(hash).base;
    } catch {
      return null;
    }
  }

  /** Every stored object name, once each (for garbage collection, which also clears leftovers of crashes here). */
  *list(): Generator<string> {
    const seen = new Set<string>();
    for (const hash of this.#pending.keys()) {
      seen.add(hash);
      yield hash;
    }
    for (const pack of [...this.#packs]) {
      for (const { hash } of pack.entries()) {
        if (seen.has(hash) || pack.dead.has(hash)) continue;
        seen.add(hash);
        yield hash;
      }
    }
    for (const prefix of readdirSync(this.dir)) {
      if (!/^[0-9a-f]{2}$/.test(prefix)) continue;
      for (const rest of readdirSync(join(this.dir, prefix))) {
        if (/^[0-9a-f]{62}$/.test(rest)) {
          if (!seen.has(prefix + rest)) yield prefix + rest;
        } else if (rest.includes('.tmp-') && !this.#readOnly) rmSync(join(this.dir, prefix, rest), { force: true });
      }
    }
    if (this.#readOnly || !existsSync(this.#packDir)) return;
    for (const name of readdirSync(this.#packDir)) {
      // A pack gc was writing when it crashed, or the dead list of a pack it had already removed.
      const stray = name.startsWith('.tmp-') || (name.endsWith(DEAD_SUFFIX) && !this.#packNames.has(name.slice(0, -DEAD_SUFFIX.length)));
      if (stray) rmSync(join(this.#packDir, name), { force: true });
    }
  }

  /** Stored size of an object in bytes (0 when absent). */
  size(hash: string): number {
    const pending = this.#pending.get(hash);
    if (pending) return pending.stored.length;
    if (!HASH.test(hash)) return 0;
    const key = Buffer.from(hash, 'hex');
    for (const pack of this.#packs) {
      const at = pack.find(key);
      if (at !== -1 && !pack.dead.has(hash)) return pack.entry(at).length;
    }
    try {
      return statSync(this.#path(hash)).size;
    } catch {
      return 0;
    }
  }

  /** Removes an object: a loose file at once; in a pack, it is found dead, and gone from the file once `compact` rewrites it. */
  delete(hash: string): void {
    this.#pending.delete(hash);
    this.#journaled.delete(hash);
    const tree = this.#trees.get(hash);
    if (tree) {
      this.#trees.delete(hash);
      this.#treeBytes -= tree.canonical.length;
    }
    if (!HASH.test(hash)) return;
    const key = Buffer.from(hash, 'hex');
    for (const pack of this.#packs) {
      if (!pack.holds(hash, key)) continue;
      pack.dead.add(hash);
      this.#dying.add(pack);
    }
    this.#unsynced.delete(this.#path(hash));
    rmSync(this.#path(hash), { force: true });
  }

  /**
   * After `delete`s (garbage collection): each pack mostly dead, or read without its index (cut short
   * by a crash), is replaced by one new pack of what is still live in them, written aside, synced and
   * renamed in before they are removed (a crash in between leaves copies, never a loss); the other
   * packs with dead objects get their dead list written beside them, atomically.
   */
  compact(): void {
    if (this.#readOnly) return;
    const rewrite = this.#packs.filter((pack) => {
      if (!pack.whole) return true;
      if (pack.dead.size === 0) return false;
      const { live, dead } = pack.usage();
      return dead >= (live + dead) * PACK_REWRITE_DEAD_SHARE;
    });
    if (rewrite.length > 0) {
      const keep: StoredObject[] = [];
      const kept = new Set<string>();
      for (const pack of rewrite) {
        for (let at = 0; at < pack.count; at++) {
          const { hash, kind } = pack.entry(at);
          if (pack.dead.has(hash) || kept.has(hash)) continue;
          let stored = pack.readChecked(at);
          if (stored === null) {
            // This record is damaged: keep the object if some other copy reads whole, as canonical bytes.
            try {
              stored = this.get(kind, hash);
            } catch {
              continue;
            }
          }
          kept.add(hash);
          keep.push({ kind, hash, stored });
        }
      }
      if (keep.length > 0) {
        const pack = Pack.write(this.#packDir, keep, true, { aside: true });
        this.#packs.push(pack);
        this.#packNames.add(basename(pack.path));
      }
      fsyncDir(this.#packDir);
      for (const pack of rewrite) {
        pack.close();
        rmSync(pack.path, { force: true });
        rmSync(`${pack.path}${DEAD_SUFFIX}`, { force: true });
        this.#packNames.delete(basename(pack.path));
        this.#unsyncedPacks.delete(pack);
        this.#dying.delete(pack);
      }
      this.#packs = this.#packs.filter((pack) => !rewrite.includes(pack));
      fsyncDir(this.#packDir);
    }
    for (const pack of this.#dying) writeFileAtomic(`${pack.path}${DEAD_SUFFIX}`, [...pack.dead].map((hash) => `${hash}\n`).join(''));
    this.#dying.clear();
  }

  /** Closes the packs' files (a later read opens them again). */
  close(): void {
    for (const pack of this.#packs) pack.close();
  }
}

function missing(kind: ObjectKind, hash: string): CorruptObjectError {
  return new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is missing from the store`, hash);
}

function corrupted(kind: ObjectKind, hash: string): CorruptObjectError {
  return new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is corrupted (its content no longer matches its hash)`, hash);
}
