import type { Objects } from '../store/memory-objects.js';
import { encodeTree, type TreeEntry } from '../store/tree-format.js';
import { isWithin, parentOf } from './path.js';
import type { Vfs } from './vfs.js';

export { decodeTree, encodeTree, type TreeEntry } from '../store/tree-format.js';

/**
 * Caches the object hash of every file and folder of the live tree, and forgets exactly the entries a
 * change touches (the changed path and its ancestors). Writing the live tree to the object store then
 * costs work in proportion to what changed since the last time, not to the size of the tree: that is
 * what makes a snapshot after one change cheap on a tree of 10,000 files.
 */
export class TreeIndex {
  /** Path → [blob hash, size] of files whose content has not changed since it was hashed. */
  readonly #files = new Map<string, [hash: string, size: number]>();
  readonly #trees = new Map<string, string>();
  /** Folder → the hash it had before a change dropped it: the base its next version is stored against. */
  readonly #bases = new Map<string, string>();

  /**
   * Forgets `path` and the folders above it; with `subtree` (a folder deleted, moved away or replaced)
   * also everything below it. The folder's own hash may already be gone (a change inside it dropped it)
   * while hashes of files below it are still held: kept, they would be taken for the content of whatever
   * is moved to those paths later.
   */
  invalidate(path: string, subtree = false): void {
    this.#files.delete(path);
    if (this.#forget(path) || subtree) {
      for (const key of this.#files.keys()) if (isWithin(key, path)) this.#files.delete(key);
      for (const key of this.#trees.keys()) if (isWithin(key, path)) this.#trees.delete(key);
      for (const key of this.#bases.keys()) if (key !== path && isWithin(key, path)) this.#bases.delete(key);
    }
    for (let dir = parentOf(path); ; dir = parentOf(dir)) {
      this.#forget(dir);
      if (dir === '/') break;
    }
  }

  #forget(dir: string): boolean {
    const hash = this.#trees.get(dir);
    if (hash === undefined) return false;
    this.#trees.delete(dir);
    this.#bases.set(dir, hash);
    return true;
  }

  /** Records hashes known to be right (after loading a stored tree). */
  seed(path: string, kind: 'f' | 'd', hash: string, size = 0): void {
    if (kind === 'f') this.#files.set(path, [hash, size]);
    else this.#trees.set(path, hash);
  }

  clear(): void {
    this.#files.clear();
    this.#trees.clear();
    this.#bases.clear();
  }

  /** Writes what changed of the live tree to `store` and returns the root tree's hash. */
  write(vfs: Vfs, store: Objects): string {
    return this.#tree(vfs, store, '/');
  }

  #tree(vfs: Vfs, store: Objects, dir: string): string {
    const cached = this.#trees.get(dir);
    if (cached) return cached;
    const entries: TreeEntry[] = [];
    for (const e of vfs.entries(dir)) {
      const path = dir === '/' ? `/${e.name}` : `${dir}/${e.name}`;
      if (e.type === 'directory') {
        entries.push([e.name, 'd', this.#tree(vfs, store, path), 0]);
      } else {
        let file = this.#files.get(path);
        if (!file) {
          const data = vfs.peek(path);
          file = [store.put('blob', data), data.length];
          this.#files.set(path, file);
        }
        entries.push([e.name, 'f', file[0], file[1]]);
      }
    }
    const hash = store.put('tree', encodeTree(entries), this.#bases.get(dir));
    this.#bases.delete(dir);
    this.#trees.set(dir, hash);
    return hash;
  }
}
