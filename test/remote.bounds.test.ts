// A rogue worker that tries to exhaust the engine's memory and hold its thread through messages in
// parts: parts of messages it never finishes, and many large reads at once that it never fetches.
// The engine is in this process: its memory and its timers are measured here.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { partBytes } from '../runners/remote/parts.js';
import { CallTransfers, Ledger } from '../runners/remote/transfers.js';
import type { Engine } from '../src/index.js';
import { REMOTE_LIMITS } from '../src/limits.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let nats: NatsServer;
let rogue: NatsConnection;
let project: TempProject;
let engine: Engine | null = null;

beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats.stop();
});
const workers = new Workers();
afterEach(async () => {
  await workers.closeAll();
  await engine?.close();
  engine = null;
  await rogue?.close();
  project?.remove();
});

const tools = {
  'note.json': definition({ id: 'note', entry: 'note.js', permissions: ['exec.js', 'vfs.read:/public/**'] }),
  'note.js': 'export default async function run() { return { ok: 1 }; }',
};

const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** What the engine's process keeps, after a full collection: its heap, and what lives outside it (buffers, large strings). */
function retained(): number {
  gc();
  gc();
  const usage = process.memoryUsage();
  return usage.heapUsed + usage.external;
}

/** How late a 20 ms timer ran at worst while `watch` was on. */
function lateness(): { stop(): number } {
  let worst = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last - 20);
    last = now;
  }, 20);
  return {
    stop() {
      clearInterval(timer);
      return worst;
    },
  };
}

/**
 * Joins the queue group as a worker would; with its call, runs `attack` (its requests on the call's
 * inbox), lets the test measure, then ends the call with a claimed success.
 */
async function rogueWorker(
  attack: (ask: (m: unknown) => Promise<Record<string, unknown>>) => Promise<void>,
): Promise<{ attacked: Promise<void>; finish: () => void }> {
  const { connect } = await import('@nats-io/transport-node');
  rogue = await connect({ servers: nats.url });
  let attacked: (() => void) | null = null;
  let failed: ((error: unknown) => void) | null = null;
  const done = new Promise<void>((resolve, reject) => {
    attacked = resolve;
    failed = reject;
  });
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => (finish = resolve));
  rogue.subscribe('arium.test.run.js-runner', {
    queue: 'arium.test.workers',
    callback: (_e, msg) => {
      const inbox = String((JSON.parse(msg.string()) as { inbox: unknown }).inbox);
      const ask = async (m: unknown) =>
        JSON.parse((await rogue.request(inbox, json({ worker: 'rogue', host: 'h', ...(m as object) }), { timeout: 30_000 })).string());
      void (async () => {
        const beat = setInterval(() => rogue.publish(inbox, json({ t: 'alive', worker: 'rogue', host: 'h' })), 100);
        try {
          await attack(ask);
          attacked?.();
          await finished;
        } catch (error) {
          failed?.(error);
        } finally {
          clearInterval(beat);
          rogue.publish(inbox, json({ t: 'done', worker: 'rogue', host: 'h', ok: true, data: {}, logs: [], intrusions: [], meta: {} }));
        }
      })();
    },
  });
  await rogue.flush();
  return { attacked: done, finish: () => finish() };
}

/** Runs `requests` at most `width` at a time; their answers in order. */
async function inBatches<T>(requests: Array<() => Promise<T>>, width: number): Promise<T[]> {
  const answers: T[] = [];
  for (let i = 0; i < requests.length; i += width) answers.push(...(await Promise.all(requests.slice(i, i + width).map((r) => r()))));
  return answers;
}

