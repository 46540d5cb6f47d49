// The supervision both sandbox processes share (runners/shared/supervision.ts), on its own: the JS and
// Python runner suites run it against real processes (cancel, timeouts, crashes, denials).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { StartBackoff, SupervisedCalls, serveVfs } from '../runners/shared/supervision.js';
import { ToolFailure } from '../src/errors.js';
import type { RunContext } from '../src/runner.js';

function context(vfs: Partial<RunContext['vfs']> = {}): { ctx: RunContext; abort: AbortController } {
  const abort = new AbortController();
  return { ctx: { signal: abort.signal, vfs, limits: { memory_mb: 64 } } as unknown as RunContext, abort };
}

function harness() {
  const log: string[] = [];
  const calls = new SupervisedCalls<{ tag: string }>({
    graceMs: 50,
    kill: () => log.push('kill'),
    stop: (id) => log.push(`stop ${id}`),
    busy: () => log.push('busy'),
    idle: () => log.push('idle'),
  });
  return { calls, log };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('SupervisedCalls', () => {
  it('numbers calls, keeps them busy until the sandbox ends them, and idles when none is left', async () => {
    const { calls, log } = harness();
    const sent: number[] = [];
    const a = calls.open(context().ctx, { tag: 'a' }, (id) => sent.push(id));
    const b = calls.open(context().ctx, { tag: 'b' }, (id) => sent.push(id));
    expect(sent).toEqual([1, 2]);
    expect(calls.get(2)?.tag).toBe('b');
    calls.finish(1)?.resolve('one');
    expect(log).toEqual(['busy', 'busy']);
    calls.finish(2)?.resolve('two');
    expect(log).toEqual(['busy', 'busy', 'idle']);
    expect(await Promise.all([a, b])).toEqual(['one', 'two']);
    expect(calls.finish(2)).toBeUndefined();
  });

  it('settles a cancelled call at once, asks the sandbox to stop it, and kills the process if it does not', async () => {
    vi.useFakeTimers();
    const { calls, log } = harness();
    const { ctx, abort } = context();
    const promise = calls.open(ctx, { tag: 'x' }, () => {});
    abort.abort();
    await expect(promise).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(log).toEqual(['busy', 'stop 1']);
    vi.advanceTimersByTime(49);
    expect(log).not.toContain('kill');
    vi.advanceTimersByTime(1);
    expect(log).toContain('kill');
  });

  it('does not kill a process that ended the settled call within the grace period', async () => {
    vi.useFakeTimers();
    const { calls, log } = harness();
    const promise = calls.open(context().ctx, { tag: 'x' }, () => {});
    calls.settle(1, new ToolFailure('execution', 'DENIED', 'no'));
    await expect(promise).rejects.toMatchObject({ code: 'DENIED' });
    const entry = calls.finish(1);
    expect(entry?.settled).toBe(true);
    vi.advanceTimersByTime(1_000);
    expect(log).not.toContain('kill');
  });

  it('fails every running call when the process dies, telling each how many ran', async () => {
    const { calls } = harness();
    const promises = [0, 1, 2].map(() => calls.open(context().ctx, { tag: 'x' }, () => {}));
    calls.settle(3, new ToolFailure('execution', 'TIMEOUT', 'late'));
    calls.failAll((_, running) => new ToolFailure('execution', 'UNAVAILABLE', `gone with ${running}`));
    const outcomes = await Promise.allSettled(promises);
    expect(outcomes.map((o) => (o as PromiseRejectedResult).reason.message)).toEqual(['gone with 2', 'gone with 2', 'late']);
    expect(calls.size).toBe(0);
  });
});

describe('serveVfs', () => {
  it('answers, refuses unknown operations and ended calls, and ends the call on a denial', async () => {
    const { calls, log } = harness();
    const deny = () => {
      throw new ToolFailure('permission', 'DENIED', 'outside the scope');
    };
    const { ctx } = context({ exists: () => true, read: deny } as unknown as RunContext['vfs']);
    const promise = calls.open(ctx, { tag: 'x' }, () => {});
    expect(serveVfs(calls, 1, 'exists', ['/a'], () => {})).toEqual({ ok: true, value: true });
    expect(serveVfs(calls, 1, 'chmod', ['/a'], () => {})).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT' } });
    const stopped: string[] = [];
    expect(serveVfs(calls, 1, 'read', ['/secret'], (f) => stopped.push(f.code))).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    expect(stopped).toEqual(['DENIED']);
    await expect(promise).rejects.toMatchObject({ code: 'DENIED' });
    expect(serveVfs(calls, 1, 'exists', ['/a'], () => {})).toMatchObject({ ok: false, error: { code: 'CANCELLED' } });
    expect(serveVfs(calls, 9, 'exists', ['/a'], () => {})).toMatchObject({ ok: false, error: { code: 'CANCELLED' } });
    calls.finish(1);
    expect(log.at(-1)).toBe('idle');
  });
});

describe('StartBackoff', () => {
  it('holds a failed start for its window, then lets a start be tried', () => {
    vi.useFakeTimers();
    const backoff = new StartBackoff(100);
    expect(backoff.blocking()).toBeNull();
    backoff.failedWith('no interpreter');
    expect(backoff.blocking()).toBe('no interpreter');
    vi.advanceTimersByTime(100);
    expect(backoff.blocking()).toBeNull();
    expect(backoff.failed).toBe(true);
    backoff.succeeded();
    expect(backoff.failed).toBe(false);
  });
});
