import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Volume } from 'memfs';
import { createEngine, type Engine } from '../src/index.js';
import { MEMFS_PROCESS } from '../src/vfs/vfs.js';
import { median, percentile } from './stats.js';

/**
 * `fs.write` of 1 KB through `engine.call`, beside its floor and a peer, interleaved in one run: rounds
 * of each in turn, so that a busy moment of the machine falls on all of them alike.
 *
 * - floor: memfs's own `writeFileSync` of the same bytes to the same path (the VFS is memfs), on a
 *   volume given the process ids once, as the VFS does (`memfs_write_us`), and on memfs's default
 *   volume, which asks the system for them at every step of every path (`memfs_default_write_us`);
 * - peer: just-bash's in-memory file system, `await fs.writeFile` (its async file API, as `engine.call`
 *   is async);
 * - `engine.call('fs.write')` in memory, as an agent calls it (no diff asked for), and with
 *   `diff: true` (when the tool has that option: older builds always returned the diff);
 * - the same call on a durable engine (one journal fdatasync per call).
 *
 * Every answer is checked; each round rewrites the same file, as an agent editing one file does.
 */
const ROUNDS = 15;
const PER_ROUND = 2000;
const DURABLE_PER_ROUND = 100;

interface JustBashFs {
  writeFile(path: string, content: string): Promise<void>;
  readFile(path: string): Promise<string>;
}

async function project(persist: boolean, changeLog = false): Promise<{ engine: Engine; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-write-'));
  mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
  return { engine: await createEngine({ workspace: dir, project: 'bench', watch: false, persist, changeLog }), dir };
}

async function timedCalls(engine: Engine, input: Record<string, unknown>, count: number, into: number[]): Promise<void> {
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const r = await engine.call('fs.write', input);
    into.push(performance.now() - t0);
    if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
  }
}

export async function benchWrite(): Promise<Record<string, unknown>> {
  const content = `${'x'.repeat(1023)}\n`;
  const path = '/data/w.txt';
  const vol = Volume.fromJSON({}, '/', { process: MEMFS_PROCESS });
  vol.mkdirSync('/data');
  const defaultVol = new Volume();
  defaultVol.mkdirSync('/data');
  const { InMemoryFs } = (await import('just-bash')) as unknown as { InMemoryFs: new () => JustBashFs };
  const bash = new InMemoryFs();
  const memory = await project(false);
  const durable = await project(true);
  // As `arium serve` runs it: each commit copies what the call replaced and wrote, for the inspector.
  const logged = await project(false, true);
  try {
    const tool = memory.engine.tools().find((t) => t.id === 'fs.write');
    const canAskDiff = Boolean((tool?.schema as { properties?: Record<string, unknown> } | undefined)?.properties?.diff);
    const plain = { path, content };
    const withDiff = canAskDiff ? { path, content, diff: true } : plain;

    // Warm-up: JIT and caches of every path measured.
    for (let i = 0; i < 20_000; i++) vol.writeFileSync(path, content);
    for (let i = 0; i < 5_000; i++) defaultVol.writeFileSync(path, content);
    for (let i = 0; i < 20_000; i++) await bash.writeFile(path, content);
    await timedCalls(memory.engine, plain, 20_000, []);
    await timedCalls(memory.engine, withDiff, 5_000, []);
    await timedCalls(durable.engine, plain, 200, []);
    await timedCalls(logged.engine, plain, 20_000, []);

    const memfsPerOp: number[] = [];
    const memfsDefaultPerOp: number[] = [];
    const bashPerOp: number[] = [];
    const calls: number[] = [];
    const diffCalls: number[] = [];
    const durableCalls: number[] = [];
    const loggedCalls: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      let t0 = performance.now();
      for (let i = 0; i < PER_ROUND; i++) vol.writeFileSync(path, content);
      memfsPerOp.push((performance.now() - t0) / PER_ROUND);
      t0 = performance.now();
      for (let i = 0; i < PER_ROUND; i++) defaultVol.writeFileSync(path, content);
      memfsDefaultPerOp.push((performance.now() - t0) / PER_ROUND);
      t0 = performance.now();
      for (let i = 0; i < PER_ROUND; i++) await bash.writeFile(path, content);
      bashPerOp.push((performance.now() - t0) / PER_ROUND);
      await timedCalls(memory.engine, plain, PER_ROUND, calls);
      await timedCalls(memory.engine, withDiff, PER_ROUND, diffCalls);
      await timedCalls(durable.engine, plain, DURABLE_PER_ROUND, durableCalls);
      await timedCalls(logged.engine, plain, PER_ROUND, loggedCalls);
    }
    if ((vol.readFileSync(path, 'utf8') as string) !== content) throw new Error('memfs wrote something else');
    if ((await bash.readFile(path)) !== content) throw new Error('just-bash wrote something else');
    if (memory.engine.vfs.read(path).toString() !== content || durable.engine.vfs.read(path).toString() !== content) {
      throw new Error('the engine wrote something else');
    }

    const us = (ms: number) => Math.round(ms * 100_000) / 100;
    const memfsUs = us(median(memfsPerOp));
    const callUs = us(median(calls));
    return {
      rounds: ROUNDS,
      memfs_write_us: memfsUs,
      memfs_default_write_us: us(median(memfsDefaultPerOp)),
      just_bash_write_us: us(median(bashPerOp)),
      fs_write_call_median_us: callUs,
      fs_write_call_p90_us: us(percentile(calls, 0.9)),
      fs_write_call_ratio_to_memfs: Math.round((callUs / memfsUs) * 100) / 100,
      fs_write_call_ratio_to_just_bash: Math.round((callUs / us(median(bashPerOp))) * 100) / 100,
      fs_write_with_diff_median_us: us(median(diffCalls)),
      diff_asked: canAskDiff,
      fs_write_durable_median_us: us(median(durableCalls)),
      fs_write_with_change_log_median_us: us(median(loggedCalls)),
      fs_write_with_change_log_ratio_to_call: Math.round((us(median(loggedCalls)) / callUs) * 100) / 100,
    };
  } finally {
    for (const { engine, dir } of [memory, durable, logged]) {
      await engine.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
