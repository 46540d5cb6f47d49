import { execFileSync, fork } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runInNewContext } from 'node:vm';
import { getQuickJS } from 'quickjs-emscripten';
import { createEngine, type Engine } from '../src/index.js';
import { benchPersistent } from './js-persistent.js';
import { cpuPerOp, machineCpu, median, percentile, threadCpu } from './stats.js';

/**
 * JS tools through the whole engine (validation, permissions, a fresh isolated-vm context per call in
 * the sandbox process, output checks), against baselines measured in the same run: `node:vm`
 * runInNewContext per call (no security boundary), a fresh QuickJS context per call (quickjs-emscripten,
 * in-process), spawning `node` per call, raw isolated-vm, and the
 * floor of the runner's architecture (bench/js-floor.ts: the same sandbox process and fresh contexts
 * made ahead, with none of the engine's work). Calls are timed back to back (each starts when the last
 * ended: the machine is saturated, so work done ahead competes with the call for the 2 cores) and
 * paced (a gap before each call, as in an agent loop: see `paced`).
 * `node --no-node-snapshot dist/bench/run.js js` runs this suite; `node dist/bench/js.js` runs it alone.
 */

const here = dirname(fileURLToPath(import.meta.url));
const root = [join(here, '..'), join(here, '..', '..')].find((dir) => existsSync(join(dir, 'fixtures', 'js', 'project'))) as string;
const REVERSE = "(function (input) { return { text: [...input.text].reverse().join('') }; })";

const ms = (value: number) => Math.round(value * 1000) / 1000;

async function ready(engine: Engine): Promise<void> {
  const status = await engine.status();
  if (!status.runners['js-runner']?.available) throw new Error(`js-runner unavailable: ${status.runners['js-runner']?.reason}`);
}

/** Calls awaited one after another: the latency of each, and the rate they reach. */
async function latencies(engine: Engine, id: string, input: unknown, n: number): Promise<{ times: number[]; perSec: number }> {
  const times: number[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const result = await engine.call(id, input);
    times.push(performance.now() - t0);
    if (!result.ok) throw new Error(`bench call failed: ${result.error.message}`);
  }
  return { times, perSec: n / ((performance.now() - start) / 1000) };
}

async function concurrent(engine: Engine, inFlight: number, seconds: number): Promise<number> {
  let calls = 0;
  const end = performance.now() + seconds * 1000;
  const worker = async () => {
    while (performance.now() < end) {
      await engine.call('reverse', { text: 'hello' });
      calls++;
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  return calls / ((performance.now() - t0) / 1000);
}

/** First call of a tool the sandbox has never seen (the sandbox process already running). */
async function coldTool(): Promise<{ first_call_of_new_tool_ms: number; engine_start_to_first_result_ms: number }> {
  const firstCalls: number[] = [];
  const engineStarts: number[] = [];
  for (let i = 0; i < 5; i++) {
    const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-js-'));
    cpSync(join(root, 'fixtures', 'js', 'project'), join(workspace, 'p'), { recursive: true });
    const t0 = performance.now();
    const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false });
    const cold = await engine.call('reverse', { text: 'cold' });
    engineStarts.push(performance.now() - t0);
    if (!cold.ok) throw new Error(cold.error.message);
    const id = `fresh${i}`;
    writeFileSync(join(workspace, 'p', 'tools', `${id}.js`), `export default (input) => ({ n: ${i}, text: input.text });\n`);
    writeFileSync(
      join(workspace, 'p', 'tools', `${id}.json`),
      JSON.stringify({ id, description: 'bench', runner: 'js-runner', entry: `${id}.js`, schema: { type: 'object' }, permissions: ['exec.js'] }),
    );
    await engine.refresh();
    const t1 = performance.now();
    const first = await engine.call(id, { text: 'x' });
    firstCalls.push(performance.now() - t1);
    if (!first.ok) throw new Error(first.error.message);
    await engine.close();
    rmSync(workspace, { recursive: true, force: true });
  }
  return { first_call_of_new_tool_ms: ms(median(firstCalls)), engine_start_to_first_result_ms: ms(median(engineStarts)) };
}

interface Baselines {
  node_vm_per_call_ms: number;
  quickjs_fresh_context_per_call_ms: number;
  spawn_per_call_ms: number;
  ivm_fresh_context_ms: number;
  ivm_fresh_context_call_ms: number;
  ivm_existing_context_call_ms: number;
}

/**
 * The same function in a fresh QuickJS context per call (quickjs-emscripten: QuickJS compiled to
 * WebAssembly, in this process): make the context, evaluate the call, copy the result out, dispose.
 */
async function quickjsTimes(input: { text: string }, count: number): Promise<number[]> {
  const quickjs = await getQuickJS();
  const code = `${REVERSE}(${JSON.stringify(input)})`;
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const context = quickjs.newContext();
    const result = context.evalCode(code);
    const out = context.unwrapResult(result);
    const value = context.dump(out) as { text?: string };
    out.dispose();
    context.dispose();
    times.push(performance.now() - t0);
    if (value?.text !== 'olleh') throw new Error(`QuickJS call returned ${JSON.stringify(value)}`);
  }
  return times;
}

