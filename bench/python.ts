import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { installPythonEnvironment } from '../runners/python/environment.js';
import { PythonRunner } from '../runners/python/index.js';
import { findInterpreter, harnessDir } from '../runners/python/interpreter.js';
import { bwrapCommand, bwrapProblem } from '../runners/python/isolation.js';
import { createEngine, type Engine } from '../src/index.js';
import { spawnTimes } from './measure.js';
import { machineCpu, median, percentile } from './stats.js';

/**
 * Python tools through the whole engine (validation, permissions, a fresh confined process per call
 * forked by the sandboxed fork server, output checks), against baselines measured in the same run:
 * starting a sandboxed interpreter per call (the same bubblewrap sandbox, `python -I -S`), and a bare
 * `python -I -S -c pass`. `node --no-node-snapshot dist/bench/run.js python` runs this suite.
 */

const here = dirname(fileURLToPath(import.meta.url));
const root = [join(here, '..'), join(here, '..', '..')].find((dir) => existsSync(join(dir, 'fixtures', 'python', 'tools'))) as string;
const ms = (value: number) => Math.round(value * 1000) / 1000;

async function sequential(engine: Engine, n: number, gapMs = 0): Promise<{ times: number[]; perSec: number }> {
  const times: number[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
    const t0 = performance.now();
    const result = await engine.call('py.echo', { i });
    times.push(performance.now() - t0);
    if (!result.ok) throw new Error(`bench call failed: ${result.error.message}`);
  }
  return { times, perSec: n / ((performance.now() - start) / 1000) };
}

async function sustained(engine: Engine, n: number, inFlight: number): Promise<number> {
  let next = 0;
  const start = performance.now();
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const result = await engine.call('py.echo', { i });
      if (!result.ok) throw new Error(`bench call failed: ${result.error.message}`);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return n / ((performance.now() - start) / 1000);
}

async function engineFigures(isolation: 'bubblewrap' | 'rlimits'): Promise<Record<string, unknown>> {
  const engine = await createEngine({
    workspace: join(root, 'fixtures'),
    project: 'python',
    watch: false,
    persist: false,
    runners: [new PythonRunner({ isolation })],
  });
  try {
    // Start the fork server, and let V8 finish optimizing the engine's hot paths (it is still compiling
    // them on a background thread, on one of the two cores, for the first few hundred calls).
    await sequential(engine, 400);
    const cpu0 = machineCpu();
    const seq = await sequential(engine, 400);
    // All the machine's CPU per call (engine, fork server, the call's process, the kernel's work for them).
    const machineMs = (machineCpu() - cpu0) / 400;
    const perSec4 = await sustained(engine, 800, 4);
    // Calls 5 ms apart: nothing of the previous call (its teardown, the next fork) competes for the cores.
    const spaced = await sequential(engine, 200, 5);
    return {
      spaced_call_median_ms: ms(median(spaced.times)),
      call_median_ms: ms(median(seq.times)),
      call_p90_ms: ms(percentile(seq.times, 0.9)),
      call_machine_cpu_ms: ms(machineMs),
      sequential_calls_per_s: Math.round(seq.perSec),
      sustained_calls_per_s_4_in_flight: Math.round(perSec4),
    };
  } finally {
    await engine.close();
  }
}

/**
 * Back-to-back calls with one fork server per tools folder against two (the default), in alternating
 * blocks of 100 calls so that both see the same machine: what the second server buys.
 */
async function serversAB(): Promise<Record<string, number>> {
  const open = (servers: number) =>
    createEngine({
      workspace: join(root, 'fixtures'),
      project: 'python',
      watch: false,
      persist: false,
      runners: [new PythonRunner({ isolation: 'bubblewrap', servers })],
    });
  const engines = [await open(1), await open(2)] as const;
  try {
    const times: [number[], number[]] = [[], []];
    for (const engine of engines) await sequential(engine, 50);
    for (let round = 0; round < 6; round++) {
      for (const [i, engine] of engines.entries()) times[i as 0 | 1].push(...(await sequential(engine, 100)).times);
    }
    return { one_server_median_ms: ms(median(times[0])), two_servers_median_ms: ms(median(times[1])) };
  } finally {
    await Promise.all(engines.map((e) => e.close()));
  }
}

