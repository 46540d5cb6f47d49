import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine, ToolResult } from '../src/index.js';
import { dataOf, errorOf, jsEngine } from './support/js-engine.js';
import { remote } from './support/target.js';

// Resource limits of the JS runner, each exercised by a real hostile tool (fixtures/js/hostile). No
// test asserts speed; a deadline is only checked to have fired, within a generous margin.
// test/remote.js-suite.test.ts runs them on a remote worker: the calls' outcomes are checked there too;
// what the runner's status says of its sandbox process (pid, counters) only here, where it runs.

const local = !remote();

let hostile: Engine;

beforeAll(async () => {
  hostile = await jsEngine('hostile');
});

afterAll(async () => {
  await hostile.close();
});

/** The definition's timeout (fixtures/js/hostile/tools/timeouts.json) and a margin for a busy 2-core machine. */
const TIMEOUT_MS = 1500;
const MARGIN_MS = 5000;

/** Stopping a call's tool code disposes its isolate, never the sandbox process: the process keeps its pid. */
const sandboxPid = async (engine: Engine) => (await engine.status()).runners['js-runner']?.pid;

async function timed(call: Promise<ToolResult>): Promise<{ result: ToolResult; ms: number }> {
  const started = performance.now();
  const result = await call;
  return { result, ms: performance.now() - started };
}

describe('time', () => {
  const kinds = ['cpu-loop', 'regex', 'atomics-wait', 'microtask-flood', 'never-settles', 'awaiting-host'];

  it(`stops ${kinds.join(', ')} and a top-level loop with TIMEOUT, all at once`, async () => {
    const runs = await Promise.all([...kinds.map((kind) => timed(hostile.call('timeouts', { kind }))), timed(hostile.call('toplevel-loop', {}))]);
    for (const [i, { result, ms }] of runs.entries()) {
      // The microtask flood keeps one more promise alive per turn: on a loaded machine its heap can pass
      // memory_mb before the deadline (seen with the suite on a worker). Either ends it in its sandbox.
      if (kinds[i] === 'microtask-flood' && errorOf(result).code === 'MEMORY_LIMIT') continue;
      expect(errorOf(result)).toMatchObject({ code: 'TIMEOUT', stage: 'execution', retryable: true });
      expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
      expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }
  });

  it('stops a loop that starts in the task handing the tool a VFS answer, and keeps the sandbox process', async () => {
    expect(dataOf(await hostile.call('escape', { attack: 'own-stack' }))).toEqual({ findings: [] });
    const pid = await sandboxPid(hostile);
    const started = performance.now();
    const result = await hostile.call('timeouts', { kind: 'loop-after-host' });
    const ms = performance.now() - started;
    expect(errorOf(result)).toMatchObject({ code: 'TIMEOUT', stage: 'execution', retryable: true });
    expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    expect(dataOf(await hostile.call('escape', { attack: 'own-stack' }))).toEqual({ findings: [] });
    if (local) expect(await sandboxPid(hostile)).toBe(pid);
  });

  it('stops a top-level loop and a loop in the tool, and the next calls still run', async () => {
    const runs = await Promise.all([hostile.call('toplevel-loop', {}), hostile.call('timeouts', { kind: 'cpu-loop' })]);
    for (const result of runs) expect(errorOf(result)).toMatchObject({ code: 'TIMEOUT' });
    const after = await Promise.all(Array.from({ length: 4 }, () => hostile.call('escape', { attack: 'own-stack' })));
    for (const result of after) expect(dataOf(result)).toEqual({ findings: [] });
  });

  it('returns the result of a tool that leaves a loop or a microtask flood behind, and recovers the isolate', async () => {
    // A tool definition of its own with a long timeout: the claim is that the result comes back, not how fast.
    expect(dataOf(await hostile.call('after-return', { kind: 'flood-after-return' }))).toEqual({ returned: true });
    expect(dataOf(await hostile.call('after-return', { kind: 'loop-after-return' }))).toEqual({ returned: true });
    const after = await Promise.all(Array.from({ length: 8 }, () => hostile.call('escape', { attack: 'own-stack' })));
    for (const result of after) expect(dataOf(result)).toEqual({ findings: [] });
  });
});