async function baselines(): Promise<Baselines> {
  const input = { text: 'hello' };
  const vmTimes: number[] = [];
  for (let i = 0; i < 2200; i++) {
    const t0 = performance.now();
    runInNewContext(`${REVERSE}(input)`, { input });
    if (i >= 200) vmTimes.push(performance.now() - t0);
  }
  const spawnTimes: number[] = [];
  const script = `const input = JSON.parse(process.argv[1]); process.stdout.write(JSON.stringify(${REVERSE}(input)));`;
  for (let i = 0; i < 21; i++) {
    const t0 = performance.now();
    execFileSync(process.execPath, ['-e', script, JSON.stringify(input)]);
    if (i > 0) spawnTimes.push(performance.now() - t0);
  }
  const raw = JSON.parse(execFileSync(process.execPath, ['--no-node-snapshot', join(here, 'js-ivm-baseline.js')], { encoding: 'utf8' })) as Record<
    string,
    number
  >;
  const quickjs = (await quickjsTimes(input, 2200)).slice(200);
  return {
    node_vm_per_call_ms: ms(median(vmTimes)),
    quickjs_fresh_context_per_call_ms: ms(median(quickjs)),
    spawn_per_call_ms: ms(median(spawnTimes)),
    ivm_fresh_context_ms: ms(raw.fresh_context_ms ?? Number.NaN),
    ivm_fresh_context_call_ms: ms(raw.fresh_context_call_ms ?? Number.NaN),
    ivm_existing_context_call_ms: ms(raw.existing_context_call_ms ?? Number.NaN),
  };
}

interface FloorProcess {
  call(input: unknown): Promise<unknown>;
  pid: number;
  close(): void;
}

