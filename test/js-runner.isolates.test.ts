import { afterEach, describe, expect, it } from 'vitest';
import { CodeRunner } from '../runners/code/runner.js';
import { JsRunner } from '../runners/js/js-runner.js';
import type { Engine } from '../src/index.js';
import { waitFor } from './support/daemon.js';
import { dataOf } from './support/js-engine.js';
import { deferred, definition, FakeRunner, openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * The isolates of a JS sandbox process (runners/js/worker/pool.mjs), in real sandbox processes: its
 * calls are served by a few isolates in turn (the rotation), and one more is made only for a call
 * waiting behind a call that holds its isolate for long, or behind a program waiting on the tools it
 * called.
 */

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

const SPIN = `export default async function run(input) {
  const end = Date.now() + input.ms;
  while (Date.now() < end) {}
  return { spun: input.ms };
}
`;
const QUICK = 'export default async function run(input) { return { n: input.n }; }\n';

async function jsProject(runner: JsRunner): Promise<Engine> {
  project = tempProject({
    'spin.js': SPIN,
    'spin.json': definition({ id: 'spin', entry: 'spin.js', limits: { timeout_ms: 20_000 } }),
    'quick.js': QUICK,
    'quick.json': definition({ id: 'quick', entry: 'quick.js' }),
  });
  engine = await openEngine(project, { runners: [runner] });
  return engine;
}

async function pool(e: Engine): Promise<Record<string, number>> {
  return (await e.status()).runners['js-runner']?.pool as Record<string, number>;
}

describe('the rotation of a JS sandbox process', () => {
  it('serves calls beyond it with its isolates in turn, making no more', async () => {
    const e = await jsProject(new JsRunner({ processes: 1, rotation: 1 }));
    const results = await Promise.all(Array.from({ length: 24 }, (_, n) => e.call('quick', { n })));
    expect(results.map((r) => dataOf<{ n: number }>(r).n)).toEqual(Array.from({ length: 24 }, (_, n) => n));
    expect(await pool(e)).toMatchObject({ rotation: 1, isolates: 1, parked: 0, waiting: 0 });
  });

  it('makes one more isolate for the calls behind one that holds its isolate for a second', async () => {
    const e = await jsProject(new JsRunner({ processes: 1, rotation: 1 }));
    dataOf(await e.call('quick', { n: 0 }));
    dataOf(await e.call('spin', { ms: 0 }));
    const ends: string[] = [];
    const spin = e.call('spin', { ms: 4000 }).then((r) => {
      ends.push('spin');
      return r;
    });
    // The spinning call has the rotation's isolate; the quick one waits for it, then for the second
    // an isolate held that long allows.
    await waitFor(async () => (await pool(e)).leased === 1, 10_000, 'the spinning call leasing its isolate');
    const quick = e.call('quick', { n: 1 }).then((r) => {
      ends.push('quick');
      return r;
    });
    expect(dataOf(await quick)).toEqual({ n: 1 });
    expect(await pool(e)).toMatchObject({ parked: 1, isolates: 2 });
    expect(dataOf(await spin)).toEqual({ spun: 4000 });
    expect(ends).toEqual(['quick', 'spin']);
  });

  it('refuses a rotation that is not a whole number from 1', () => {
    expect(() => new JsRunner({ rotation: 0 })).toThrow(/JsRunner option rotation must be an integer from 1 to 1024; got 0/);
    expect(() => new JsRunner({ maxIsolates: 2.5 })).toThrow(/JsRunner option maxIsolates must be an integer/);
    expect(() => new JsRunner({ longCallMs: -1 })).toThrow(/JsRunner option longCallMs must be an integer from 1 to 3600000; got -1/);
  });
});

describe('a program waiting on the tools it called', () => {
  it('does not hold the only isolate of the rotation from another program', async () => {
    const held = deferred<void>();
    let heldCalled: () => void = () => {};
    const called = new Promise<void>((resolve) => {
      heldCalled = resolve;
    });
    const fake = new FakeRunner({
      'demo.held': async () => {
        heldCalled();
        await held.promise;
        return { released: true };
      },
    });
    project = tempProject({ 'tool.js': QUICK, 'demo.held.json': definition({ id: 'demo.held' }) });
    engine = await openEngine(project, {
      // longCallMs far off: only the program's waiting on demo.held may let the second one in.
      runners: [fake, new CodeRunner({ processes: 1, rotation: 1, longCallMs: 600_000 })],
      grants: ['exec.js'],
    });
    const e = engine;
    const first = e.call('code.run', { code: 'return await tools.demo.held({});' });
    await called;
    // The first program's isolate is the rotation's only one, and it waits on demo.held, which is
    // released only once the second program has answered: the second needs an isolate of its own.
    const second = await e.call('code.run', { code: 'return 2;' });
    expect(dataOf(second)).toBe(2);
    held.resolve();
    expect(dataOf(await first)).toEqual({ released: true });
  });
});

describe('the isolates of a JS sandbox process', () => {
  it('answers while a tool computes on an isolate whose warm context was being made', async () => {
    const e = await jsProject(new JsRunner({ processes: 1, maxIsolates: 1 }));
    dataOf(await e.call('spin', { ms: 0 }));
    // The call just ended: its isolate is making the next warm context when the spinning call takes
    // it. The sandbox's main thread must not wait on that isolate to finish the context meanwhile.
    const ends: string[] = [];
    const spin = e.call('spin', { ms: 3000 }).then((r) => {
      ends.push('spin');
      return r;
    });
    await e.status();
    ends.push('status');
    dataOf(await spin);
    expect(ends).toEqual(['status', 'spin']);
  });
});
