import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fsyncDir, writeSynced } from './atomic.js';

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

const HASH = /^[0-9a-f]{64}$/;

/**
 * Content-addressed objects on disk, named by the SHA-256 of their kind and bytes (git's scheme: the
 * kind prefix keeps a blob that happens to look like a tree from sharing its name). An object is
 * written once, whatever the number of snapshots holding it, and verified against its name when read.
 */
export class ObjectStore {
  readonly dir: string;
  /** Folders that got new names since the last `sync`, which makes those names durable together. */
  readonly #dirtyDirs = new Set<string>();
  /** Whether a prefix folder was created since the last `sync` (then the store folder needs syncing too). */
  #newPrefix = false;
  /** Whether the store folder itself was created by this engine (then its parent needs syncing once). */
  #newStore: boolean;

  constructor(dir: string) {
    this.dir = dir;
    // A new store's own name becomes durable with the first sync (its parent folder is synced then).
    this.#newStore = !existsSync(dir);
    mkdirSync(dir, { recursive: true });
  }

  static hash(kind: ObjectKind, bytes: Uint8Array): string {
    return createHash('sha256').update(kind).update('\u0000').update(bytes).digest('hex');
  }

  #path(hash: string): string {
    return join(this.dir, hash.slice(0, 2), hash.slice(2));
  }

  has(hash: string): boolean {
    return HASH.test(hash) && existsSync(this.#path(hash));
  }

  /** Stores `bytes` unless already present. Its name is not durable until `sync()`: a checkpoint syncs the folders once for all. */
  put(kind: ObjectKind, bytes: Uint8Array, knownHash?: string): string {
    const hash = knownHash ?? ObjectStore.hash(kind, bytes);
    const path = this.#path(hash);
    if (existsSync(path)) return hash;
    const dir = join(this.dir, hash.slice(0, 2));
    if (!existsSync(dir)) {
      mkdirSync(dir, { recursive: true });
      this.#newPrefix = true;
    }
    const tmp = `${path}.tmp-${process.pid}`;
    // Synced before it takes its name: after a power loss an object under a valid name is whole. (Were
    // it renamed first, a crash could leave an empty file under the name, and since a later put of the
    // same content finds the name taken, every later snapshot would refer to the damaged object.)
    writeSynced(tmp, bytes);
    // A crash before the rename leaves a stray .tmp file (removed by gc), never a short object.
    renameSync(tmp, path);
    this.#dirtyDirs.add(dir);
    return hash;
  }

  /** Makes the names of objects written since the last call durable. */
  sync(): void {
    for (const dir of this.#dirtyDirs) fsyncDir(dir);
    this.#dirtyDirs.clear();
    if (this.#newPrefix) fsyncDir(this.dir);
    this.#newPrefix = false;
    if (this.#newStore) fsyncDir(dirname(this.dir));
    this.#newStore = false;
  }

  get(kind: ObjectKind, hash: string): Buffer {
    if (!HASH.test(hash)) throw new CorruptObjectError(`Malformed object name "${hash}"`, hash);
    let bytes: Buffer;
    try {
      bytes = readFileSync(this.#path(hash));
    } catch {
      throw new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is missing from the store`, hash);
    }
    if (ObjectStore.hash(kind, bytes) !== hash) {
      throw new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is corrupted (its content no longer matches its hash)`, hash);
    }
    return bytes;
  }

  /** Every stored object name (for garbage collection). */
  *list(): Generator<string> {
    for (const prefix of readdirSync(this.dir)) {
      if (!/^[0-9a-f]{2}$/.test(prefix)) continue;
      for (const rest of readdirSync(join(this.dir, prefix))) {
        if (/^[0-9a-f]{62}$/.test(rest)) yield prefix + rest;
        else if (rest.includes('.tmp-')) rmSync(join(this.dir, prefix, rest), { force: true });
      }
    }
  }

  /** Stored size of an object in bytes (0 when absent). */
  size(hash: string): number {
    try {
      return HASH.test(hash) ? statSync(this.#path(hash)).size : 0;
    } catch {
      return 0;
    }
  }

  delete(hash: string): void {
    if (HASH.test(hash)) rmSync(this.#path(hash), { force: true });
  }
}
