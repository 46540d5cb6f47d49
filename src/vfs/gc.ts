import type { Objects } from '../store/memory-objects.js';
import { decodeTree } from './tree-index.js';

export interface GcReport {
  kept: number;
  removed: number;
  removed_bytes: number;
}

/**
 * Removes every object no root can reach. Marking walks each root's trees once (a subtree shared by
 * many snapshots is read once); an object is deleted only when unmarked, so a blob some snapshot still
 * needs is never collected, nor the base of a tree stored as a delta. `onProgress` hears about every 1,000 objects, for long runs on big stores.
 */
export function collectGarbage(objects: Objects, roots: Iterable<string>, onProgress?: (phase: 'mark' | 'sweep', count: number) => void): GcReport {
  const live = new Set<string>();
  /** Trees whose entries were marked (a tree kept only as a base is in `live` but not here). */
  const walked = new Set<string>();
  /** Bases whose own chain was followed. */
  const chained = new Set<string>();
  const mark = (tree: string): void => {
    if (walked.has(tree)) return;
    walked.add(tree);
    live.add(tree);
    if (live.size % 1000 === 0) onProgress?.('mark', live.size);
    // A tree stored as a delta needs its base (and the base's base…) to be read; not their files.
    for (let t: string | null = tree; t !== null && !chained.has(t); t = objects.baseOf(t)) {
      chained.add(t);
      live.add(t);
    }
    for (const [, kind, hash] of decodeTree(objects.get('tree', tree))) {
      if (kind === 'd') mark(hash);
      else live.add(hash);
    }
  };
  for (const root of roots) mark(root);
  let removed = 0;
  let removedBytes = 0;
  let seen = 0;
  for (const hash of objects.list()) {
    if (++seen % 1000 === 0) onProgress?.('sweep', seen);
    if (live.has(hash)) continue;
    removedBytes += objects.size(hash);
    objects.delete(hash);
    removed++;
  }
  // Objects deleted from a pack leave it when it is rewritten (see ObjectStore.compact).
  objects.compact();
  return { kept: live.size, removed, removed_bytes: removedBytes };
}