/** The floor's sandbox process (bench/js-floor.ts `serve`, `reuse`d contexts or not), answering calls over the IPC channel. */
async function floorProcess(reuse = false): Promise<FloorProcess> {
  const child = fork(join(here, 'js-floor.js'), ['serve', ...(reuse ? ['reuse'] : [])], {
    execArgv: ['--no-node-snapshot'],
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  await new Promise((resolve) => child.once('message', resolve));
  const pending = new Map<number, (out: unknown) => void>();
  child.on('message', (message: { id: number; out: unknown }) => {
    pending.get(message.id)?.(message.out);
    pending.delete(message.id);
  });
  let id = 0;
  return {
    call: (input) =>
      new Promise<unknown>((resolve) => {
        pending.set(++id, resolve);
        child.send({ id, input });
      }),
    pid: child.pid as number,
    close: () => child.kill('SIGKILL'),
  };
}

/** `count` calls of a floor process, one after another: the time of each (and each answer checked). */
async function floorCalls(sandbox: FloorProcess, count: number): Promise<number[]> {
  const input = { text: 'hello' };
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const out = (await sandbox.call(input)) as { text?: string };
    times.push(performance.now() - t0);
    if (out?.text !== 'olleh') throw new Error(`floor call returned ${JSON.stringify(out)}`);
  }
  return times;
}

/**
 * The architecture's floor (bench/js-floor.ts): a fresh context per call, made ahead, in a sandbox
 * process reached over the IPC channel — and the same in-process — with none of the engine's work.
 */
async function floor(sandbox: FloorProcess): Promise<{
  floor_median_ms: number;
  floor_machine_cpu_ms: number;
  floor_cpu_us_by_thread: Record<string, unknown>;
  floor_in_process_median_ms: number;
}> {
  await floorCalls(sandbox, 3000);
  const threads0 = { caller: threadCpu(process.pid), sandbox: threadCpu(sandbox.pid) };
  const cpu0 = machineCpu();
  const times = await floorCalls(sandbox, 5000);
  const cpu = (machineCpu() - cpu0) / 5000;
  // The same split as the engine's figure: the calling process, the sandbox's main thread and its isolate threads.
  const byThread = {
    caller: cpuPerOp(threads0.caller, threadCpu(process.pid), 5000),
    sandbox: cpuPerOp(threads0.sandbox, threadCpu(sandbox.pid), 5000),
  };
  const local = JSON.parse(execFileSync(process.execPath, ['--no-node-snapshot', join(here, 'js-floor.js'), 'local'], { encoding: 'utf8' })) as {
    median_ms: number;
  };
  return {
    floor_median_ms: ms(median(times)),
    floor_machine_cpu_ms: ms(cpu),
    floor_cpu_us_by_thread: byThread,
    floor_in_process_median_ms: ms(local.median_ms),
  };
}

/** Gaps between calls for the paced figures (ms), and how many rounds each. */
const PACED: ReadonlyArray<{ gapMs: number; rounds: number }> = [
  { gapMs: 2, rounds: 800 },
  { gapMs: 20, rounds: 300 },
];

/** One kind of call the paced rounds time: its name in the results, and how to make one. */
type Participant = [name: string, call: () => unknown];

/**
 * Calls that do not follow each other at once, as in an agent loop (a model's step between two tool
 * calls): each call comes `gapMs` after the last one ended, so warm pools are full again and the
 * processes and threads a call crosses are idle (asleep) when it starts. In every round each
 * participant (the engine, a `node:vm` runInNewContext, the floors) makes one call, in the same
 * conditions; ratios are to `node:vm`, the first participant.
 */
async function paced(participants: Participant[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const { gapMs, rounds } of PACED) {
    const times = participants.map(() => [] as number[]);
    for (let i = 0; i < rounds; i++) {
      for (const [p, [, call]] of participants.entries()) {
        await sleep(gapMs);
        const t0 = performance.now();
        await call();
        times[p]?.push(performance.now() - t0);
      }
    }
    const medians = times.map((t) => median(t));
    const base = medians[0] as number;
    for (const [p, [name]] of participants.entries()) {
      out[`paced_${gapMs}ms_${name}_median_ms`] = ms(medians[p] as number);
      if (p > 0) out[`paced_${gapMs}ms_ratio_${name}_to_node_vm`] = ms((medians[p] as number) / base);
    }
  }
  return out;
}

/** The floor with one long-lived context per isolate (bench/js-floor.ts `reuse`): calls back to back. */
async function reusedFloor(sandbox: FloorProcess): Promise<number> {
  await floorCalls(sandbox, 3000);
  return median(await floorCalls(sandbox, 5000));
}

export async function benchJs(): Promise<Record<string, unknown>> {
  const base = await baselines();
  const sandbox = await floorProcess();
  const reused = await floorProcess(true);
  const engine = await createEngine({ workspace: join(root, 'fixtures', 'js'), project: 'project', watch: false, persist: false });
  try {
    const architecture = await floor(sandbox);
    await ready(engine);
    const input = { text: 'hello' };
    await latencies(engine, 'reverse', input, 3000);
    // Where the CPU of a warm call goes: the engine process, the sandbox process's main thread, and the
    // threads running the isolates (the call itself and making the next fresh contexts).
    const sandboxPid = Number((await engine.status()).runners['js-runner']?.pid);
    const cpu0 = { engine: threadCpu(process.pid), sandbox: threadCpu(sandboxPid), machine: machineCpu() };
    const sequential = await latencies(engine, 'reverse', input, 5000);
    const machineMs = (machineCpu() - cpu0.machine) / 5000;
    const cpu = {
      engine: cpuPerOp(cpu0.engine, threadCpu(process.pid), 5000),
      sandbox: cpuPerOp(cpu0.sandbox, threadCpu(sandboxPid), 5000),
    };
    const typescript = await latencies(engine, 'greet', { name: 'Ada' }, 2000);
    const vfs = await latencies(engine, 'notes', { steps: [{ op: 'write', args: ['/b.txt', 'x'] }] }, 2000);
    const inFlight4 = await concurrent(engine, 4, 3);
    const warmMedian = median(sequential.times);
    const reusedMedian = await reusedFloor(reused);
    const spaced = await paced([
      ['node_vm', () => runInNewContext(`${REVERSE}(input)`, { input })],
      [
        'warm_call',
        async () => {
          const result = await engine.call('reverse', input);
          if (!result.ok) throw new Error(`bench call failed: ${result.error.message}`);
        },
      ],
      ['floor', () => sandbox.call(input)],
      ['reused_context_floor', () => reused.call(input)],
    ]);
    return {
      ...base,
      warm_call_median_ms: ms(warmMedian),
      warm_call_p90_ms: ms(percentile(sequential.times, 0.9)),
      warm_call_p99_ms: ms(percentile(sequential.times, 0.99)),
      warm_call_cpu_us_by_thread: cpu,
      // All the machine's CPU per call (every process, kernel included): on 2 cores, calls that follow
      // each other cannot take less than half of it each.
      warm_call_machine_cpu_ms: ms(machineMs),
      sequential_calls_per_sec: Math.round(sequential.perSec),
      four_in_flight_calls_per_sec: Math.round(inFlight4),
      typescript_tool_median_ms: ms(median(typescript.times)),
      one_vfs_write_tool_median_ms: ms(median(vfs.times)),
      ...(await coldTool()),
      ...architecture,
      ratio_warm_to_node_vm: ms(warmMedian / base.node_vm_per_call_ms),
      ratio_floor_to_node_vm: ms(architecture.floor_median_ms / base.node_vm_per_call_ms),
      ratio_warm_to_floor: ms(warmMedian / architecture.floor_median_ms),
      ratio_spawn_to_warm: Math.round(base.spawn_per_call_ms / warmMedian),
      ratio_warm_to_quickjs: ms(warmMedian / base.quickjs_fresh_context_per_call_ms),
      // Not a clean global scope per call: what reusing contexts could reach at best (bench/js-floor.ts).
      reused_context_floor_median_ms: ms(reusedMedian),
      ratio_reused_context_floor_to_node_vm: ms(reusedMedian / base.node_vm_per_call_ms),
      ...spaced,
      // A trivial tool with a persistent context against a fresh one, in the sandbox and end to end.
      persistent_context: await benchPersistent(),
    };
  } finally {
    sandbox.close();
    reused.close();
    await engine.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(`${JSON.stringify(await benchJs(), null, 2)}\n`);
}
