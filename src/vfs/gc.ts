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
 * needs is never collected. `onProgress` hears about every 1,000 objects, for long runs on big stores.
 */
export function collectGarbage(objects: Objects, roots: Iterable<string>, onProgress?: (phase: 'mark' | 'sweep', count: number) => void): GcReport {
  const live = new Set<string>();
  const mark = (tree: string): void => {
    if (live.has(tree)) return;
    live.add(tree);
    if (live.size % 1000 === 0) onProgress?.('mark', live.size);
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
  return { kept: live.size, removed, removed_bytes: removedBytes };
}
