import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine } from '../src/index.js';
import { median } from './stats.js';

/**
 * What a diff viewer (the inspector) asks of a snapshot → live diff of one 1,000-line file: its line
 * counts (`stat_only`), then that file's patch. Each round writes new contents, so the counts are
 * always computed; beside them, the patch of other new contents asked for alone (nothing to reuse).
 */
const ROUNDS = 15;

export async function benchDiffView(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-diff-'));
  mkdirSync(join(dir, 'p', 'tools'), { recursive: true });
  const e = await createEngine({ workspace: dir, project: 'p', watch: false, persist: false });
  try {
    const lines = (tag: string) => `${Array.from({ length: 1000 }, (_, i) => `${tag} line ${i}`).join('\n')}\n`;
    e.vfs.write('/long.txt', lines('old'));
    const from = e.snapshot({ label: 'old' }).id;
    const time = (fn: () => void) => {
      const t0 = performance.now();
      fn();
      return performance.now() - t0;
    };
    const counts: number[] = [];
    const patchAfter: number[] = [];
    const patchAlone: number[] = [];
    for (let round = 0; round < ROUNDS + 2; round++) {
      e.vfs.write('/long.txt', lines(`viewed ${round}`));
      const c = time(() => e.diff(from, 'live', { stat_only: true }));
      let patch = '';
      const p = time(() => {
        patch = e.diff(from, 'live', { file: '/long.txt' }).files[0]?.patch ?? '';
      });
      if (!patch.includes(`+viewed ${round} line 999`)) throw new Error('the patch is not of the file as written');
      e.vfs.write('/long.txt', lines(`alone ${round}`));
      const a = time(() => e.diff(from, 'live', { file: '/long.txt' }));
      // The first two rounds load the diff package and warm the JIT.
      if (round < 2) continue;
      counts.push(c);
      patchAfter.push(p);
      patchAlone.push(a);
    }
    const m = (xs: number[]) => Math.round(median(xs) * 100) / 100;
    return {
      rounds: ROUNDS,
      counts_ms: m(counts),
      patch_after_counts_ms: m(patchAfter),
      patch_alone_ms: m(patchAlone),
      viewer_total_ms: m(counts.map((c, i) => c + (patchAfter[i] as number))),
    };
  } finally {
    await e.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
