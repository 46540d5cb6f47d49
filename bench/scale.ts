import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { availableParallelism, loadavg, platform } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median } from './stats.js';

/**
 * How one engine's JS and Python throughput grows with the cores it runs on: C callers (1, 2, 8, 32,
 * and 4 per core on machines with more than 8) each call a tool that sums 100 numbers back to back, for
 * `ARIUM_BENCH_ROUND_MS` (1500) per round, `ARIUM_BENCH_ROUNDS` (3) rounds, the median reported.
 *
 * On Linux with taskset, each engine runs in a process started under `taskset -c 0` and another under
 * `taskset -c 0,1` (its sandbox processes and fork servers inherit the cores, and the pools size
 * themselves from them), and `two_cores_over_one` compares them. `two_engines_over_one` is the
 * ceiling for that: the engine of core 0 and another under `taskset -c 1`, called at once, against
 * the first alone. On more than two cores an engine on every core is measured too. Every round runs each setting in turn, so a busy moment of a shared
 * machine falls on all of them alike. `main_thread_busy` is the engine's main thread's CPU time over
 * the round's wall time; `cpu_us_per_call` the CPU a call cost (the engine's main thread, its other
 * threads, the pool's members: where a setting that does fewer calls per second spends the core);
 * `members` how many sandbox processes or fork servers were running at its end.
 */
export interface ScaleRequest {
  runner: 'js' | 'python';
  callers: number;
  ms: number;
}

export interface ScaleReply {
  calls: number;
  ms: number;
  main_cpu_ms: number;
  /** The engine process's CPU, all its threads. */
  engine_cpu_ms: number;
  /** Its sandbox processes' or fork servers' (with their finished call processes). */
  members_cpu_ms: number;
  members: number;
}

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');

interface Setting {
  label: string;
  child: ChildProcess;
  replies: Array<(reply: ScaleReply | { error: string } | Ready) => void>;
  cores: number;
  /** Whether its JS sandbox processes run on cores of their own, and why. */
  pinning: string;
}

interface Ready {
  ready: true;
  cores: number;
  pinning: string;
}

