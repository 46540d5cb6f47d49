// Workers that die, drain, or lose the server: every call ends with a result, none hangs. The SIGKILL
// and SIGTERM cases run real `arium worker` processes (bin/arium.js, from dist/: npm run build first).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine, ToolResult } from '../src/index.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

const BIN = new URL('../bin/arium.js', import.meta.url).pathname;

let nats: NatsServer;
const workers = new Workers();
const children: ChildProcess[] = [];
let project: TempProject;
let engine: Engine | null = null;
let cache: string;

beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats.stop();
});
afterEach(async () => {
  await engine?.close();
  engine = null;
  await workers.closeAll();
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  project?.remove();
  if (cache) rmSync(cache, { recursive: true, force: true });
});

const tools = {
  'wait.json': definition({ id: 'wait', entry: 'wait.js', permissions: ['exec.js', 'vfs.write:/out/**'], limits: { timeout_ms: 30_000 } }),
  // Atomics.wait sleeps without spinning a core.
  'wait.js': `export default async function run(input, ctx) {
    await ctx.vfs.write('/out/started.txt', 'yes');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, input.ms);
    return { slept: input.ms };
  }`,
};

/** A real worker process; resolves with it and its id once it has announced itself on stderr. */
function spawnWorker(extra: string[] = []): Promise<{ child: ChildProcess; id: string; stderr: () => string }> {
  cache ??= mkdtempSync(join(tmpdir(), 'arium-worker-proc-'));
  const child = spawn(
    process.execPath,
    [
      BIN,
      'worker',
      '--nats',
      nats.url,
      '--deployment',
      'test',
      '--runners',
      'js-runner',
      '--heartbeat-ms',
      '100',
      '--cache',
      join(cache, String(children.length)),
      ...extra,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  children.push(child);
  let err = '';
  return new Promise((resolve, reject) => {
    child.stderr?.on('data', (chunk) => {
      err += String(chunk);
      const found = /worker (\S+) on /.exec(err);
      if (found) resolve({ child, id: found[1] as string, stderr: () => err });
    });
    child.once('exit', (code) => reject(new Error(`worker exited (${code}): ${err}`)));
  });
}

async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>): Promise<T> {
  for (let i = 0; i < 400; i++) {
    const found = await probe();
    if (found) return found;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`gave up waiting for ${what}`);
}

async function liveWorkers(e: Engine): Promise<string[]> {
  return ((await e.status()).remote?.workers ?? []).map((w) => w.id);
}

function workerOf(result: ToolResult): string {
  return (result.meta as unknown as { worker: { id: string } }).worker.id;
}

describe('a remote worker', () => {
  it('killed with SIGKILL mid-call gives a transport error, nothing written; its heartbeats expire and the next call goes to the other', async () => {
    project = tempProject(tools, 'arium-remote-');
    const a = await spawnWorker();
    const b = await spawnWorker();
    engine = await remoteEngine(project, nats.url);
    const e = engine;
    await until('both workers', async () => (await liveWorkers(e)).length === 2);
    const pending = e.call('wait', { ms: 15_000 });
    const busy = await until('the busy worker', async () => (await e.status()).remote?.workers.find((w) => w.in_flight > 0));
    const [victim, survivor] = busy.id === a.id ? [a, b] : [b, a];
    victim.child.kill('SIGKILL');
    const result = await pending;
    expect(result).toMatchObject({
      ok: false,
      error: { stage: 'transport', code: 'UNAVAILABLE', retryable: true, details: { reason: 'worker-lost' } },
    });
    expect(e.vfs.exists('/out/started.txt')).toBe(false);
    await until('the dead worker to expire', async () => !(await liveWorkers(e)).includes(victim.id));
    expect(await liveWorkers(e)).toEqual([survivor.id]);
    const next = await e.call('wait', { ms: 1 });
    expect(next).toMatchObject({ ok: true });
    expect(workerOf(next)).toBe(survivor.id);
  });

  it('is not taken for lost while the engine’s own thread is too busy to read its keepalives', async () => {
    project = tempProject(tools, 'arium-remote-');
    await spawnWorker();
    engine = await remoteEngine(project, nats.url);
    const e = engine;
    await until('the worker', async () => (await liveWorkers(e)).length === 1);
    const pending = e.call('wait', { ms: 1500 });
    await until('the call to start', async () => (await e.status()).remote?.workers.some((w) => w.in_flight > 0));
    // 1.2 s without a turn of this thread's event loop (twice the 600 ms a worker may be silent here),
    // ended in the loop's check phase: its next turn runs the timers before it reads the socket.
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1200);
        resolve();
      }),
    );
    expect(await pending).toMatchObject({ ok: true, data: { slept: 1500 } });
  });

  it('sent SIGTERM finishes the call it runs, takes no new one, and leaves', async () => {
    project = tempProject(tools, 'arium-remote-');
    const w = await spawnWorker();
    engine = await remoteEngine(project, nats.url);
    const e = engine;
    await until('the worker', async () => (await liveWorkers(e)).length === 1);
    const pending = e.call('wait', { ms: 1500 });
    await until('the call to start', async () => (await e.status()).remote?.workers.some((x) => x.in_flight > 0));
    const exited = new Promise<number | null>((resolve) => w.child.once('exit', resolve));
    w.child.kill('SIGTERM');
    expect(await pending).toMatchObject({ ok: true, data: { slept: 1500 } });
    expect(await exited).toBe(0);
    expect(w.stderr()).toContain('draining');
    const after = await e.call('wait', { ms: 1 });
    expect(after).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', details: { reason: 'no-workers' } } });
    expect(await liveWorkers(e)).toEqual([]);
  });

  it('keeps working across a server restart: calls in flight and new ones fail fast while it is down, and succeed after', async () => {
    project = tempProject(tools, 'arium-remote-');
    const seen: string[] = [];
    await workers.start(nats.url, { onConnection: (event) => seen.push(event) });
    engine = await remoteEngine(project, nats.url);
    const e = engine;
    expect(await e.call('wait', { ms: 1 })).toMatchObject({ ok: true });
    const running = e.call('wait', { ms: 10_000 });
    await until('the call to start', async () => (await e.status()).remote?.workers.some((w) => w.in_flight > 0));
    await nats.stop();
    // The call in flight fails as soon as the connection is lost, not at its deadline.
    expect(await running).toMatchObject({ ok: false, error: { stage: 'transport', code: 'UNAVAILABLE', details: { reason: 'disconnected' } } });
    await until('the engine to notice', async () => (await e.status()).remote?.connected === false);
    const down = await e.call('wait', { ms: 1 });
    expect(down).toMatchObject({ ok: false, error: { stage: 'transport', code: 'UNAVAILABLE', details: { reason: 'disconnected' } } });
    await nats.start();
    const back = await until('a call to succeed again', async () => {
      const r = await e.call('wait', { ms: 1 });
      return r.ok ? r : null;
    });
    expect(back).toMatchObject({ ok: true, data: { slept: 1 } });
    // The worker reconnected by itself too, and said so.
    expect(seen.slice(0, 2)).toEqual(['disconnected', 'reconnected']);
  });

  it('drops the late answer of a call the engine timed out, and commits nothing of it', async () => {
    project = tempProject(tools, 'arium-remote-');
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    const r = await engine.call('wait', { ms: 1500 }, { timeout_ms: 300 });
    expect(r).toMatchObject({ ok: false, error: { code: 'TIMEOUT' } });
    expect(engine.vfs.exists('/out/started.txt')).toBe(false);
    // The worker keeps its own deadline: it stops the tool too, and its answer, if any, is dropped.
    expect(await engine.call('wait', { ms: 1 })).toMatchObject({ ok: true });
    expect(engine.vfs.exists('/out/started.txt')).toBe(true);
  });
});
