import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine } from '../src/index.js';
import { awaitNs, fsWriteMedianUs } from './measure.js';

/**
 * The contrast for bench/shell.ts, run as a child process of it (its own process, since what it
 * measures lasts as long as the process): the engine's `fs.write` of 1 KB and a bare `await`, before
 * and after one just-bash `exec` run in the engine's own thread, as shell.run would if it had no worker
 * thread. just-bash runs each script in an AsyncLocalStorage context; on Node 20 the first one turns
 * on the process's promise hooks, and every await pays for them from then on.
 */
const WRITES = 20_000;

const dir = mkdtempSync(join(tmpdir(), 'arium-bench-shell-control-'));
mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
const engine = await createEngine({ workspace: dir, project: 'bench', watch: false, persist: false });
try {
  await fsWriteMedianUs(engine, WRITES);
  const before = await fsWriteMedianUs(engine, WRITES);
  const awaitBefore = await awaitNs();
  const { Bash } = (await import('just-bash')) as unknown as { Bash: new () => { exec(script: string): Promise<{ stdout: string }> } };
  const r = await new Bash().exec('echo hi | grep h');
  if (r.stdout !== 'hi\n') throw new Error('just-bash answered something else');
  const after = await fsWriteMedianUs(engine, WRITES);
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
