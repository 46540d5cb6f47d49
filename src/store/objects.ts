import { createHash } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fsyncDir } from './atomic.js';

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
  /** Objects and folders written since the last `sync`, which makes them durable together. */
  readonly #unsynced: string[] = [];
  readonly #dirtyDirs = new Set<string>();

  constructor(dir: string) {
    this.dir = dir;
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

  /** Stores `bytes` unless already present. Not durable until `sync()`: a checkpoint syncs once for all. */
  put(kind: ObjectKind, bytes: Uint8Array, knownHash?: string): string {
    const hash = knownHash ?? ObjectStore.hash(kind, bytes);
    const path = this.#path(hash);
    if (existsSync(path)) return hash;
    const dir = join(this.dir, hash.slice(0, 2));
    mkdirSync(dir, { recursive: true });
    const tmp = `${path}.tmp-${process.pid}`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      let off = 0;
      while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    } finally {
      closeSync(fd);
    }
    // Renamed into place only once whole: a crash leaves a stray .tmp file (removed by gc), never a
    // short object under a valid name. Until sync() its bytes may still be lost, which is why the live
    // tree's reference to it is written only after sync().
    renameSync(tmp, path);
    this.#unsynced.push(path);
    this.#dirtyDirs.add(dir);
    return hash;
  }

  /** Makes the names of objects written since the last call durable. */
  sync(): void {
    for (const path of this.#unsynced) {
      const fd = openSync(path, 'r');
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    this.#unsynced.length = 0;
    for (const dir of this.#dirtyDirs) fsyncDir(dir);
    if (this.#dirtyDirs.size > 0) fsyncDir(this.dir);
    this.#dirtyDirs.clear();
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
