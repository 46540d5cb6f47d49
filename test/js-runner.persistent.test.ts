import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf } from './support/js-engine.js';
import { definition, nextEvent, openEngine, type TempProject, tempProject } from './support/project.js';

// Tools with `"context": "persistent"` (runners/js/worker/persistent.mjs): their context, and with it
// their modules' top-level state, is kept between calls; each call still has a ctx of its own.

const COUNTER = `import { evaluations } from './lib.js';
let n = 0;
export default async function run(input, ctx) {
  n++;
  if (input.stale) return useKept(globalThis.kept, ctx);
  if (input.keep) globalThis.kept = ctx;
  if (input.hold) (globalThis.held ??= []).push(new Uint8Array(input.hold).fill(1));
  if (input.fail) throw new Error('asked to fail');
  if (input.loop) for (;;) {}
  return { n, evaluations, runId: ctx.runId };
}

/** Uses the ctx an earlier call kept, every way it could reach the host. */
async function useKept(old, ctx) {
  const out = { same: old === ctx, oldRunId: old.runId, runId: ctx.runId };
  try {
    await old.vfs.write('/stale.txt', 'written with an earlier call\\'s ctx');
    out.write = 'allowed';
  } catch (error) {
    out.write = error.code;
  }
  try {
    out.read = await old.vfs.read('/seed.txt', { encoding: 'utf8' });
  } catch (error) {
    out.read = error.code;
  }
  old.log('a line through the old ctx');
  ctx.log('a line through this call\\'s ctx');
  return out;
}
`;

/** Reads the shared counter, waits on the host, then writes it: calls interleaved in one context would lose updates. */
const RACE = `let n = 0;
export default async function run(input, ctx) {
  const seen = n;
  await ctx.vfs.exists('/anything');
  n = seen + 1;
  return { n };
}
`;

const LIB = 'globalThis.loads = (globalThis.loads ?? 0) + 1;\nexport const evaluations = globalThis.loads;\n';

const persistent = (id: string, entry: string, extra: Record<string, unknown> = {}) =>
  definition({ id, entry, context: 'persistent', permissions: ['exec.js', 'vfs.read', 'vfs.write'], limits: { timeout_ms: 3000 }, ...extra });

let project: TempProject;
let engine: Engine;

beforeAll(async () => {
  project = tempProject({
    'lib.js': LIB,
    'counter.js': COUNTER,
    'counter.json': persistent('counter', 'counter.js'),
    'fresh.json': definition({ id: 'fresh', entry: 'counter.js', permissions: ['exec.js'] }),
    'race.js': RACE,
    'race.json': persistent('race', 'race.js'),
    'hold.json': persistent('hold', 'counter.js', { limits: { memory_mb: 32, timeout_ms: 5000 } }),
    'changing.js': COUNTER,
    'changing.json': persistent('changing', 'changing.js'),
  });
  engine = await openEngine(project);
});

afterAll(async () => {
  await engine.close();
  project.remove();
});