describe('memory', () => {
  const bombs = [
    'heap-objects',
    'strings',
    'string-doubling',
    'array-buffers',
    'one-array-buffer',
    'wasm-memory',
    'wasm-memory-grow',
    'wasm-module-memory',
    'wasm-instances',
    'wasm-async',
    'resizable-array-buffers',
    'growable-shared-array-buffers',
    'resizable-by-other-routes',
    'intl-objects',
    'intl-segments',
    'intl-after-tampering',
  ];

  it.each(bombs)('%s ends with MEMORY_LIMIT', async (kind) => {
    const error = errorOf(await hostile.call('memory', { kind }));
    expect(error).toMatchObject({ code: 'MEMORY_LIMIT', stage: 'execution', details: { memory_mb: 32 } });
  });

  it('refuses a WebAssembly memory that declares no maximum', async () => {
    const error = errorOf(await hostile.call('memory', { kind: 'wasm-no-maximum' }));
    expect(error).toMatchObject({ code: 'TOOL_ERROR' });
    expect(error.message).toContain('must declare a maximum');
  });

  it('charges a resizable buffer its maximum: within the limit it works as in Node, over it the tool may catch the refusal', async () => {
    expect(dataOf(await hostile.call('memory', { kind: 'resizable-within-limit' }))).toEqual({
      resizable: true,
      byteLength: 1 << 19,
      maxByteLength: 1 << 20,
      refused: true,
      subclass: true,
      same: [true, true, true, true],
    });
  });

  it('charges Intl objects an estimate of what they hold outside the heap, and Intl works as in Node within the limit', async () => {
    expect(dataOf(await hostile.call('memory', { kind: 'intl-within-limit' }))).toEqual({
      date: '1/1/70',
      same: [true, true],
      words: ['hello', 'big', 'world'],
      sorted: ['a', 'b', 'C'],
      supported: ['en'],
      number: '1,234.5',
    });
  });

  it('keeps registered symbols to the call that made them: calls that each register 8 MB of them all succeed', async () => {
    // 49 calls on at most 16 isolates: some isolate serves four of them, and with the isolate's own
    // registry the fourth would start with 24 MB of the others' symbols in its 32 MB.
    for (let i = 0; i < 49; i++) {
      expect(dataOf(await hostile.call('memory', { kind: 'symbol-registry' }))).toEqual({ same: true, key: 'marker', wellKnown: null, plain: null });
    }
  }, 60_000);

  it('lets a tool catch a refused ArrayBuffer and go on within its limit', async () => {
    expect(dataOf(await hostile.call('memory', { kind: 'caught-array-buffer' }))).toEqual({ caught: true });
  });

  it.each(['array-fill', 'object-keys'])(
    'survives %s, which makes V8 give up on the whole sandbox process, and serves the next calls',
    async (kind) => {
      const before = await hostile.status();
      const pid = before.runners['js-runner']?.pid;
      const error = errorOf(await hostile.call('crash', { kind }));
      // On Node 22+ (V8 12.4+), Array.prototype.fill over a dictionary-mode array does not stop for the
      // termination isolated-vm requests at the heap limit: the isolate grows past it until V8's fatal
      // out-of-memory error, which on a busy machine can come after the definition's 20 s deadline
      // (measured on Node 24.21 with isolated-vm 6.2: 20-22 s, against 2-3 s on Node 20). Either way the
      // call ends contained and the next calls are served; on Node 20 it must be MEMORY_LIMIT.
      const lateOom = kind === 'array-fill' && Number(process.versions.node.split('.')[0]) >= 22;
      if (lateOom && error.code === 'TIMEOUT') expect(error).toMatchObject({ code: 'TIMEOUT', stage: 'execution' });
      else expect(error).toMatchObject({ code: 'MEMORY_LIMIT' });
      for (let i = 0; i < 3; i++) expect(dataOf(await hostile.call('escape', { attack: 'own-stack' }))).toEqual({ findings: [] });
      const after = await hostile.status();
      expect(after.runners['js-runner']?.available).toBe(true);
      if (error.code === 'MEMORY_LIMIT' && local) {
        // V8 reported a fatal out-of-memory error: the worker answered for the isolate, then was replaced.
        expect(error.message).toContain('the sandbox process is being replaced');
        expect(after.runners['js-runner']?.pid).not.toBe(pid);
      }
    },
    60_000,
  );

  it.runIf(local)('fails the running call and restarts when the sandbox process is killed outright', async () => {
    const pid = (await hostile.status()).runners['js-runner']?.pid as number;
    const pending = hostile.call('timeouts', { kind: 'never-settles' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    process.kill(pid, 'SIGKILL');
    const error = errorOf(await pending);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', retryable: true });
    expect(dataOf(await hostile.call('escape', { attack: 'own-stack' }))).toEqual({ findings: [] });
    expect((await hostile.status()).runners['js-runner']).toMatchObject({ available: true, process_crashes: expect.any(Number) });
  });
});

describe('the host', () => {
  it('bounds pending host calls: thousands of requests at once are refused past a cap, not queued without end', async () => {
    const codes = dataOf<Record<string, number>>(await hostile.call('flood', { kind: 'requests', count: 20_000 }));
    expect(codes.ok).toBeGreaterThan(0);
    expect(codes.ok).toBeLessThanOrEqual(300);
    expect(codes.BUSY).toBe(20_000 - (codes.ok ?? 0));
  });

  it('bounds the bytes of pending writes: past 64 MB per call they are refused with BUSY before they are copied out, and past 64 MB in flight from all calls they wait', async () => {
    const runs = await Promise.all([1, 2, 3].map(() => hostile.call('flood', { kind: 'big-writes', count: 40, mb: 8 })));
    for (const run of runs) {
      const { codes, busy } = dataOf<{ codes: Record<string, number>; busy: string }>(run);
      expect(codes.ok).toBeGreaterThan(0);
      expect(codes.ok).toBeLessThanOrEqual(8);
      expect(codes.BUSY).toBe(40 - (codes.ok ?? 0));
      expect(busy).toBe('More than 64 MB of VFS data is pending; await some operations first');
    }
    if (!local) return;
    const host = (await hostile.status()).runners['js-runner']?.host as Record<string, number>;
    // Three calls with 64 MB pending each: the sandbox let at most 64 MB of it travel to the engine at once.
    expect(host.peak_bytes_in_flight).toBeLessThanOrEqual(64 * 1024 * 1024);
  });

  it('paces large answers: many big reads at once are served one large answer at a time, all of them', async () => {
    expect(dataOf(await hostile.call('flood', { kind: 'big-reads', count: 16, mb: 20 }))).toEqual({ fulfilled: 16 });
    if (!local) return;
    const host = (await hostile.status()).runners['js-runner']?.host as Record<string, number>;
    // At most 16 MB of answers on the channel, or one larger answer alone (16 × 20 MB without pacing).
    expect(host.peak_answer_bytes).toBeGreaterThanOrEqual(20 * 1024 * 1024);
    expect(host.peak_answer_bytes).toBeLessThanOrEqual(20 * 1024 * 1024);
  });

  it('refuses, before copying them out, options far larger than any option needs and objects JSON would turn into something else', async () => {
    expect(dataOf(await hostile.call('flood', { kind: 'odd-arguments' }))).toEqual({
      huge: `INVALID_INPUT: ctx.vfs.list: argument 2 is ${(1 << 20) + 14} bytes of JSON; at most 65536 are taken`,
      date: 'INVALID_INPUT: ctx.vfs.write: argument 2 is an object that JSON turns into a string; pass that value itself',
    });
  });

  it('bounds the logs of a call', async () => {
    const result = await hostile.call('flood', { kind: 'logs', count: 50_000 });
    expect(dataOf(result)).toEqual({ logged: 50_000 });
    expect(result.meta.logs_dropped).toBeGreaterThan(0);
  });

  it('keeps serving other calls, JS and builtin, while hostile tools run', async () => {
    const order: string[] = [];
    const note = (label: string) => (result: ToolResult) => {
      order.push(label);
      return result;
    };
    const attacks = [
      hostile.call('timeouts', { kind: 'cpu-loop' }).then(note('hostile')),
      hostile.call('timeouts', { kind: 'microtask-flood' }).then(note('hostile')),
      hostile.call('timeouts', { kind: 'regex' }).then(note('hostile')),
    ];
    await new Promise((resolve) => setTimeout(resolve, 100));
    const others: Promise<ToolResult>[] = [];
    for (let i = 0; i < 20; i++) {
      others.push(hostile.call('escape', { attack: 'own-stack' }).then(note('js')));
      others.push(hostile.call('fs.write', { path: `/busy/${i}.txt`, content: 'x' }).then(note('builtin')));
    }
    for (const result of await Promise.all(others)) expect(result.ok).toBe(true);
    const outcomes = await Promise.all(attacks);
    const codes = outcomes.map((r) => (r.ok ? 'ok' : r.error.code));
    // The microtask flood keeps one more promise alive per turn: on Node 24, with 40 other calls
    // sharing the machine, its heap passed memory_mb before the 1.5 s deadline once in CI (MEMORY_LIMIT).
    // Either ends it inside its sandbox; what this test is about is that the others were served.
    expect([codes[0], codes[2]]).toEqual(['TIMEOUT', 'TIMEOUT']);
    expect(['TIMEOUT', 'MEMORY_LIMIT']).toContain(codes[1]);
    // Every benign call finished before the first hostile one gave up.
    expect(order.indexOf('hostile')).toBe(40);
  });
});
