import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median, percentile } from './stats.js';

/**
 * Durable calls of three kinds mixed on one engine, 32 in flight: `fs.write` of a short text to one of
 * 100 paths, a JS tool and a Python tool each writing one of 50 paths through `ctx.vfs` (no reads, so
 * no conflicts), on a persisting engine in a folder on disk (every call's journal record is fdatasynced
 * before it returns). Mixes: 60% writes / 20% JS / 20% Python, half writes and half JS, half writes and
 * half Python, and each kind alone. Each mix reports calls/s (the median of its rounds), the median and
 * 99th percentile of a call's time over all rounds, the runs per call (above 1 when calls lost races
 * to other calls' commits and ran again), and how busy the engine's main thread was (its CPU time over
 * the rounds' wall time).
 *
 * Each build's engine runs in a process of its own (bench/mix-child.ts). `ARIUM_BENCH_AGAINST` names
 * other builds (comma-separated: a checkout, or its `dist/`), built with `npm run build`; their engines
 * run beside this build's, and every round of every mix runs each build in turn (in the reverse order
 * every other round), so that a busy moment of the shared machine falls on all of them alike.
 * `ARIUM_BENCH_ROUNDS` sets the number of rounds (5); `ARIUM_BENCH_MIXES` (comma-separated names of
 * `MIXES`) runs only those mixes.
 */
const MIXES: Record<string, { pattern: string; calls: number }> = {
  writes_60_js_20_python_20: { pattern: 'wwjwpwwjwp', calls: 1000 },
  writes_50_js_50: { pattern: 'wj', calls: 1500 },
  writes_50_python_50: { pattern: 'wp', calls: 700 },
  writes: { pattern: 'w', calls: 3000 },
  js: { pattern: 'j', calls: 1000 },
  python: { pattern: 'p', calls: 400 },
};

export const IN_FLIGHT = 32;

/** A round asked of a build's process (bench/mix-child.ts), and its answer. */
export interface RoundRequest {
  pattern: string;
  calls: number;
  round: string;
}

export interface RoundReply {
  ms: number;
  times: number[];
  /** Runs of the round's tools: more than its calls when some lost a race and ran again. */
  runs: number;
  main_cpu_ms: number;
}

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');

interface Build {
  label: string;
  dist: string;
  child: ChildProcess;
  replies: Array<(reply: RoundReply | { error: string } | { ready: true }) => void>;
}

function distOf(path: string): string {
  const dist = [join(path, 'dist'), path].find((dir) => existsSync(join(dir, 'src', 'index.js')));
  if (!dist) throw new Error(`ARIUM_BENCH_AGAINST: ${path} holds no build (no src/index.js in it or in its dist/); run npm run build there`);
  return resolve(dist);
}

function labelOf(dist: string): string {
  try {
    return execFileSync('git', ['-C', dist, 'describe', '--always', '--dirty'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return dist;
  }
}

function start(dist: string, label: string): Build {
  const child = fork(join(here, 'mix-child.js'), [dist, join(root, 'fixtures', 'mix')], { execArgv: ['--no-node-snapshot'] });
  const build: Build = { label, dist, child, replies: [] };
  child.on('message', (message: RoundReply | { error: string } | { ready: true }) => build.replies.shift()?.(message));
  child.on('exit', (code) => {
    for (const reply of build.replies.splice(0)) reply({ error: `the ${label} bench process exited (${code})` });
  });
  return build;
}

function next(build: Build): Promise<RoundReply | { ready: true }> {
  return new Promise((resolve, reject) => {
    build.replies.push((message) => ('error' in message ? reject(new Error(`${build.label}: ${message.error}`)) : resolve(message)));
  });
}

async function run(build: Build, request: RoundRequest): Promise<RoundReply> {
  const reply = next(build);
  build.child.send(request);
  return (await reply) as RoundReply;
}

export async function benchMix(): Promise<Record<string, unknown>> {
  const rounds = Number(process.env.ARIUM_BENCH_ROUNDS) || 5;
  const others = (process.env.ARIUM_BENCH_AGAINST ?? '').split(',').filter(Boolean).map(distOf);
  const ownDist = join(here, '..');
  const builds = [start(ownDist, `${labelOf(root)} (this build)`)];
  for (const dist of others) {
    // Two checkouts of one commit (a build and a variant of it) describe alike: the results are keyed
    // by label, so the second would overwrite the first's.
    const label = labelOf(dist);
    builds.push(start(dist, builds.some((b) => b.label === label) ? `${label} (${dist})` : label));
  }
  const chosen = (process.env.ARIUM_BENCH_MIXES ?? '').split(',').filter(Boolean);
  const unknown = chosen.find((name) => !(name in MIXES));
  if (unknown) throw new Error(`ARIUM_BENCH_MIXES: no mix ${unknown}; the mixes are ${Object.keys(MIXES).join(', ')}`);
  const mixes = Object.entries(MIXES).filter(([name]) => chosen.length === 0 || chosen.includes(name));
  const load = [loadavg()[0] as number];
  try {
    await Promise.all(builds.map(next));
    // Warm-up: start the sandboxes, create the folders, let V8 optimize the hot paths of every mix.
    for (const [name, mix] of mixes) {
      for (const build of builds) await run(build, { pattern: mix.pattern, calls: mix.calls >> 1, round: `warm-${name}` });
    }
    const samples = new Map<string, { perSec: number[]; times: number[]; runs: number; ms: number; cpu: number }>();
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? builds : [...builds].reverse();
      for (const [name, mix] of mixes) {
        for (const build of order) {
          const reply = await run(build, { pattern: mix.pattern, calls: mix.calls, round: `r${r}` });
          const key = `${name}\u0000${build.label}`;
          const s = samples.get(key) ?? { perSec: [], times: [], runs: 0, ms: 0, cpu: 0 };
          s.perSec.push(mix.calls / (reply.ms / 1000));
          s.times.push(...reply.times);
          s.runs += reply.runs;
          s.ms += reply.ms;
          s.cpu += reply.main_cpu_ms;
          samples.set(key, s);
        }
      }
    }
    load.push(loadavg()[0] as number);
    const ms = (value: number) => Math.round(value * 100) / 100;
    const figures: Record<string, Record<string, unknown>> = {};
    for (const [name] of mixes) {
      const byBuild: Record<string, unknown> = {};
      for (const build of builds) {
        const s = samples.get(`${name}\u0000${build.label}`);
        if (!s) continue;
        byBuild[build.label] = {
          calls_per_s: Math.round(median(s.perSec)),
          p50_ms: ms(median(s.times)),
          p99_ms: ms(percentile(s.times, 0.99)),
          runs_per_call: Math.round((s.runs / s.times.length) * 100) / 100,
          main_thread_busy: Math.round((s.cpu / s.ms) * 100) / 100,
        };
      }
      figures[name] = byBuild;
    }
    return {
      in_flight: IN_FLIGHT,
      rounds,
      builds: Object.fromEntries(builds.map((b) => [b.label, b.dist])),
      load_average_1m: { start: ms(load[0] as number), end: ms(load[1] as number) },
      mixes: figures,
    };
  } finally {
    for (const build of builds) {
      if (build.child.connected) build.child.send({ close: true });
    }
    await Promise.all(builds.map((b) => (b.child.exitCode === null ? new Promise((resolve) => b.child.once('exit', resolve)) : null)));
  }
}
