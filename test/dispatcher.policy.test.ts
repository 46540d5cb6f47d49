import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Engine, ErrResult, Policy, RunContext, ToolResult } from '../src/index.js';
import { deferred, definition, FakeRunner, openEngine, type TempProject, TRIVIAL_JS, tempProject, untilAborted } from './support/project.js';

/**
 * Policy is enforced by the dispatcher whatever the runner, so these tests drive it with a fake
 * "js-runner" whose tools wait on gates the test opens. Nothing here measures time: a deadline is
 * only ever checked by its outcome.
 */

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

async function setup(
  policy: Partial<Policy>,
  behaviours: ConstructorParameters<typeof FakeRunner>[0],
  tools: Record<string, Record<string, unknown>> = {},
) {
  const files: Record<string, string> = { 'tool.js': TRIVIAL_JS };
  for (const id of Object.keys(behaviours)) files[`${id}.json`] = definition({ id, permissions: ['exec.js', 'vfs.read', 'vfs.write'], ...tools[id] });
  project = tempProject(files);
  const fake = new FakeRunner(behaviours);
  engine = await openEngine(project, { runners: [fake], policy });
  return { engine, fake };
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

const started = (fake: FakeRunner, id: string) => fake.started.filter((s) => s === id).length;

describe('concurrency', () => {
  it('queues past the limit and answers BUSY (retryable) past the queue', async () => {
    const gate = deferred();
    const { engine, fake } = await setup(
      { concurrency: 1, tool_concurrency: 1, queue_length: 1 },
      { 'slow.a': () => gate.promise.then(() => 'done') },
    );
    const first = engine.call('slow.a', {});
    const second = engine.call('slow.a', {});
    await vi.waitFor(() => expect(started(fake, 'slow.a')).toBe(1));
    const third = failed(await engine.call('slow.a', {}));
    expect(third).toMatchObject({ stage: 'execution', code: 'BUSY', retryable: true });
    expect(third.details).toEqual({ running: 1, queued: 1, queue_length: 1 });
    expect(third.message).toContain('retry later');
    expect(started(fake, 'slow.a')).toBe(1);
    gate.resolve();
    expect(await first).toMatchObject({ ok: true, data: 'done' });
    expect(await second).toMatchObject({ ok: true, data: 'done' });
    expect(started(fake, 'slow.a')).toBe(2);
    // The queue has drained: the next call is accepted again.
    expect(await engine.call('slow.a', {})).toMatchObject({ ok: true });
  });

  it('holds a tool at its own limit without holding other tools', async () => {
    const gate = deferred();
    const { engine, fake } = await setup(
      { concurrency: 4, tool_concurrency: 1, queue_length: 4 },
      { 'slow.a': () => gate.promise.then(() => 'a'), 'quick.b': () => 'b' },
    );
    const a1 = engine.call('slow.a', {});
    const a2 = engine.call('slow.a', {});
    await vi.waitFor(() => expect(started(fake, 'slow.a')).toBe(1));
    // slow.a's second call waits in the queue; quick.b has a free slot and must not wait behind it.
    const b = engine.call('quick.b', {});
    await vi.waitFor(() => expect(started(fake, 'quick.b')).toBe(1));
    expect(await b).toMatchObject({ ok: true, data: 'b' });
    expect(started(fake, 'slow.a')).toBe(1);
    gate.resolve();
    expect([await a1, await a2].map((r) => r.ok)).toEqual([true, true]);
  });

  it('holds every tool at the global limit, and runs the queue in order', async () => {
    const gates = new Map<string, { resolve: () => void }>();
    const order: string[] = [];
    const hold = (ctx: RunContext) => {
      const tag = (ctx.input as { tag: string }).tag;
      order.push(tag);
      const gate = deferred();
      gates.set(tag, gate);
      return gate.promise.then(() => tag);
    };
    const { engine } = await setup({ concurrency: 2, tool_concurrency: 2, queue_length: 2 }, { 'slow.a': hold, 'slow.b': hold });
    const calls = [
      engine.call('slow.a', { tag: 'a1' }),
      engine.call('slow.b', { tag: 'b1' }),
      engine.call('slow.b', { tag: 'b2' }),
      engine.call('slow.a', { tag: 'a2' }),
    ];
    await vi.waitFor(() => expect(order).toEqual(['a1', 'b1']));
    expect(failed(await engine.call('slow.b', { tag: 'b3' })).code).toBe('BUSY');
    gates.get('a1')?.resolve();
    await vi.waitFor(() => expect(order).toEqual(['a1', 'b1', 'b2']));
    gates.get('b1')?.resolve();
    await vi.waitFor(() => expect(order).toEqual(['a1', 'b1', 'b2', 'a2']));
    gates.get('b2')?.resolve();
    gates.get('a2')?.resolve();
    expect((await Promise.all(calls)).map((r) => (r.ok ? r.data : r.error.code))).toEqual(['a1', 'b1', 'b2', 'a2']);
  });

  it('frees a queue place when a waiting call is cancelled', async () => {
    const gate = deferred();
    const { engine, fake } = await setup(
      { concurrency: 1, tool_concurrency: 1, queue_length: 1 },
      { 'slow.a': () => gate.promise.then(() => 'done') },
    );
    const running = engine.call('slow.a', {});
    await vi.waitFor(() => expect(started(fake, 'slow.a')).toBe(1));
    const controller = new AbortController();
    const waiting = engine.call('slow.a', {}, { signal: controller.signal });
    controller.abort();
    const cancelled = failed(await waiting);
    expect(cancelled).toMatchObject({ stage: 'execution', code: 'CANCELLED', retryable: false });
    expect(cancelled.message).toContain('while waiting for a free slot');
    const next = engine.call('slow.a', {});
    gate.resolve();
    expect((await running).ok).toBe(true);
    expect((await next).ok).toBe(true);
    expect(started(fake, 'slow.a')).toBe(2);
  });
});

describe('deadlines and cancellation', () => {
  it('stops a tool at its timeout_ms with TIMEOUT (retryable) and aborts its signal', async () => {
    const { engine, fake } = await setup(
      {},
      { 'hang.forever': (ctx) => untilAborted(ctx.signal) },
      { 'hang.forever': { limits: { timeout_ms: 50 } } },
    );
    const error = failed(await engine.call('hang.forever', {}));
    expect(error).toMatchObject({ stage: 'execution', code: 'TIMEOUT', retryable: true, details: { timeout_ms: 50 } });
    expect(error.message).toBe('hang.forever did not finish within 50 ms');
    expect(fake.contexts[0]?.signal.aborted).toBe(true);
  });

  it('lets a call shorten the timeout, never lengthen it', async () => {
    const { engine } = await setup(
      {},
      { 'hang.forever': (ctx) => untilAborted(ctx.signal), 'hang.default': (ctx) => untilAborted(ctx.signal) },
      { 'hang.forever': { limits: { timeout_ms: 80 } } },
    );
    expect(failed(await engine.call('hang.forever', {}, { timeout_ms: 600_000 })).details).toEqual({ timeout_ms: 80 });
    expect(failed(await engine.call('hang.forever', {}, { timeout_ms: 20 })).details).toEqual({ timeout_ms: 20 });
    expect(failed(await engine.call('hang.default', {}, { timeout_ms: 20 })).details).toEqual({ timeout_ms: 20 });
  });

  it('applies the policy timeout_ms to tools that set none', async () => {
    const { engine } = await setup({ timeout_ms: 40 }, { 'hang.default': (ctx) => untilAborted(ctx.signal) });
    expect(failed(await engine.call('hang.default', {}))).toMatchObject({ code: 'TIMEOUT', details: { timeout_ms: 40 } });
  });

  it('cancels a running call through its AbortSignal', async () => {
    const { engine, fake } = await setup({}, { 'hang.forever': (ctx) => untilAborted(ctx.signal) });
    const controller = new AbortController();
    const pending = engine.call('hang.forever', {}, { signal: controller.signal });
    await vi.waitFor(() => expect(fake.started).toHaveLength(1));
    controller.abort();
    const error = failed(await pending);
    expect(error).toMatchObject({ stage: 'execution', code: 'CANCELLED', retryable: false });
    expect(fake.contexts[0]?.signal.aborted).toBe(true);
  });

  it('does not start a call whose signal is already aborted', async () => {
    const { engine, fake } = await setup({}, { 'quick.b': () => 'b' });
    const error = failed(await engine.call('quick.b', {}, { signal: AbortSignal.abort() }));
    expect(error).toMatchObject({ stage: 'execution', code: 'CANCELLED' });
    expect(fake.started).toEqual([]);
  });

  it('releases the slot of a timed-out call', async () => {
    const { engine } = await setup(
      { concurrency: 1, tool_concurrency: 1, queue_length: 1 },
      { 'hang.forever': (ctx) => untilAborted(ctx.signal), 'quick.b': () => 'b' },
      { 'hang.forever': { limits: { timeout_ms: 30 } } },
    );
    expect(failed(await engine.call('hang.forever', {})).code).toBe('TIMEOUT');
    expect(await engine.call('quick.b', {})).toMatchObject({ ok: true, data: 'b' });
  });

  it('keeps none of the writes of a call that timed out or was cancelled', async () => {
    const { engine, fake } = await setup(
      {},
      {
        'write.hang': (ctx) => {
          ctx.vfs.write('/partial.txt', 'half');
          return untilAborted(ctx.signal);
        },
      },
      { 'write.hang': { limits: { timeout_ms: 30 } } },
    );
    expect(failed(await engine.call('write.hang', {})).code).toBe('TIMEOUT');
    expect(engine.vfs.exists('/partial.txt')).toBe(false);
    const controller = new AbortController();
    const pending = engine.call('write.hang', {}, { signal: controller.signal, timeout_ms: 10_000 });
    await vi.waitFor(() => expect(fake.started).toHaveLength(2));
    controller.abort();
    expect(failed(await pending).code).toBe('CANCELLED');
    expect(engine.vfs.exists('/partial.txt')).toBe(false);
  });

  it('stops work a tool left running after it returned: signal aborted, VFS sealed', async () => {
    let late: (() => unknown) | null = null;
    const { engine, fake } = await setup(
      {},
      {
        'leaves.work': (ctx) => {
          late = () => ctx.vfs.write('/late.txt', 'too late');
          return 'returned';
        },
      },
    );
    expect(await engine.call('leaves.work', {})).toMatchObject({ ok: true, data: 'returned' });
    expect(fake.contexts[0]?.signal.aborted).toBe(true);
    expect(() => (late as unknown as () => unknown)()).toThrow(/The call has ended/);
    expect(engine.vfs.exists('/late.txt')).toBe(false);
  });
});
