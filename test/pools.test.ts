import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { JsRunner } from '../runners/js/js-runner.js';
import { PythonRunner } from '../runners/python/python-runner.js';
import { poolCheck } from '../runners/shared/pool.js';
import { wasmRunner } from '../runners/wasm/definition.js';
import { type Engine, EngineConfigError } from '../src/index.js';
import type { ToolResult } from '../src/result.js';
import { waitFor } from './support/daemon.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

// The runners' pools: sized from the cores or a setting, grown by load, shrunk when idle, and a member
// killed under load while the others serve. Real sandbox processes and fork servers throughout.

/** Busy for `ms` of its own CPU, so overlapping calls need more than one member to finish together. */
const SPIN_JS =
  'export default function run(input) { const end = Date.now() + input.ms; let n = 0; while (Date.now() < end) n++; return { n: n > 0 }; }\n';
const SLEEP_PY = 'import time\n\ndef run(input, ctx):\n    time.sleep(input["ms"] / 1000)\n    return {"slept": input["ms"]}\n';

const projects: TempProject[] = [];
const engines: Engine[] = [];

afterAll(async () => {
  await Promise.allSettled(engines.map((e) => e.close()));
  for (const p of projects) p.remove();
});

function project(extra: Record<string, string> = {}): TempProject {
  const made = tempProject({
    'spin.json': definition({ id: 'spin', entry: 'spin.js', limits: { timeout_ms: 20_000 } }),
    'spin.js': SPIN_JS,
    'nap.json': definition({ id: 'nap', runner: 'py-runner', entry: 'nap.py', permissions: ['exec.py'], limits: { timeout_ms: 20_000 } }),
    'nap.py': SLEEP_PY,
    ...extra,
  });
  projects.push(made);
  return made;
}

async function open(p: TempProject, options: Parameters<typeof openEngine>[1] = {}): Promise<Engine> {
  const engine = await openEngine(p, { warmUp: false, ...options });
  engines.push(engine);
  return engine;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const ok = (r: ToolResult) => r.ok;

describe('pool sizing', () => {
  it('is one member per available core by default, the given count with `cores`, and the setting over both', () => {
    const cores = availableParallelism();
    expect(new JsRunner().sizing).toMatchObject({ size: Math.min(cores, 64), chosen_by: 'cores' });
    expect(new JsRunner().sizing.reason).toContain('os.availableParallelism()');
    expect(new JsRunner({ cores: 12 }).sizing).toMatchObject({ size: 12, chosen_by: 'cores', idle_ms: 10_000 });
    expect(new JsRunner({ cores: 500 }).sizing).toMatchObject({ size: 64, chosen_by: 'cores' });
    expect(new JsRunner({ cores: 500 }).sizing.reason).toContain('capped at 64');
    expect(new JsRunner({ cores: 12, processes: 3 }).sizing).toMatchObject({
      size: 3,
      chosen_by: 'setting',
      reason: expect.stringContaining('as set'),
    });
    expect(new PythonRunner({ cores: 6 }).sizing).toMatchObject({ size: 6, chosen_by: 'cores' });
    expect(new PythonRunner({ cores: 6, servers: 1, idleMs: 50 }).sizing).toMatchObject({ size: 1, chosen_by: 'setting', idle_ms: 50 });
  });

  it.each([0, -1, 1.5, 65, Number.NaN])('refuses %s sandbox processes or fork servers, naming the option and the range', (bad) => {
    expect(() => new JsRunner({ processes: bad })).toThrow(/JsRunner option processes\.size must be an integer from 1 to 64/);
    expect(() => new PythonRunner({ servers: bad })).toThrow(/PythonRunner option servers\.size must be an integer from 1 to 64/);
  });

  it('takes arium.json `pools`, with createEngine `pools` over it field by field, and shows the choice in status()', async () => {
    const p = project({});
    writeFileSync(join(p.dir, 'arium.json'), JSON.stringify({ pools: { js: { processes: 3 }, python: { servers: 2, idle_ms: 500 } } }));
    const engine = await open(p, { pools: { python: { servers: 5 } } });
    const status = await engine.status();
    expect(status.runners['js-runner']?.processes).toMatchObject({ size: 3, chosen_by: 'setting', idle_ms: 10_000, running: 1 });
    expect(status.runners['py-runner']?.servers_per_folder).toMatchObject({ size: 5, chosen_by: 'setting', idle_ms: 500 });
  });

  it.each([
    [{ js: { processes: 0 } }, 'pools.js.processes', /pools\.js\.processes must be an integer from 1 to 64 \(got 0\)/],
    [{ python: { servers: 'many' } }, 'pools.python.servers', /pools\.python\.servers must be an integer from 1 to 64 \(got "many"\)/],
    [{ js: { threads: 2 } }, 'pools.js.threads', /Unknown pools\.js field "threads"; known fields: processes, idle_ms/],
    [{ ruby: {} }, 'pools.ruby', /Unknown pools field "ruby"; known fields: js, python, wasm/],
    [{ wasm: { processes: 100 } }, 'pools.wasm.processes', /pools\.wasm\.processes must be an integer from 1 to 64 \(got 100\)/],
    [{ wasm: { pin_cores: 'no' } }, 'pools.wasm.pin_cores', /pools\.wasm\.pin_cores must be true or false \(got "no"\)/],
  ])('refuses createEngine pools %j with an error naming %s', async (pools, field, message) => {
    const error = await open(project(), { pools: pools as never }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).field).toBe(field);
    expect((error as Error).message).toMatch(message);
  });

  it("sizes the WebAssembly runner's pool from pools.wasm, and says so in status() and arium doctor", async () => {
    const p = project({});
    writeFileSync(join(p.dir, 'arium.json'), JSON.stringify({ pools: { wasm: { processes: 3, idle_ms: 700, pin_cores: false } } }));
    const engine = await open(p);
    expect((await engine.status()).runners['wasm-runner']?.processes).toMatchObject({
      size: 3,
      chosen_by: 'setting',
      idle_ms: 700,
      pinning: { on: false, reason: 'off, as set' },
    });
    const lines = (await wasmRunner.probe?.({ config: { pools: { wasm: { processes: 2 } } }, projectDir: p.dir })) ?? [];
    expect(lines).toEqual([{ name: 'wasm pool', ok: true, detail: expect.stringContaining('up to 2 sandbox processes, as set') }]);
  }, 60_000);

  it('refuses a bad arium.json pools value at start-up', async () => {
    const p = project();
    writeFileSync(join(p.dir, 'arium.json'), JSON.stringify({ pools: { python: { servers: 100 } } }));
    const error = await open(p).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).field).toBe('arium.json pools.python.servers');
  });

  it('gives arium doctor a line saying the size and why', () => {
    expect(poolCheck('js pool', { processes: 4 }, 'sandbox process')).toMatchObject({
      ok: true,
      detail: expect.stringContaining('up to 4 sandbox processes, as set'),
    });
    const byCores = poolCheck('python pool', {}, 'fork server', ' per tools folder');
    expect(byCores.detail).toContain(`one fork server per core: ${availableParallelism()} core`);
    expect(poolCheck('js pool', { processes: 0 }, 'sandbox process')).toMatchObject({ ok: false, fix: expect.stringContaining('1 to 64') });
  });
});