function hasTaskset(): boolean {
  if (platform() !== 'linux') return false;
  try {
    execFileSync('taskset', ['-c', '0', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function start(label: string, cpus: string | null): Setting {
  const node = [process.execPath, '--no-node-snapshot', join(here, 'scale-child.js'), join(here, '..'), join(root, 'fixtures', 'scale')];
  const [command, ...args] = cpus === null ? node : ['taskset', '-c', cpus, ...node];
  const child = spawn(command as string, args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const setting: Setting = { label, child, replies: [], cores: 0, pinning: '' };
  child.on('message', (message: ScaleReply | { error: string } | Ready) => setting.replies.shift()?.(message));
  child.on('exit', (code) => {
    for (const reply of setting.replies.splice(0)) reply({ error: `the ${label} bench process exited (${code})` });
  });
  return setting;
}

function next<T>(setting: Setting): Promise<T> {
  return new Promise((resolve, reject) => {
    setting.replies.push((message) => ('error' in message ? reject(new Error(`${setting.label}: ${message.error}`)) : resolve(message as T)));
  });
}

/** CPU per call (µs; /proc counts it in ticks of 10 ms per process): the engine's main thread, its other threads, its pool's members. */
interface CpuPerCall {
  engine_main: number;
  engine_other: number;
  members: number;
}

function cpuMedians(samples: readonly CpuPerCall[]): CpuPerCall & { total: number } {
  const m = (pick: (c: CpuPerCall) => number) => Math.round(median(samples.map(pick)));
  return {
    engine_main: m((c) => c.engine_main),
    engine_other: m((c) => c.engine_other),
    members: m((c) => c.members),
    total: m((c) => c.engine_main + c.engine_other + c.members),
  };
}

const PAIR = 'two engines, cores 0 and 1';

/** Two engines' replies to one request, as one: their calls, CPU and members added up, over their mean wall time (each ran `ms`). */
function sum(replies: readonly ScaleReply[]): ScaleReply {
  const add = (pick: (r: ScaleReply) => number) => replies.reduce((total, r) => total + pick(r), 0);
  return {
    calls: add((r) => r.calls),
    ms: add((r) => r.ms) / replies.length,
    main_cpu_ms: add((r) => r.main_cpu_ms),
    engine_cpu_ms: add((r) => r.engine_cpu_ms),
    members_cpu_ms: add((r) => r.members_cpu_ms),
    members: add((r) => r.members),
  };
}

async function ask(setting: Setting, request: ScaleRequest): Promise<ScaleReply> {
  const reply = next<ScaleReply>(setting);
  setting.child.send(request);
  return reply;
}

export async function benchScale(): Promise<Record<string, unknown>> {
  const rounds = Number(process.env.ARIUM_BENCH_ROUNDS) || 3;
  const roundMs = Number(process.env.ARIUM_BENCH_ROUND_MS) || 1500;
  const cores = availableParallelism();
  const pinned = hasTaskset() && cores >= 2;
  const callers = [1, 2, 8, 32, ...(cores > 8 ? [cores * 4] : [])];
  const settings: Setting[] = [];
  if (pinned) settings.push(start('core 0', '0'), start('cores 0,1', '0,1'));
  if (!pinned || cores > 2) settings.push(start(`all ${cores} cores`, null));
  // The ceiling for one engine on two cores: two engines, one on each, measured at once.
  const partner = pinned ? start('core 1', '1') : null;
  const load = [loadavg()[0] as number];
  try {
    // Each child's first message says it is ready: wait for all at once, so none arrives unawaited.
    const ready = await Promise.all([...settings, ...(partner ? [partner] : [])].map((s) => next<Ready>(s)));
    for (const [i, setting] of settings.entries()) {
      setting.cores = ready[i]?.cores ?? 0;
      setting.pinning = ready[i]?.pinning ?? '';
    }
    const samples = new Map<string, { perSec: number[]; busy: number[]; cpu: CpuPerCall[]; members: number }>();
    const measures = settings.map((setting) => ({ label: setting.label, run: (request: ScaleRequest) => ask(setting, request) }));
    const one = settings[0];
    if (partner && one) measures.push({ label: PAIR, run: async (request) => sum(await Promise.all([ask(one, request), ask(partner, request)])) });
    for (let r = -1; r < rounds; r++) {
      // Round -1 warms up: the pools grow to the load, V8 optimizes the hot paths.
      const order = r % 2 === 0 ? measures : [...measures].reverse();
      for (const runner of ['js', 'python'] as const) {
        for (const c of callers) {
          for (const setting of order) {
            const reply = await setting.run({ runner, callers: c, ms: r < 0 ? roundMs / 3 : roundMs });
            if (r < 0) continue;
            const key = `${runner}\u0000${c}\u0000${setting.label}`;
            const s = samples.get(key) ?? { perSec: [], busy: [], cpu: [], members: 0 };
            s.perSec.push(reply.calls / (reply.ms / 1000));
            s.busy.push(reply.main_cpu_ms / reply.ms);
            const us = (ms: number) => (ms * 1000) / Math.max(1, reply.calls);
            s.cpu.push({
              engine_main: us(reply.main_cpu_ms),
              engine_other: us(reply.engine_cpu_ms - reply.main_cpu_ms),
              members: us(reply.members_cpu_ms),
            });
            s.members = Math.max(s.members, reply.members);
            samples.set(key, s);
          }
        }
      }
    }
    load.push(loadavg()[0] as number);
    const figures: Record<string, Record<string, unknown>> = {};
    for (const runner of ['js', 'python'] as const) {
      const byCallers: Record<string, unknown> = {};
      for (const c of callers) {
        const row: Record<string, unknown> = {};
        for (const setting of measures) {
          const s = samples.get(`${runner}\u0000${c}\u0000${setting.label}`);
          if (!s) continue;
          row[setting.label] = {
            calls_per_s: Math.round(median(s.perSec)),
            main_thread_busy: Math.round(median(s.busy) * 100) / 100,
            cpu_us_per_call: cpuMedians(s.cpu),
            members: s.members,
          };
        }
        if (pinned) {
          const one = (row['core 0'] as { calls_per_s: number }).calls_per_s;
          const two = (row['cores 0,1'] as { calls_per_s: number }).calls_per_s;
          row.two_cores_over_one = Math.round((two / one) * 100) / 100;
          const pair = (row[PAIR] as { calls_per_s: number } | undefined)?.calls_per_s;
          if (pair !== undefined) row.two_engines_over_one = Math.round((pair / one) * 100) / 100;
        }
        byCallers[`callers_${c}`] = row;
      }
      figures[runner] = byCallers;
    }
    return {
      tools: 'sum of 100 numbers, JS (isolated-vm) and Python (fork server), back to back per caller',
      round_ms: roundMs,
      rounds,
      settings: [
        ...settings.map((s) => `${s.label}: the pools sized for ${s.cores} core${s.cores === 1 ? '' : 's'}; JS pinning ${s.pinning}`),
        ...(partner ? [`${PAIR}: the engine of core 0 and one more on core 1, called at once (the callers of the row each), summed`] : []),
      ],
      ...(pinned ? {} : { pinned: 'no taskset here: only the unpinned engine is measured' }),
      ...figures,
      load_average: load.map((l) => Math.round(l * 100) / 100),
    };
  } finally {
    await Promise.all(
      [...settings, ...(partner ? [partner] : [])].map(
        (s) =>
          new Promise<void>((resolve) => {
            if (s.child.exitCode !== null || !s.child.connected) return resolve();
            s.child.once('exit', () => resolve());
            s.child.send({ close: true });
            setTimeout(() => s.child.kill('SIGKILL'), 10_000).unref();
          }),
      ),
    );
  }
}
