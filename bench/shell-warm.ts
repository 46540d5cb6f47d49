import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine, type Engine } from '../src/index.js';
import { median, percentile } from './stats.js';

/**
 * A warm `shell.run` call: `echo hi` (the floor of a call) and `grep -r` over 200 files of ~2 KB (one
 * file-system request per folder and per file, each a message between the engine and the shell), with
 * the shell process already started. When ARIUM_BENCH_SHELL_BASE names another build's
 * `dist/src/index.js` (one whose shell runs in a worker thread), the same calls run on an engine of that
 * build too, in the same process and in alternating rounds, so that the machine's load weighs on both.
 * Also: the first call of each engine (its shell starts and loads just-bash) and the memory of the
 * shell processes this one started.
 */
const FILES = 200;
const DIRS = 10;
const ROUNDS = 40;
const PATTERN = 'NEEDLE_42';

type CreateEngine = typeof createEngine;

function fileText(i: number): string {
  const lines: string[] = [];
  for (let n = 0; lines.join('\n').length < 2000; n++) lines.push(`line ${n} of file ${i}: lorem ipsum dolor sit amet ${i * 31 + n}`);
  if (i % 10 === 0) lines.splice(5, 0, `here is the ${PATTERN} in file ${i}`);
  return `${lines.join('\n')}\n`;
}

async function openBenchEngine(create: CreateEngine, dir: string): Promise<Engine> {
  mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
  const engine = await create({ workspace: dir, project: 'bench', watch: false, persist: false });
  for (let i = 0; i < FILES; i++) engine.vfs.write(`/src/d${i % DIRS}/f${String(i).padStart(4, '0')}.txt`, fileText(i));
  return engine;
}

async function timed(engine: Engine, script: string, expect: (stdout: string) => boolean): Promise<number> {
  const t0 = performance.now();
  const r = await engine.call('shell.run', { script });
  const ms = performance.now() - t0;
  if (!r.ok) throw new Error(`shell.run failed: ${r.error.message}`);
  if (!expect((r.data as { stdout: string }).stdout)) throw new Error(`shell.run of ${script} answered something else`);
  return ms;
}

/** Resident memory (MB) of each child process of this one: the shell processes. */
function childrenRssMb(): number[] {
  const out: number[] = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      if (Number(/^PPid:\s+(\d+)/m.exec(status)?.[1]) !== process.pid) continue;
      out.push(Math.round(Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1]) / 1024));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

export async function benchShellWarm(): Promise<Record<string, unknown>> {
  const basePath = process.env.ARIUM_BENCH_SHELL_BASE;
  const dirs: string[] = [];
  const engines: Array<[string, Engine]> = [];
  try {
    const builds: Array<[string, CreateEngine]> = [['this', createEngine]];
    if (basePath) builds.push(['base', ((await import(basePath)) as { createEngine: CreateEngine }).createEngine]);
    const first: Record<string, number> = {};
    for (const [name, create] of builds) {
      const dir = mkdtempSync(join(tmpdir(), `arium-bench-shell-warm-${name}-`));
      dirs.push(dir);
      const engine = await openBenchEngine(create, dir);
      engines.push([name, engine]);
      first[name] = await timed(engine, 'echo hi', (out) => out === 'hi\n');
    }
    const rss = childrenRssMb();
    const grep = `grep -r ${PATTERN} /src`;
    const grepOk = (out: string) => out.split('\n').filter(Boolean).length === FILES / 10;
    for (const [, engine] of engines) {
      for (let i = 0; i < 5; i++) {
        await timed(engine, 'echo hi', (out) => out === 'hi\n');
        await timed(engine, grep, grepOk);
      }
    }
    const echo: Record<string, number[]> = Object.fromEntries(engines.map(([name]) => [name, []]));
    const greps: Record<string, number[]> = Object.fromEntries(engines.map(([name]) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      // Alternate which build goes first, so that neither always follows the other's garbage.
      const order = round % 2 === 0 ? engines : [...engines].reverse();
      for (const [name, engine] of order) {
        echo[name]?.push(await timed(engine, 'echo hi', (out) => out === 'hi\n'));
        greps[name]?.push(await timed(engine, grep, grepOk));
      }
    }
    const ms = (v: number) => Math.round(v * 100) / 100;
    const out: Record<string, unknown> = { files: FILES, rounds: ROUNDS, base: basePath ?? null };
    for (const [name, engine] of engines) {
      out[name] = {
        first_call_ms: ms(first[name] as number),
        echo_median_ms: ms(median(echo[name] as number[])),
        echo_p90_ms: ms(percentile(echo[name] as number[], 0.9)),
        grep_median_ms: ms(median(greps[name] as number[])),
        grep_p90_ms: ms(percentile(greps[name] as number[], 0.9)),
        shells_started: ((await engine.status()).runners.builtin?.shell as { started: number } | undefined)?.started,
      };
    }
    out.shell_processes_rss_mb = rss;
    return out;
  } finally {
    for (const [, engine] of engines) await engine.close();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}
