import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf, jsEngine } from './support/js-engine.js';

// The sandbox gives isolated-vm no timeout of its own for the tasks that run tool code: the call's
// deadline timer in the sandbox process disposes the isolate. These check that the deadline alone
// stops tool code wherever it runs, and that it does so by disposing the isolate, not the process.

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

const sandboxPid = async (engine: Engine) => (await engine.status()).runners['js-runner']?.pid;

describe('deadline without isolated-vm timeouts', () => {
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
    expect(await sandboxPid(hostile)).toBe(pid);
  });

  it('stops a top-level loop and a loop in the tool, and the next calls still run', async () => {
    const runs = await Promise.all([hostile.call('toplevel-loop', {}), hostile.call('timeouts', { kind: 'cpu-loop' })]);
    for (const result of runs) expect(errorOf(result)).toMatchObject({ code: 'TIMEOUT' });
    const after = await Promise.all(Array.from({ length: 4 }, () => hostile.call('escape', { attack: 'own-stack' })));
    for (const result of after) expect(dataOf(result)).toEqual({ findings: [] });
  });
});