describe('the JS pool', () => {
  it('starts members as overlapping calls need them, spreads calls over them, and ends idle ones down to one', async () => {
    const engine = await open(project(), { runners: [new JsRunner({ processes: 3, idleMs: 300 })] });
    const js = async () => (await engine.status()).runners['js-runner']?.processes as { running: number; pids: number[] };
    // Back to back: one member takes every call.
    for (let i = 0; i < 3; i++) expect(ok(await engine.call('spin', { ms: 5 }))).toBe(true);
    expect((await js()).running).toBe(1);
    // Overlapping: every member is busy, so more start, up to the size.
    const results = await Promise.all(Array.from({ length: 12 }, () => engine.call('spin', { ms: 300 })));
    expect(results.every(ok)).toBe(true);
    const grown = await js();
    expect(grown.running).toBeGreaterThanOrEqual(2);
    expect(grown.running).toBeLessThanOrEqual(3);
    expect(new Set(grown.pids).size).toBe(grown.running);
    // Idle: the extra members end; the oldest stays and serves.
    await waitFor(async () => (await js()).running === 1, 20_000, 'the pool to shrink to one process');
    const [kept] = (await js()).pids;
    for (const pid of grown.pids) if (pid !== kept) await waitFor(() => !alive(pid), 10_000, `process ${pid} to end`);
    expect(ok(await engine.call('spin', { ms: 5 }))).toBe(true);
  }, 60_000);

  it('keeps one process when set to one, however many calls overlap', async () => {
    const engine = await open(project(), { pools: { js: { processes: 1 } } });
    const results = await Promise.all(Array.from({ length: 8 }, () => engine.call('spin', { ms: 100 })));
    expect(results.every(ok)).toBe(true);
    expect((await engine.status()).runners['js-runner']?.processes).toMatchObject({ running: 1, size: 1 });
  }, 60_000);

  it('loses no call when a member is killed (-9) under load: its calls fail UNAVAILABLE, the others are served, and it is replaced', async () => {
    const engine = await open(project(), { runners: [new JsRunner({ processes: 3, idleMs: 60_000 })] });
    const status = async () =>
      (await engine.status()).runners['js-runner'] as unknown as Record<string, unknown> & { processes: { running: number; pids: number[] } };
    await Promise.all(Array.from({ length: 9 }, () => engine.call('spin', { ms: 300 })));
    const before = await status();
    expect(before.processes.running).toBeGreaterThanOrEqual(2);
    const [first, victim] = before.processes.pids as [number, number];
    const calls = Array.from({ length: 12 }, () => engine.call('spin', { ms: 800 }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    process.kill(victim, 'SIGKILL');
    const results = await Promise.all(calls);
    // Every call has its answer: a result, or a retryable failure that says the process stopped.
    const failed = results.filter((r) => !r.ok);
    expect(results.filter(ok).length).toBeGreaterThan(0);
    for (const r of failed) {
      expect(r.ok ? null : r.error).toMatchObject({ code: 'UNAVAILABLE', retryable: true, message: expect.stringContaining('SIGKILL') });
    }
    expect(failed.length).toBeLessThan(12);
    expect(alive(first)).toBe(true);
    const after = await status();
    expect(after.process_crashes).toBe(1);
    expect(after.processes.pids).not.toContain(victim);
    expect((await Promise.all(Array.from({ length: 6 }, () => engine.call('spin', { ms: 50 })))).every(ok)).toBe(true);
  }, 60_000);
});

describe('the Python pool', () => {
  it('starts fork servers as overlapping calls need them and ends idle ones down to one per tools folder', async () => {
    const engine = await open(project(), { runners: [new PythonRunner({ servers: 3, idleMs: 1500 })] });
    const py = async () => (await engine.status()).runners['py-runner'] as unknown as { servers: number; server_pids: number[] };
    for (let i = 0; i < 3; i++) expect(ok(await engine.call('nap', { ms: 5 }))).toBe(true);
    // Back to back: one server takes every call, none other is started.
    expect((await py()).servers).toBe(1);
    // Overlapping calls start another server in the background (no call waits for it); the next ones use it.
    for (let wave = 0; wave < 2; wave++) {
      const results = await Promise.all(Array.from({ length: 12 }, () => engine.call('nap', { ms: 400 })));
      expect(results.every(ok)).toBe(true);
    }
    const grown = await py();
    expect(grown.servers).toBeGreaterThanOrEqual(2);
    expect(grown.servers).toBeLessThanOrEqual(3);
    await waitFor(async () => (await py()).servers === 1, 20_000, 'the Python pool to shrink to one server');
    const [kept] = (await py()).server_pids;
    for (const pid of grown.server_pids) if (pid !== kept) await waitFor(() => !alive(pid), 10_000, `server ${pid} to end`);
    expect(ok(await engine.call('nap', { ms: 5 }))).toBe(true);
  }, 90_000);

  it('loses no call when a fork server is killed (-9) under load: its calls fail UNAVAILABLE, the others are served', async () => {
    const engine = await open(project(), { runners: [new PythonRunner({ servers: 3, idleMs: 60_000 })] });
    const status = async () => (await engine.status()).runners['py-runner'] as unknown as Record<string, unknown> & { server_pids: number[] };
    for (let wave = 0; wave < 2; wave++) await Promise.all(Array.from({ length: 9 }, () => engine.call('nap', { ms: 400 })));
    const before = await status();
    expect(before.server_pids.length).toBeGreaterThanOrEqual(2);
    const [first, victim] = before.server_pids as [number, number];
    const calls = Array.from({ length: 12 }, () => engine.call('nap', { ms: 1000 }));
    await new Promise((resolve) => setTimeout(resolve, 400));
    process.kill(victim, 'SIGKILL');
    const results = await Promise.all(calls);
    const failed = results.filter((r) => !r.ok);
    expect(results.filter(ok).length).toBeGreaterThan(0);
    for (const r of failed) expect(r.ok ? null : r.error).toMatchObject({ code: 'UNAVAILABLE', retryable: true });
    expect(failed.length).toBeLessThan(12);
    expect(alive(first)).toBe(true);
    const after = await status();
    expect(after.server_crashes).toBe(1);
    expect(after.server_pids).not.toContain(victim);
    expect((await Promise.all(Array.from({ length: 6 }, () => engine.call('nap', { ms: 50 })))).every(ok)).toBe(true);
  }, 90_000);
});
