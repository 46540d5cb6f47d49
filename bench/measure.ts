import { execFileSync } from 'node:child_process';
import type { Engine } from '../src/index.js';
import { median } from './stats.js';

/** Measurements more than one benchmark takes. Times are in milliseconds unless the name says otherwise. */

/** A bare `await`, in ns: what promise hooks, once on, make every await of the process pay. */
export async function awaitNs(): Promise<number> {
  // The median of batches: a collection of the garbage an earlier measure left falls in one batch only.
  const n = 200_000;
  const batches: number[] = [];
  for (let b = 0; b < 11; b++) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await null;
    batches.push(((performance.now() - t0) * 1e6) / n);
  }
  return Math.round(median(batches));
}

/** The median of `count` in-memory `fs.write` calls of 1 KB, in µs (two decimals); every answer checked. */
export async function fsWriteMedianUs(engine: Engine, count: number): Promise<number> {
  const content = `${'x'.repeat(1023)}\n`;
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const r = await engine.call('fs.write', { path: '/bench/w.txt', content });
    times.push(performance.now() - t0);
    if (!r.ok) throw new Error(`fs.write failed: ${r.error.message}`);
  }
  return Math.round(median(times) * 100_000) / 100;
}

/** `n` spawns of a program with an empty environment, each timed from spawn to exit. */
export function spawnTimes(command: string, args: string[], n: number): number[] {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    execFileSync(command, args, { env: {}, stdio: ['ignore', 'pipe', 'pipe'] });
    times.push(performance.now() - t0);
  }
  return times;
}
