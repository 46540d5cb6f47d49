import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createEngine } from '../src/index.js';
import { awaitNs, fsWriteMedianUs } from './measure.js';
import { median, percentile } from './stats.js';

const run = promisify(execFile);

/**
 * `shell.run` (just-bash in a child process, its file system served by the engine thread) against the
 * host's own tools, in one run:
 *
 * - `grep -r PATTERN /` over 1,000 files of ~2 KB (one in ten matching) through `shell.run`, beside
 *   `/usr/bin/grep -r PATTERN <dir>` spawned by node:child_process over the same files on disk, in
 *   alternating rounds; both answers are checked;
 * - the smallest shell call (`echo hi`), the floor of a call;
 * - the engine's `fs.write` of 1 KB, median, before and after those 50+ shell calls in the same
 *   process: the proof that a shell call leaves the engine thread as fast as it was. For contrast, a
 *   child process (bench/shell-control.ts) runs the same `fs.write` measure before and after one
 *   just-bash `exec` in its own thread, which is what running the shell apart avoids.
 */
const FILES = 1000;
const DIRS = 20;
const ROUNDS = 50;
const WRITES = 20_000;
const PATTERN = 'NEEDLE_42';

function fileText(i: number): string {
  const lines: string[] = [];
  for (let n = 0; lines.join('\n').length < 2000; n++) {
    lines.push(`line ${n} of file ${i}: lorem ipsum dolor sit amet, consectetur adipiscing elit ${i * 31 + n}`);
  }
  if (i % 10 === 0) lines.splice(5, 0, `here is the ${PATTERN} in file ${i}`);
  return `${lines.join('\n')}\n`;
}

export async function benchShell(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-shell-'));
  mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
  const disk = join(dir, 'files');
  const engine = await createEngine({ workspace: dir, project: 'bench', watch: false, persist: false });
  try {
    let bytes = 0;
    for (let i = 0; i < FILES; i++) {
      const rel = `/src/d${String(i % DIRS).padStart(2, '0')}/f${String(i).padStart(4, '0')}.txt`;
      const text = fileText(i);
      bytes += text.length;
      engine.vfs.write(rel, text);
      mkdirSync(join(disk, 'src', `d${String(i % DIRS).padStart(2, '0')}`), { recursive: true });
      writeFileSync(join(disk, rel), text);
    }
    const expected = FILES / 10;
    const shellGrep = async (): Promise<number> => {
      const t0 = performance.now();
      const r = await engine.call('shell.run', { script: `grep -r ${PATTERN} /` });
      const ms = performance.now() - t0;
      if (!r.ok) throw new Error(`shell.run failed: ${r.error.message}`);
      const out = r.data as { stdout: string; exit_code: number };
      const lines = out.stdout.split('\n').filter(Boolean).length;
      if (lines !== expected) throw new Error(`shell.run grep found ${lines} lines, not ${expected}`);
      return ms;
    };
    const hostGrep = async (): Promise<number> => {
      const t0 = performance.now();
      const { stdout } = await run('/usr/bin/grep', ['-r', PATTERN, disk], { maxBuffer: 64 * 1024 * 1024 });
      const ms = performance.now() - t0;
      const lines = stdout.split('\n').filter(Boolean).length;
      if (lines !== expected) throw new Error(`/usr/bin/grep found ${lines} lines, not ${expected}`);
      return ms;
    };

    // Warm-up of the engine's write path, then its figure before any shell call.
    await fsWriteMedianUs(engine, WRITES);
    const writeBefore = await fsWriteMedianUs(engine, WRITES);
    const awaitBefore = await awaitNs();

    // The first shell call starts the shell's process and loads just-bash in it.
    const t0 = performance.now();
    const first = await engine.call('shell.run', { script: 'echo hi' });
    const firstCallMs = performance.now() - t0;
    if (!first.ok) throw new Error(`shell.run failed: ${first.error.message}`);
    for (let i = 0; i < 3; i++) {
      await shellGrep();
      await hostGrep();
    }

    const shellTimes: number[] = [];
    const hostTimes: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      shellTimes.push(await shellGrep());
      hostTimes.push(await hostGrep());
    }
    const echoTimes: number[] = [];
    for (let i = 0; i < 50; i++) {
      const s0 = performance.now();
      const r = await engine.call('shell.run', { script: 'echo hi' });
      echoTimes.push(performance.now() - s0);
      if (!r.ok || (r.data as { stdout: string }).stdout !== 'hi\n') throw new Error('shell.run echo failed');
    }

    const writeAfter = await fsWriteMedianUs(engine, WRITES);
    const awaitAfter = await awaitNs();
    const control = await inProcessControl();
    const ms = (v: number) => Math.round(v * 100) / 100;
    const shellMedian = median(shellTimes);
    const hostMedian = median(hostTimes);
    return {
      files: FILES,
      bytes,
      matching_lines: expected,
      rounds: ROUNDS,
      shell_first_call_ms: ms(firstCallMs),
      shell_echo_median_ms: ms(median(echoTimes)),
      shell_grep_median_ms: ms(shellMedian),
      shell_grep_p90_ms: ms(percentile(shellTimes, 0.9)),
      host_grep_spawn_median_ms: ms(hostMedian),
      host_grep_spawn_p90_ms: ms(percentile(hostTimes, 0.9)),
      shell_grep_ratio_to_host: Math.round((shellMedian / hostMedian) * 100) / 100,
      shell_calls_between_write_figures: ROUNDS + 3 + 1 + 50,
      fs_write_before_shell_median_us: writeBefore,
      fs_write_after_shell_median_us: writeAfter,
      fs_write_after_over_before: Math.round((writeAfter / writeBefore) * 100) / 100,
      await_before_shell_ns: awaitBefore,
      await_after_shell_ns: awaitAfter,
      in_process_control: control,
    };
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The same fs.write figure in a child process, before and after one just-bash exec in that process's own thread. */
async function inProcessControl(): Promise<Record<string, unknown>> {
  const script = fileURLToPath(new URL('./shell-control.js', import.meta.url));
  const { stdout } = await run(process.execPath, [script], { maxBuffer: 1024 * 1024 });
  return JSON.parse(stdout) as Record<string, unknown>;
}
