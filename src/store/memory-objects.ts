import { CorruptObjectError, type ObjectKind, ObjectStore, owned, type StoredObject } from './objects.js';

/** The object store of an engine that keeps no state on disk: same contract, held in a Map (trees whole). */
export class MemoryObjectStore {
  readonly #objects = new Map<string, Buffer>();

  has(hash: string): boolean {
    return this.#objects.has(hash);
  }

  put(kind: ObjectKind, bytes: Uint8Array, _base?: string): string {
    const hash = ObjectStore.hash(kind, bytes);
    // Taken, not copied (see ObjectStore.put).
    if (!this.#objects.has(hash)) this.#objects.set(hash, owned(bytes));
    return hash;
  }

  get(kind: ObjectKind, hash: string): Buffer {
    const bytes = this.#objects.get(hash);
    if (!bytes) throw new CorruptObjectError(`The ${kind} object ${hash.slice(0, 12)} is missing from the store`, hash);
    return bytes;
  }

  pending(): StoredObject[] {
    return [];
  }

  journaled(_objects: readonly StoredObject[]): void {}

  restore(object: StoredObject): void {
    this.#objects.set(object.hash, object.stored);
  }

  sync(): void {}

  baseOf(_hash: string): string | null {
    return null;
  }

  *list(): Generator<string> {
    yield* [...this.#objects.keys()];
  }

  size(hash: string): number {
    return this.#objects.get(hash)?.length ?? 0;
  }

  delete(hash: string): void {
    this.#objects.delete(hash);
  }

  compact(): void {}
}

/** What the state layer needs of an object store, on disk or in memory. */
export type Objects = Pick<
  ObjectStore,
  'has' | 'get' | 'put' | 'pending' | 'journaled' | 'restore' | 'sync' | 'baseOf' | 'list' | 'delete' | 'size' | 'compact'
>;
