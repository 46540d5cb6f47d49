import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine } from '../src/index.js';
import { median } from './stats.js';

/**
 * The contrast for bench/shell.ts, run as a child process of it (its own process, since what it
 * measures lasts as long as the process): the engine's `fs.write` of 1 KB and a bare `await`, before
 * and after one just-bash `exec` run in the engine's own thread, as shell.run would if it had no worker
 * thread. just-bash runs each script in an AsyncLocalStorage context; on Node 20 the first one turns
 * on the process's promise hooks, and every await pays for them from then on.
 */
const WRITES = 20_000;

async function awaitNs(): Promise<number> {
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

const dir = mkdtempSync(join(tmpdir(), 'arium-bench-shell-control-'));
mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
const engine = await createEngine({ workspace: dir, project: 'bench', watch: false, persist: false });
const content = `${'x'.repeat(1023)}\n`;
async function writeMedianUs(): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < WRITES; i++) {
    const t0 = performance.now();
    const r = await engine.call('fs.write', { path: '/bench/w.txt', content });
    times.push(performance.now() - t0);
    if (!r.ok) throw new Error(`fs.write failed: ${r.error.message}`);
  }
  return Math.round(median(times) * 100_000) / 100;
}
try {
  await writeMedianUs();
  const before = await writeMedianUs();
  const awaitBefore = await awaitNs();
  const { Bash } = (await import('just-bash')) as unknown as { Bash: new () => { exec(script: string): Promise<{ stdout: string }> } };
  const r = await new Bash().exec('echo hi | grep h');
  if (r.stdout !== 'hi\n') throw new Error('just-bash answered something else');
  const after = await writeMedianUs();
  const awaitAfter = await awaitNs();
  process.stdout.write(
    JSON.stringify({
      fs_write_before_median_us: before,
      fs_write_after_in_process_exec_median_us: after,
      fs_write_after_over_before: Math.round((after / before) * 100) / 100,
      await_before_ns: awaitBefore,
      await_after_in_process_exec_ns: awaitAfter,
    }),
  );
} finally {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
}
