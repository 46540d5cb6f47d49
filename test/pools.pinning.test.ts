import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { JsRunner } from '../runners/js/js-runner.js';
import { allowedCores, CorePlan, coreGroups, parseCpuList, tasksetPath } from '../runners/shared/affinity.js';
import { poolCheck } from '../runners/shared/pool.js';
import { WasmRunner } from '../runners/wasm/wasm-runner.js';
import { type Engine, EngineConfigError } from '../src/index.js';
import type { ToolResult } from '../src/result.js';
import { alive, waitFor } from './support/daemon.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

// Each JS sandbox process on cores of its own: the plan that splits the cores, and real processes
// whose every thread the kernel keeps on their group (read back from /proc), replaced onto the cores
// of the one that died.

const SPIN_JS =
  'export default function run(input) { const end = Date.now() + input.ms; let n = 0; while (Date.now() < end) n++; return { n: n > 0 }; }\n';

const projects: TempProject[] = [];
const dirs: string[] = [];
const engines: Engine[] = [];

afterAll(async () => {
  await Promise.allSettled(engines.map((e) => e.close()));
  for (const p of projects) p.remove();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function project(): TempProject {
  const made = tempProject({
    'spin.json': definition({ id: 'spin', entry: 'spin.js', limits: { timeout_ms: 20_000 } }),
    'spin.js': SPIN_JS,
  });
  projects.push(made);
  return made;
}

async function open(p: TempProject, options: Parameters<typeof openEngine>[1] = {}): Promise<Engine> {
  const engine = await openEngine(p, { warmUp: false, ...options });
  engines.push(engine);
  return engine;
}

const ok = (r: ToolResult) => r.ok;

/** The cores each thread of `pid` may run on, as the kernel says. */
function threadCores(pid: number): number[][] {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
    return parseCpuList(/^Cpus_allowed_list:\s*(.+)$/m.exec(status)?.[1] ?? '') ?? [];
  });
}

type JsProcesses = { running: number; pids: number[]; cores?: number[][]; pinning: { on: boolean; reason: string } };

describe('the core plan', () => {
  it('reads CPU lists as the kernel writes them and refuses what is not one', () => {
    expect(parseCpuList('0-3,8,10-11\n')).toEqual([0, 1, 2, 3, 8, 10, 11]);
    expect(parseCpuList('5')).toEqual([5]);
    expect(parseCpuList('1,0,1')).toEqual([0, 1]);
    for (const bad of ['', '3-1', 'a', '0-', '0,,1', '0-99999999']) expect(parseCpuList(bad)).toBeNull();
  });

  it('splits the cores into even groups in order, one core each (reused in turn) when members outnumber cores', () => {
    const sixteen = Array.from({ length: 16 }, (_, i) => i);
    expect(coreGroups(sixteen, 4)).toEqual([
      [0, 1, 2, 3],
      [4, 5, 6, 7],
      [8, 9, 10, 11],
      [12, 13, 14, 15],
    ]);
    expect(coreGroups([0, 1, 2, 3, 4], 2)).toEqual([
      [0, 1, 2],
      [3, 4],
    ]);
    expect(coreGroups([0, 1], 2)).toEqual([[0], [1]]);
    expect(coreGroups([2, 5], 3)).toEqual([[2], [5], [2]]);
  });

  it('gives a starting member the group fewest running members hold, and takes a group back when its member ends', async () => {
    const plan = new CorePlan(3, { cores: [0, 1, 2, 3, 4, 5] });
    await plan.tried;
    if (tasksetPath() === null) {
      expect(plan.pinning).toEqual({ on: false, reason: 'off: taskset (util-linux) is not installed' });
      return;
    }
    expect(plan.pinning.on).toBe(true);
    const a = plan.take();
    const b = plan.take();
    const c = plan.take();
    expect([a?.cores, b?.cores, c?.cores]).toEqual([
      [0, 1],
      [2, 3],
      [4, 5],
    ]);
    expect(a?.prefix).toEqual([tasksetPath(), '--cpu-list', '0,1']);
    plan.give(b?.group ?? -1);
    expect(plan.take()?.cores).toEqual([2, 3]);
    // Every group held once: the next member shares the first.
    expect(plan.take()?.cores).toEqual([0, 1]);
  });

  it("pins nothing, and says why, where taskset cannot set a process's cores", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'arium-taskset-'));
    dirs.push(dir);
    const refusing = join(dir, 'taskset');
    writeFileSync(refusing, '#!/bin/sh\necho "taskset: failed to set pid 0\'s affinity: Operation not permitted" >&2\nexit 1\n', { mode: 0o755 });
    const plan = new CorePlan(2, { cores: [0, 1], taskset: refusing });
    // Before the trial has answered, members start unpinned.
    expect(plan.take()?.prefix ?? null).toBeNull();
    await plan.tried;
    expect(plan.pinning).toEqual({
      on: false,
      reason: "off: taskset cannot pin here (taskset: failed to set pid 0's affinity: Operation not permitted)",
    });
    expect(plan.working).toBe(false);
    expect(plan.take()).toBeNull();
  });

  it('is off, saying why, when set off, for a pool of one, or with one core', () => {
    expect(new CorePlan(4, { pin: false, cores: [0, 1, 2, 3] }).pinning).toEqual({ on: false, reason: 'off, as set' });
    expect(new CorePlan(1, { cores: [0, 1, 2, 3] }).pinning).toEqual({ on: false, reason: 'off: one member uses every core the engine has' });
    expect(new CorePlan(4, { cores: [3] }).pinning).toEqual({ on: false, reason: 'off: this process may use one core (3)' });
    expect(new CorePlan(4, { pin: false, cores: [0, 1] }).take()).toBeNull();
  });
});

