import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine, type Engine } from '../src/index.js';
import { VfsState } from '../src/vfs/state.js';
import { median } from './stats.js';

/**
 * What serializable calls cost when calls collide: 32 calls at once, each reading `/log.txt`, working
 * 2 ms and writing it back with one more line (every call but one loses the race and runs again),
 * against 32 calls at once doing the same on 32 different files (no races), for JS and Python tools.
 * Batches are timed whole; the figures are medians over batches.
 */
const APPENDER_JS = `export default async function run(input, ctx) {
  const prev = (await ctx.vfs.exists(input.path)) ? await ctx.vfs.read(input.path) : '';
  const until = Date.now() + 2;
  while (Date.now() < until) {}
  await ctx.vfs.write(input.path, prev + 'one more line\\n');
  return null;
}
`;
const APPENDER_PY = `import time

def run(input, ctx):
    p = input["path"]
    prev = ctx.vfs.read(p) if ctx.vfs.exists(p) else ""
    end = time.monotonic() + 0.002
    while time.monotonic() < end:
        pass
    ctx.vfs.write(p, prev + "one more line\\n")
`;

export async function benchContention(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-'));
  const tools = join(dir, 'bench', 'tools');
  mkdirSync(tools, { recursive: true });
  const define = (id: string, runner: string, entry: string, exec: string) =>
    writeFileSync(
      join(tools, `${id}.json`),
      JSON.stringify({ id, description: id, runner, entry, schema: { type: 'object' }, permissions: [exec, 'vfs.read', 'vfs.write'] }),
    );
  writeFileSync(join(tools, 'appender.js'), APPENDER_JS);
  writeFileSync(join(tools, 'appender.py'), APPENDER_PY);
  define('js.appender', 'js-runner', 'appender.js', 'exec.js');
  define('py.appender', 'py-runner', 'appender.py', 'exec.py');
  // ARIUM_BENCH_MAX_ATTEMPTS compares settings of max_attempts (BENCHMARKS.md); unset, the default.
  const attempts = Number(process.env.ARIUM_BENCH_MAX_ATTEMPTS);
  const policy = Number.isInteger(attempts) && attempts > 0 ? { max_attempts: attempts } : {};
  const engine = await createEngine({ workspace: dir, project: 'bench', watch: false, persist: false, policy });
  try {
    const out: Record<string, unknown> = { commit_us_with_open_transactions: commitsBesideOpen(VfsState) };
    for (const [name, tool] of [
      ['js', 'js.appender'],
      ['python', 'py.appender'],
    ] as const) {
      for (let i = 0; i < 3; i++) await batch(engine, tool, () => '/warm.txt'); // start sandboxes, warm caches
      const apart = await batches(engine, tool, (i) => `/apart/${i}.txt`);
      const together = await batches(engine, tool, () => '/log.txt');
      out[`${name}_32_apart_batch_ms`] = apart.ms;
      out[`${name}_32_one_file_batch_ms`] = together.ms;
      out[`${name}_one_file_to_apart_ratio`] = Math.round((together.ms / apart.ms) * 100) / 100;
      out[`${name}_one_file_runs_per_call`] = together.runs;
    }
    return out;
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * What one commit costs (µs, median of 5 runs of 20,000) while N other transactions are open, as calls
 * in flight hold them: each commit keeps the pre-images those transactions may read. In memory, one
 * 3-byte write to one of 100 files a commit. `State` is a parameter so that another build's state can
 * be measured by the same loop (BENCHMARKS.md).
 */
export function commitsBesideOpen(State: typeof VfsState): Record<string, number> {
  const out: Record<string, number> = {};
  for (const open of [0, 32, 1024, 4096]) {
    const state = new State({ dir: null });
    const held = Array.from({ length: open }, () => state.begin());
    const times: number[] = [];
    for (let run = 0; run < 5; run++) {
      const t0 = performance.now();
      for (let i = 0; i < 20_000; i++) {
        const txn = state.begin();
        txn.write(`/w/${i % 100}.txt`, `v${i % 10}`);
        state.commit(txn);
      }
      times.push(((performance.now() - t0) * 1000) / 20_000);
    }
    for (const txn of held) state.end(txn);
    out[`open_${open}`] = Math.round(median(times) * 10) / 10;
  }
  return out;
}

async function batches(engine: Engine, tool: string, path: (i: number) => string): Promise<{ ms: number; runs: number }> {
  const times: number[] = [];
  let runs = 0;
  for (let b = 0; b < 10; b++) {
    const result = await batch(engine, tool, path);
    times.push(result.ms);
    runs += result.runs;
  }
  return { ms: Math.round(median(times) * 10) / 10, runs: Math.round((runs / (10 * 32)) * 100) / 100 };
}

async function batch(engine: Engine, tool: string, path: (i: number) => string): Promise<{ ms: number; runs: number }> {
  let runs = 0;
  const count = (event: { attempts: number }) => {
    runs += event.attempts;
  };
  engine.events.on('result', count);
  const paths = new Set(Array.from({ length: 32 }, (_, i) => path(i)));
  const before = [...paths].reduce((n, p) => n + (engine.vfs.exists(p) ? engine.vfs.read(p).toString().split('\n').length - 1 : 0), 0);
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: 32 }, (_, i) => engine.call(tool, { path: path(i) })));
  const ms = performance.now() - t0;
  engine.events.off('result', count);
  const failed = results.find((r) => !r.ok);
  if (failed && !failed.ok) throw new Error(`bench call failed: ${failed.error.message}`);
  // The answer is checked: every call's line is there (32 more in one file, or one in each of 32).
  const lines = [...paths].reduce((n, p) => n + engine.vfs.read(p).toString().split('\n').length - 1, 0);
  if (lines !== before + 32) throw new Error(`bench lost updates: ${lines - before} of 32 lines landed`);
  return { ms, runs };
}