/**
 * A pinned project's tool in its venv against the same tool with the interpreter itself: two copies of
 * fixtures/python, one pinning a small wheel written here (fixtures/python-env/wheel), in alternating
 * blocks of 100 calls so that both see the same machine. Both sandboxed alike (bubblewrap when here).
 */
async function environmentAB(python: string, isolation: 'bubblewrap' | 'rlimits'): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-env-'));
  try {
    for (const project of ['venv', 'system']) cpSync(join(root, 'fixtures', 'python'), join(dir, project), { recursive: true });
    const wheel = execFileSync(python, [join(root, 'fixtures', 'python-env', 'wheel', 'make_wheel.py'), 'arium_pin_demo', '1.0', dir], {
      encoding: 'utf8',
    }).trim();
    const hash = /--hash=(\S+)/.exec(execFileSync(python, ['-m', 'pip', 'hash', wheel], { encoding: 'utf8' }))?.[1];
    writeFileSync(join(dir, 'venv', 'requirements.txt'), `arium_pin_demo==1.0 --hash=${hash}\n`);
    const installed = await installPythonEnvironment({
      projectDir: join(dir, 'venv'),
      stateDir: join(dir, 'venv', '.arium'),
      pip: { noIndex: true, findLinks: [dir] },
    });
    const open = (project: string) =>
      createEngine({ workspace: dir, project, watch: false, persist: false, runners: [new PythonRunner({ isolation })] });
    const engines = [await open('venv'), await open('system')] as const;
    try {
      const times: [number[], number[]] = [[], []];
      for (const engine of engines) await sequential(engine, 100);
      for (let round = 0; round < 6; round++) {
        for (const [i, engine] of engines.entries()) times[i as 0 | 1].push(...(await sequential(engine, 100)).times);
      }
      const venv = median(times[0]);
      const system = median(times[1]);
      return {
        isolation,
        install_s: installed.seconds,
        venv_call_median_ms: ms(venv),
        system_call_median_ms: ms(system),
        venv_call_p90_ms: ms(percentile(times[0], 0.9)),
        system_call_p90_ms: ms(percentile(times[1], 0.9)),
        ratio_venv_to_system: ms(venv / system),
      };
    } finally {
      await Promise.all(engines.map((e) => e.close()));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchPython(): Promise<Record<string, unknown>> {
  const interpreter = await findInterpreter(undefined, root);
  const problem = await bwrapProblem();
  const script = 'import json,sys; print(json.dumps(json.loads(sys.argv[1])))';
  const bare = spawnTimes(interpreter.executable, ['-I', '-S', '-c', 'pass'], 30);
  const out: Record<string, unknown> = { python: interpreter.version, bubblewrap: problem ?? 'available' };
  out.spawn_bare_python_ms = ms(median(bare));
  out.rlimits_only = await engineFigures('rlimits');
  if (problem === null) {
    const args = bwrapCommand(
      { executable: interpreter.executable, roots: interpreter.roots, harness: harnessDir(), tools: join(root, 'fixtures', 'python', 'tools') },
      ['-I', '-S', '-c', script, '{"i": 1}'],
    );
    const spawned = spawnTimes('bwrap', args, 30);
    const sandboxed = await engineFigures('bubblewrap');
    out.spawn_sandboxed_per_call_ms = ms(median(spawned));
    out.bubblewrap = sandboxed;
    out.ratio_spawn_per_call_to_engine_call = ms(median(spawned) / (sandboxed.call_median_ms as number));
    out.servers_back_to_back = await serversAB();
  }
  out.pinned_environment = await environmentAB(interpreter.executable, problem === null ? 'bubblewrap' : 'rlimits');
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) console.log(JSON.stringify(await benchPython(), null, 2));