describe('a persistent context', () => {
  it('keeps module state between calls and evaluates the modules once; a fresh tool starts over each call', async () => {
    const runs = [];
    for (let i = 0; i < 4; i++) runs.push(dataOf(await engine.call('counter', {})));
    expect(runs.map((r) => r.n)).toEqual([1, 2, 3, 4]);
    expect(runs.map((r) => r.evaluations)).toEqual([1, 1, 1, 1]);
    expect(new Set(runs.map((r) => r.runId)).size).toBe(4);
    for (let i = 0; i < 2; i++) expect(dataOf(await engine.call('fresh', {}))).toMatchObject({ n: 1, evaluations: 1 });
  });

  it('runs concurrent calls one at a time: none sees another half done', async () => {
    const runs = await Promise.all(Array.from({ length: 8 }, () => engine.call('race', {})));
    expect(runs.map((r) => dataOf(r).n).sort((a, b) => Number(a) - Number(b))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it("refuses a ctx kept from an earlier call: no read, no write, no log with that call's grants", async () => {
    engine.vfs.write('/seed.txt', 'seed');
    dataOf(await engine.call('counter', { keep: true }));
    const later = await engine.call('counter', { stale: true });
    const out = dataOf(later);
    expect(out).toMatchObject({ same: false, write: 'CANCELLED', read: 'CANCELLED' });
    expect(out.oldRunId).not.toBe(out.runId);
    expect(engine.vfs.exists('/stale.txt')).toBe(false);
    expect((later.meta.logs ?? []).map((l) => l.message)).toEqual(["a line through this call's ctx"]);
  });

  it('is reset by a tool error and by a timeout', async () => {
    await engine.call('counter', {});
    expect(dataOf(await engine.call('counter', {})).n).toBeGreaterThan(1);
    expect(errorOf(await engine.call('counter', { fail: true })).code).toBe('TOOL_ERROR');
    expect(dataOf(await engine.call('counter', {})).n).toBe(1);
    expect(dataOf(await engine.call('counter', {})).n).toBe(2);
    expect(errorOf(await engine.call('counter', { loop: true })).code).toBe('TIMEOUT');
    expect(dataOf(await engine.call('counter', {})).n).toBe(1);
  });

  it('is reset when the tool file changes', async () => {
    expect(dataOf(await engine.call('changing', {})).n).toBe(1);
    expect(dataOf(await engine.call('changing', {})).n).toBe(2);
    project.write('changing.js', COUNTER.replace('return { n,', 'return { changed: true, n,'));
    expect(dataOf(await engine.call('changing', {}))).toMatchObject({ changed: true, n: 1 });
  });

  it('is reset when what it holds fills its heap past half of memory_mb, before a call runs out of memory', async () => {
    // 4 MB kept per call in a 32 MB isolate: without the reset, the heap would pass the limit by the 8th call.
    const ns = [];
    for (let i = 0; i < 12; i++) ns.push(dataOf(await engine.call('hold', { hold: 4 * 1024 * 1024 })).n);
    expect(ns.slice(0, 2)).toEqual([1, 2]);
    expect(ns.filter((n) => n === 1).length).toBeGreaterThan(1);
  });
});

describe('a reloaded definition', () => {
  it('resets the context of the tool it defines', async () => {
    const own = await openEngine(project, { watch: true });
    try {
      expect(dataOf(await own.call('counter', {})).n).toBe(1);
      expect(dataOf(await own.call('counter', {})).n).toBe(2);
      const reloaded = nextEvent(own, 'registry', (e) => e.updated.includes('counter'), 15_000);
      project.write('counter.json', persistent('counter', 'counter.js', { description: 'counts, reloaded' }));
      await reloaded;
      expect(dataOf(await own.call('counter', {})).n).toBe(1);
    } finally {
      await own.close();
    }
  });
});

describe('a pool of sandbox processes', () => {
  it("sends all of a persistent tool's calls to one process, so they share one state", async () => {
    const own = await openEngine(project, { pools: { js: { processes: 2, idle_ms: 60_000 } } });
    try {
      // Calls in flight make the pool start its second process; wait until it takes calls.
      const running = async () => (await own.status()).runners['js-runner']?.processes as { running: number } | undefined;
      for (let i = 0; i < 100 && ((await running())?.running ?? 0) < 2; i++) {
        await Promise.all(Array.from({ length: 4 }, () => own.call('fresh', {})));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect((await running())?.running).toBe(2);
      const runs = await Promise.all(Array.from({ length: 8 }, () => own.call('race', {})));
      expect(runs.map((r) => dataOf(r).n).sort((a, b) => Number(a) - Number(b))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    } finally {
      await own.close();
    }
  });
});

describe('the context field', () => {
  it.each([
    [{ context: 'sticky' }, 'context'],
    [
      { runner: 'py-runner', entry: 'tool.py', permissions: ['exec.py'], context: 'persistent' },
      '"context" is a field of js-runner tools; a py-runner tool cannot have it',
    ],
  ])('refuses %j at load', async (fields, message) => {
    const bad = tempProject({
      'tool.js': 'export default () => 1;\n',
      'tool.py': 'def run(input, ctx):\n    return 1\n',
      'bad.json': definition({ id: 'bad', ...fields }),
    });
    const own = await openEngine(bad);
    try {
      const problem = own.problems().find((p) => p.file === 'tools/bad.json');
      expect(problem?.message).toContain(message);
      expect(problem?.at).toBe('/context');
    } finally {
      await own.close();
      bad.remove();
    }
  });
});
