import type { Objects } from '../memory-objects.js';
import { CorruptObjectError, type ObjectKind, ObjectStore, owned, type StoredObject } from '../objects.js';
import type { NatsBridge } from './bridge.js';

/** Bytes of objects read back kept in memory: the trees and files a load or a diff reads again. */
const READ_CACHE_BYTES = 64 * 1024 * 1024;

/**
 * Content-addressed objects in a JetStream object store (`arium-objects-<name>`), named by their hash as
 * on disk, so an object is stored once whatever the number of snapshots holding it. As on disk, a new
 * object stays in memory (pending) until `sync` sends it, or until a journal record carries it
 * (`journaled`); trees are stored whole. Which names exist is listed once, then kept here: only the
 * holder writes.
 */
export class JetStreamObjects implements Objects {
  readonly #bridge: NatsBridge;
  readonly #timeoutMs: number;
  readonly #pending = new Map<string, StoredObject>();
  readonly #journaled = new Set<string>();
  #stored: Map<string, number> | null = null;
  readonly #cache = new Map<string, Buffer>();
  #cacheBytes = 0;

  constructor(bridge: NatsBridge, timeoutMs: number) {
    this.#bridge = bridge;
    this.#timeoutMs = timeoutMs;
  }

  #names(): Map<string, number> {
    if (this.#stored === null) {
      const { names } = this.#bridge.call<{ names: [string, number][] }>('objList', {}, this.#timeoutMs);
      this.#stored = new Map(names);
    }
    return this.#stored;
  }

  has(hash: string): boolean {
    return this.#pending.has(hash) || this.#names().has(hash);
  }

  put(kind: ObjectKind, bytes: Uint8Array, _base?: string): string {
    const hash = ObjectStore.hash(kind, bytes);
    if (!this.has(hash)) this.#pending.set(hash, { kind, hash, stored: owned(bytes) });
    return hash;
  }

  get(kind: ObjectKind, hash: string): Buffer {
    const near = this.#pending.get(hash)?.stored ?? this.#cache.get(hash);
    if (near) return near;
    const { data } = this.#bridge.call<{ data: Uint8Array | null }>('objGet', { name: hash }, this.#timeoutMs);
    if (data === null) throw new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is missing from the store`, hash);
    const bytes = owned(data);
    if (ObjectStore.hash(kind, bytes) !== hash) {
      throw new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is corrupted (its content no longer matches its hash)`, hash);
    }
    this.#remember(hash, bytes);
    return bytes;
  }

  #remember(hash: string, bytes: Buffer): void {
    if (bytes.length > READ_CACHE_BYTES / 4) return;
    this.#cache.set(hash, bytes);
    this.#cacheBytes += bytes.length;
    for (const [key, old] of this.#cache) {
      if (this.#cacheBytes <= READ_CACHE_BYTES) break;
      this.#cache.delete(key);
      this.#cacheBytes -= old.length;
    }
  }

  pending(): StoredObject[] {
    return [...this.#pending.values()].filter((object) => !this.#journaled.has(object.hash));
  }

  journaled(objects: readonly StoredObject[]): void {
    for (const object of objects) if (this.#pending.has(object.hash)) this.#journaled.add(object.hash);
  }

  restore(object: StoredObject): void {
    if (this.#names().has(object.hash) || this.#pending.has(object.hash)) return;
    this.#pending.set(object.hash, object);
    this.#journaled.add(object.hash);
  }

  /** Sends every pending object and returns once JetStream has acknowledged them all. */
  sync(): void {
    if (this.#pending.size === 0) return;
    const objects = [...this.#pending.values()];
    this.#bridge.call('objPut', { objects: objects.map((o) => ({ name: o.hash, data: o.stored })) }, this.#timeoutMs);
    const names = this.#names();
    for (const object of objects) names.set(object.hash, object.stored.length);
    this.#pending.clear();
    this.#journaled.clear();
  }

  baseOf(_hash: string): string | null {
    return null;
  }

  *list(): Generator<string> {
    yield* [...this.#pending.keys(), ...[...this.#names().keys()].filter((hash) => !this.#pending.has(hash))];
  }

  size(hash: string): number {
    return this.#pending.get(hash)?.stored.length ?? this.#names().get(hash) ?? 0;
  }

  delete(hash: string): void {
    this.#pending.delete(hash);
    this.#journaled.delete(hash);
    const cached = this.#cache.get(hash);
    if (cached) {
      this.#cache.delete(hash);
      this.#cacheBytes -= cached.length;
    }
    if (!this.#names().has(hash)) return;
    this.#bridge.call('objDelete', { names: [hash] }, this.#timeoutMs);
    this.#names().delete(hash);
  }

  compact(): void {}
}