describe('a rogue worker cannot exhaust the engine', () => {
  it('with parts of messages it never finishes: refused past the bounds, reported, memory bounded', async () => {
    project = tempProject(tools, 'arium-remote-');
    const part = Buffer.alloc(partBytes(1024 * 1024), 7).toString('base64');
    const answers: Record<string, unknown>[] = [];
    const rogueOf = await rogueWorker(async (ask) => {
      // 150 parts of one message (117 MB), then 600 messages of one part each (470 MB).
      const one = Array.from({ length: 150 }, (_, index) => () => ask({ t: 'put', key: 'one', index, data: part }));
      for (const request of one) answers.push(await request());
      const many = Array.from({ length: 600 }, (_, i) => () => ask({ t: 'put', key: `k${i}`, index: 0, data: part }));
      answers.push(...(await inBatches(many, 8)));
    });
    engine = await remoteEngine(project, nats.url);
    const security: string[] = [];
    engine.events.on('security', (e) => security.push(`${e.operation} ${e.reason}`));
    const before = retained();
    const call = engine.call('note', {});
    await rogueOf.attacked;
    const grown = retained() - before;
    rogueOf.finish();
    expect(await call).toMatchObject({ ok: true });

    const accepted = answers.filter((a) => a.t === 'ok').length;
    // The one message up to the call's bound in bytes (then dropped: it can no longer arrive whole), and
    // of the 600 as many as a call may have in transit.
    expect(accepted).toBe(Math.floor(REMOTE_LIMITS.call_transfer_bytes / partBytes(1024 * 1024)) + REMOTE_LIMITS.call_transfers);
    const refused = answers.filter((a) => a.t === 'refused') as Array<{ error: { code: string; message: string } }>;
    expect(refused).toHaveLength(750 - accepted);
    expect(refused[0]?.error).toMatchObject({ code: 'BUSY', message: expect.stringContaining('REMOTE_LIMITS.call_transfer_bytes') });
    expect(refused.at(-1)?.error).toMatchObject({ code: 'BUSY', message: expect.stringContaining('REMOTE_LIMITS.call_transfers') });
    expect(security).toHaveLength(1);
    expect(security[0]).toContain('worker rogue (h)');
    // Unbounded, the engine kept all of it (about 750 MB measured); bounded, at most call_transfer_bytes (96 MiB).
    expect(grown).toBeLessThan(200 * 1024 * 1024);
  }, 120_000);

  it('with many large reads at once that it never fetches: paced, refused past the requests it may queue, memory bounded, the thread free', async () => {
    project = tempProject(tools, 'arium-remote-');
    const answers: Record<string, unknown>[] = [];
    const refusedPast = 40 + 300 - REMOTE_LIMITS.call_transfers - REMOTE_LIMITS.call_requests;
    let all: Promise<unknown> = Promise.resolve();
    const until = async (n: number) => {
      for (let i = 0; i < 1500 && answers.length < n; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    };
    const rogueOf = await rogueWorker(async (ask) => {
      const asked = (m: unknown) =>
        ask(m).then((a) => {
          answers.push(a);
          return a;
        });
      const reads = Array.from({ length: 40 }, () => asked({ t: 'vfs', op: 'read', args: ['/public/big.bin', { encoding: 'bytes' }] }));
      await until(REMOTE_LIMITS.call_transfers);
      const stats = Array.from({ length: 300 }, () => asked({ t: 'vfs', op: 'stat', args: ['/public/big.bin'] }));
      await until(REMOTE_LIMITS.call_transfers + refusedPast);
      all = Promise.all([...reads, ...stats]);
    });
    engine = await remoteEngine(project, nats.url);
    engine.vfs.write('/public/big.bin', Buffer.alloc(8 * 1024 * 1024, 1));
    const before = retained();
    const watch = lateness();
    const call = engine.call('note', {});
    await rogueOf.attacked;
    const late = watch.stop();
    const grown = retained() - before;
    rogueOf.finish();
    expect(await call).toMatchObject({ ok: true });
    await all;

    // As many answers in parts as a call may hold; the other reads wait their turn, which never comes.
    expect(answers.filter((a) => a.t === 'parts')).toHaveLength(REMOTE_LIMITS.call_transfers);
    const busy = answers.filter((a) => a.t === 'vfs' && a.ok === false && (a.error as { code: string }).code === 'BUSY');
    expect(busy).toHaveLength(refusedPast);
    expect(busy[0]?.error).toMatchObject({ message: expect.stringContaining('REMOTE_LIMITS.call_requests') });
    // What still waited when the call ended is told so.
    expect(answers.filter((a) => a.t === 'ended')).toHaveLength(REMOTE_LIMITS.call_requests);
    // Unbounded, the engine kept 40 answers of 11 MB each (about 560 MB measured) and held its thread for seconds.
    expect(grown).toBeLessThan(250 * 1024 * 1024);
    expect(late).toBeLessThan(3000);
  }, 120_000);
});

describe('an honest worker', () => {
  it('is served every one of many large reads at once, paced', async () => {
    project = tempProject(
      {
        'many.json': definition({ id: 'many', entry: 'many.js', permissions: ['exec.js', 'vfs.read:/public/**'] }),
        'many.js': `export default async function run(input, ctx) {
          const reads = Array.from({ length: input.count }, (_, i) => ctx.vfs.read('/public/f' + i + '.bin', { encoding: 'bytes' }));
          const got = await Promise.allSettled(reads);
          return { fulfilled: got.filter((r) => r.status === 'fulfilled' && r.value.length === input.bytes).length };
        }`,
      },
      'arium-remote-',
    );
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    const count = 2 * REMOTE_LIMITS.call_transfers;
    for (let i = 0; i < count; i++) engine.vfs.write(`/public/f${i}.bin`, Buffer.alloc(2 * 1024 * 1024, i));
    expect(await engine.call('many', { count, bytes: 2 * 1024 * 1024 })).toMatchObject({ ok: true, data: { fulfilled: count } });
  }, 120_000);
});

describe('messages in parts left unfinished', () => {
  it('are dropped after REMOTE_LIMITS.transfer_idle_ms, and what they held is free again', () => {
    const ledger = new Ledger();
    const transfers = new CallTransfers(ledger, { ...REMOTE_LIMITS, transfer_idle_ms: 1000 });
    const part = Buffer.alloc(1000, 1).toString('base64');
    transfers.put('u1', 0, part, 1024 * 1024, 'w');
    transfers.download('d1', new Uint8Array(2 * 1024 * 1024), 1024 * 1024, 'w', 'a read');
    expect(ledger.held('w')).toBe(1000 + 2 * 1024 * 1024);
    transfers.sweep(Date.now() + 500);
    expect(transfers.count).toBe(2);
    transfers.sweep(Date.now() + 2000);
    expect(transfers.count).toBe(0);
    expect(ledger.held('w')).toBe(0);
    expect(transfers.take('u1')).toBeNull();
    expect(transfers.part('d1', 0, 1024 * 1024)).toBe('');
  });

  it('count against the worker across its calls: past REMOTE_LIMITS.worker_transfer_bytes the next is refused', () => {
    const ledger = new Ledger();
    const limits = { ...REMOTE_LIMITS, call_transfer_bytes: 3000, worker_transfer_bytes: 5000 };
    const [first, second, third, other] = [1, 2, 3, 4].map(() => new CallTransfers(ledger, limits)) as [
      CallTransfers,
      CallTransfers,
      CallTransfers,
      CallTransfers,
    ];
    const part = Buffer.alloc(1000, 1).toString('base64');
    for (let index = 0; index < 3; index++) first.put('a', index, part, 1024 * 1024, 'w');
    expect(() => first.put('a', 3, part, 1024 * 1024, 'w')).toThrow(/REMOTE_LIMITS\.call_transfer_bytes/);
    // A refused message can no longer arrive whole: what came of it is dropped at once.
    expect(ledger.held('w')).toBe(0);
    for (let index = 0; index < 3; index++) second.put('b', index, part, 1024 * 1024, 'w');
    third.put('c', 0, part, 1024 * 1024, 'w');
    third.put('c', 1, part, 1024 * 1024, 'w');
    expect(() => third.put('c', 2, part, 1024 * 1024, 'w')).toThrow(/calls of worker w .*REMOTE_LIMITS\.worker_transfer_bytes/);
    // Another worker's calls have their own room.
    other.put('d', 0, part, 1024 * 1024, 'v');
    expect(ledger.held('w')).toBe(3000);
    expect(() => second.put('b', 4, part, 1024 * 1024, 'w')).toThrow(/parts come in order, and the next is 3/);
    second.clear();
    expect(ledger.held('w')).toBe(0);
  });

  it('and the volume one call is sent through ctx.vfs: past REMOTE_LIMITS.call_read_bytes, QUOTA_EXCEEDED', () => {
    const transfers = new CallTransfers(new Ledger(), { ...REMOTE_LIMITS, call_read_bytes: 1000 });
    transfers.sent(600, 'ctx.vfs.read');
    transfers.sent(400, 'ctx.vfs.read');
    expect(() => transfers.sent(1, 'ctx.vfs.list')).toThrow(
      expect.objectContaining({ code: 'QUOTA_EXCEEDED', message: expect.stringContaining('ctx.vfs.list: a remote call may be sent 1000 bytes') }),
    );
  });
});