describe('pinned JS sandbox processes', () => {
  // Two groups even on a one-core machine (both on that core): the kernel's answer is what is checked.
  const cores = allowedCores() ?? [0];
  const pinTo = cores.length >= 2 ? cores : [cores[0] as number, cores[0] as number];

  /** Whether every thread of each of `pids` may run on exactly the cores given for it. */
  const on = (pids: readonly number[], cores: ReadonlyArray<readonly number[]>) =>
    pids.every((pid, i) => threadCores(pid).every((allowed) => JSON.stringify(allowed) === JSON.stringify(cores[i])));
  /**
   * Whether each of `pids` has every thread on one of `groups`, a group of its own. Which process gets
   * which group depends on which of them took one first (the new one starting, or the old one moving).
   */
  const onOwnGroups = (pids: readonly number[], groups: ReadonlyArray<readonly number[]>) => {
    const placed = pids.map((pid) => [...new Set(threadCores(pid).map((allowed) => JSON.stringify(allowed)))]);
    if (!placed.every((one) => one.length === 1)) return false;
    return JSON.stringify(placed.map((one) => one[0]).sort()) === JSON.stringify(groups.map((group) => JSON.stringify(group)).sort());
  };
  /** The cores every thread of `pid` may run on (those of its first thread; onOwnGroups checked they agree). */
  const coresOf = (pid: number) => threadCores(pid)[0] ?? [];
  const every = parseCpuList(pinTo.join(',')) ?? [];

  it('pins every thread of each process to its own group while two run, and a replacement for a killed one to the cores it left', async () => {
    expect(tasksetPath(), 'taskset (util-linux) must be installed to test pinning').not.toBeNull();
    const engine = await open(project(), { runners: [new JsRunner({ processes: 2, idleMs: 60_000, pinTo })] });
    const js = async () => (await engine.status()).runners['js-runner']?.processes as JsProcesses;
    // One process alone keeps every core.
    expect(ok(await engine.call('spin', { ms: 5 }))).toBe(true);
    const lone = await js();
    expect(lone.pinning.on).toBe(true);
    expect(lone.running).toBe(1);
    expect(on(lone.pids, [every])).toBe(true);
    // Overlapping calls start the second process: both are then pinned, the first moved onto its group.
    await waitFor(
      async () => {
        expect((await Promise.all(Array.from({ length: 6 }, () => engine.call('spin', { ms: 150 })))).every(ok)).toBe(true);
        return (await js()).running === 2;
      },
      30_000,
      'a second sandbox process',
    );
    const groups = coreGroups(pinTo, 2);
    const pids = (await js()).pids;
    await waitFor(() => onOwnGroups(pids, groups), 10_000, 'both processes on their own cores');
    // The relay thread, isolated-vm's and V8's threads, and the isolates' threads alike.
    for (const pid of pids) expect(threadCores(pid).length).toBeGreaterThan(3);
    const placed = pids.map(coresOf);
    expect((await js()).cores).toEqual(placed);

    const [first, victim] = pids as [number, number];
    process.kill(victim, 'SIGKILL');
    await waitFor(() => !alive(victim), 10_000, 'the killed process to end');
    // The replacement starts at once (the tool is warm); with it, both are pinned again.
    await waitFor(
      async () => {
        await Promise.all(Array.from({ length: 6 }, () => engine.call('spin', { ms: 150 })));
        const now = await js();
        return now.running === 2 && !now.pids.includes(victim) && now.pids.includes(first);
      },
      30_000,
      'a replacement process',
    );
    const after = (await js()).pids;
    const replacement = after.find((pid) => pid !== first) as number;
    await waitFor(() => on([first, replacement], placed), 10_000, 'the replacement on the cores the killed one left');
    expect((await Promise.all(Array.from({ length: 8 }, () => engine.call('spin', { ms: 20 })))).every(ok)).toBe(true);
  }, 90_000);

  it('gives the process left when the pool shrinks back to one every core again', async () => {
    const engine = await open(project(), { runners: [new JsRunner({ processes: 2, idleMs: 300, pinTo })] });
    const js = async () => (await engine.status()).runners['js-runner']?.processes as JsProcesses;
    // Callers keep both processes busy until both are seen pinned: on a loaded machine the moves can
    // take longer than the 300 ms after which an idle second process ends.
    let busy = true;
    const callers = Promise.all(
      Array.from({ length: 4 }, async () => {
        while (busy) expect(ok(await engine.call('spin', { ms: 40 }))).toBe(true);
      }),
    );
    try {
      await waitFor(async () => (await js()).running === 2, 30_000, 'a second sandbox process');
      const pids = (await js()).pids;
      await waitFor(() => onOwnGroups(pids, coreGroups(pinTo, 2)), 10_000, 'both processes on their own cores');
    } finally {
      busy = false;
      await callers;
    }
    await waitFor(async () => (await js()).running === 1, 20_000, 'the pool to shrink to one process');
    const [kept] = (await js()).pids as [number];
    await waitFor(() => on([kept], [every]), 10_000, 'the process left on every core');
    expect(ok(await engine.call('spin', { ms: 5 }))).toBe(true);
  }, 60_000);

  it('leaves the processes on every core the engine has when pin_cores is false in arium.json', async () => {
    const p = project();
    writeFileSync(join(p.dir, 'arium.json'), JSON.stringify({ pools: { js: { processes: 2, pin_cores: false } } }));
    const engine = await open(p);
    expect(ok(await engine.call('spin', { ms: 5 }))).toBe(true);
    const js = (await engine.status()).runners['js-runner']?.processes as JsProcesses;
    expect(js.pinning).toEqual({ on: false, reason: 'off, as set' });
    expect(js.cores).toBeUndefined();
    for (const allowed of threadCores(js.pids[0] as number)) expect(allowed).toEqual(allowedCores());
  }, 60_000);

  it('takes pin_cores from createEngine over arium.json, and refuses a value that is not true or false', async () => {
    const p = project();
    writeFileSync(join(p.dir, 'arium.json'), JSON.stringify({ pools: { js: { pin_cores: false } } }));
    const engine = await open(p, { pools: { js: { processes: 2, pin_cores: true } } });
    const js = (await engine.status()).runners['js-runner']?.processes as JsProcesses;
    expect(js.pinning.reason).not.toBe('off, as set');

    const error = await open(project(), { pools: { js: { pin_cores: 'yes' } } as never }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).field).toBe('pools.js.pin_cores');
    expect((error as Error).message).toBe('pools.js.pin_cores must be true or false (got "yes")');

    const q = project();
    writeFileSync(join(q.dir, 'arium.json'), JSON.stringify({ pools: { js: { pin_cores: 1 } } }));
    const fromFile = await open(q).catch((e: unknown) => e);
    expect(fromFile).toBeInstanceOf(EngineConfigError);
    expect((fromFile as EngineConfigError).field).toBe('arium.json pools.js.pin_cores');
    expect(() => new JsRunner({ pinCores: 'no' as never })).toThrow('JsRunner option pinCores must be true or false (got "no")');
  }, 60_000);

  it("pins the WebAssembly runner's sandbox processes the same way, with the same option", async () => {
    const off = new WasmRunner({ processes: 2, pinCores: false });
    const on = new WasmRunner({ processes: 2 });
    try {
      const [offStatus, onStatus] = await Promise.all([off.status(), on.status()]);
      expect((offStatus.processes as JsProcesses).pinning).toEqual({ on: false, reason: 'off, as set' });
      expect((onStatus.processes as JsProcesses).pinning.on).toBe(tasksetPath() !== null && (allowedCores()?.length ?? 0) >= 2);
    } finally {
      await Promise.all([off.close(), on.close()]);
    }
    expect(() => new WasmRunner({ pinCores: 1 as never })).toThrow('WasmRunner option pinCores must be true or false (got 1)');
  }, 60_000);

  it("says in arium doctor's pool line whether the processes are pinned", () => {
    expect(poolCheck('js pool', { processes: 4, pinCores: false }, 'sandbox process', '', true).detail).toContain('pinning off, as set');
    expect(poolCheck('js pool', { processes: 1 }, 'sandbox process', '', true).detail).toContain('pinning off: one member uses every core');
    expect(poolCheck('python pool', { servers: 4 }, 'fork server').detail).not.toContain('pinning');
  });
});
