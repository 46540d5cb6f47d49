import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createEngine, type Engine } from '../src/index.js';
import { startNats } from './nats-server.js';
import { median, percentile } from './stats.js';

/**
 * Remote runners over NATS on loopback: a warm JS call on a worker against the same call run by the
 * local runner in the same run, a call making ten 1 KB ctx.vfs reads both ways, and throughput with
 * two worker processes (pinned to a core each with taskset when it exists) against one local runner.
 * Workers are real `arium worker` processes (dist/); the engine, nats-server and the workers share
 * the machine's cores. `node --no-node-snapshot dist/bench/run.js remote` runs this suite.
 */

const here = dirname(fileURLToPath(import.meta.url));
const root = [join(here, '..'), join(here, '..', '..')].find((dir) => existsSync(join(dir, 'bin', 'arium.js'))) as string;
const ms = (value: number) => Math.round(value * 1000) / 1000;

const TOOLS: Record<string, string> = {
  'reverse.json': JSON.stringify({
    id: 'reverse',
    description: 'reverse a string',
    runner: 'js-runner',
    entry: 'reverse.js',
    schema: { type: 'object' },
    permissions: ['exec.js'],
  }),
  'reverse.js': "export default async function run(input) { return { text: [...input.text].reverse().join('') }; }",
  'reads.json': JSON.stringify({
    id: 'reads',
    description: 'read ten files',
    runner: 'js-runner',
    entry: 'reads.js',
    schema: { type: 'object' },
    permissions: ['exec.js', 'vfs.read:/data/**'],
  }),
  'reads.js': `export default async function run(input, ctx) {
    let bytes = 0;
    for (let i = 0; i < 10; i++) bytes += (await ctx.vfs.read('/data/f' + i + '.txt')).length;
    return { bytes };
  }`,
};

async function timed(engine: Engine, id: string, input: unknown, n: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const result = await engine.call(id, input);
    times.push(performance.now() - t0);
    if (!result.ok) throw new Error(`bench call failed: ${result.error.message}`);
  }
  return times;
}

async function throughput(engine: Engine, inFlight: number, seconds: number): Promise<number> {
  let calls = 0;
  const end = performance.now() + seconds * 1000;
  const caller = async () => {
    while (performance.now() < end) {
      const r = await engine.call('reverse', { text: 'hello' });
      if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
      calls++;
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: inFlight }, caller));
  return Math.round(calls / ((performance.now() - t0) / 1000));
}

function hasTaskset(): boolean {
  try {
    execFileSync('taskset', ['-c', '0', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A real `arium worker` process (dist/) of deployment `bench`, resolved once it has joined. */
export function spawnWorker(url: string, cache: string, core: number | null, runners = 'js-runner'): Promise<ChildProcess> {
  const args = [
    '--no-node-snapshot',
    join(root, 'bin', 'arium.js'),
    'worker',
    '--nats',
    url,
    '--deployment',
    'bench',
    '--runners',
    runners,
    '--concurrency',
    '4',
    '--cache',
    cache,
  ];
  const child =
    core === null
      ? spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] })
      : spawn('taskset', ['-c', String(core), process.execPath, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr?.on('data', (chunk) => {
      err += String(chunk);
      if (/worker \S+ on /.test(err)) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`worker exited (${code}): ${err}`)));
  });
}

export async function benchRemote(): Promise<Record<string, unknown>> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-remote-'));
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  for (const [name, text] of Object.entries(TOOLS)) writeFileSync(join(workspace, 'p', 'tools', name), text);
  const nats = await startNats();
  const workers: ChildProcess[] = [];
  const engines: Engine[] = [];
  try {
    const pin = hasTaskset();
    workers.push(await spawnWorker(nats.url, join(workspace, 'cache-0'), pin ? 0 : null));
    const open = (remote: boolean) =>
      createEngine({
        workspace,
        project: 'p',
        watch: false,
        persist: false,
        remote: remote ? { nats: nats.url, deployment: 'bench', runners: ['js-runner'] } : false,
      }).then((e) => {
        engines.push(e);
        return e;
      });
    const local = await open(false);
    const remote = await open(true);
    for (let i = 0; i < 10; i++) {
      local.vfs.write(`/data/f${i}.txt`, 'x'.repeat(1024));
    }
    // The remote engine shares nothing with the local one: it has its own VFS.
    for (let i = 0; i < 10; i++) remote.vfs.write(`/data/f${i}.txt`, 'x'.repeat(1024));
    const N = 300;
    // Warm both: sandbox processes started, tool files cached on the worker.
    await timed(local, 'reverse', { text: 'hello' }, 50);
    await timed(remote, 'reverse', { text: 'hello' }, 50);
    await timed(local, 'reads', {}, 20);
    await timed(remote, 'reads', {}, 20);
    // Interleaved rounds, so a busy moment of the machine weighs on both sides alike.
    const l: number[] = [];
    const r: number[] = [];
    const lv: number[] = [];
    const rv: number[] = [];
    for (let round = 0; round < 6; round++) {
      l.push(...(await timed(local, 'reverse', { text: 'hello' }, N / 6)));
      r.push(...(await timed(remote, 'reverse', { text: 'hello' }, N / 6)));
      lv.push(...(await timed(local, 'reads', {}, 100 / 6)));
      rv.push(...(await timed(remote, 'reads', {}, 100 / 6)));
    }
    const warm = {
      calls: l.length,
      local_median_ms: ms(median(l)),
      remote_median_ms: ms(median(r)),
      added_median_ms: ms(median(r) - median(l)),
      local_p99_ms: ms(percentile(l, 0.99)),
      remote_p99_ms: ms(percentile(r, 0.99)),
    };
    const vfsReads = {
      calls: lv.length,
      local_median_ms: ms(median(lv)),
      remote_median_ms: ms(median(rv)),
      added_median_ms: ms(median(rv) - median(lv)),
      added_per_read_ms: ms((median(rv) - median(lv) - (median(r) - median(l))) / 10),
    };
    const localOne = await throughput(local, 8, 3);
    const remoteOne = await throughput(remote, 8, 3);
    workers.push(await spawnWorker(nats.url, join(workspace, 'cache-1'), pin ? 1 : null));
    // Let the new worker join the queue group and warm its sandbox.
    await timed(remote, 'reverse', { text: 'hello' }, 50);
    const remoteTwo = await throughput(remote, 8, 3);
    return {
      warm_call: warm,
      ten_1kb_vfs_reads: vfsReads,
      throughput_calls_per_s: {
        in_flight: 8,
        local_one_runner: localOne,
        remote_one_worker: remoteOne,
        remote_two_workers: remoteTwo,
        pinned: pin ? 'worker 1 on core 0, worker 2 on core 1 (taskset); engine and nats-server unpinned' : 'no taskset: unpinned',
      },
    };
  } finally {
    await Promise.allSettled(engines.map((e) => e.close()));
    for (const w of workers) w.kill('SIGTERM');
    await nats.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.stdout.write(`${JSON.stringify(await benchRemote(), null, 2)}\n`);
}
