import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { type TempProject, tempProject } from './support/project.js';

/**
 * The gateway under concurrent load, over real sockets: what its per-connection shortcuts and its
 * batched event streams must not change.
 */

let project: TempProject;
let gateway: Gateway;
let base: string;

beforeAll(async () => {
  project = tempProject();
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    // Smaller than the events of the test: live readers must not depend on the resumption buffer.
    eventBuffer: 64,
    engineOptions: { persist: false, watch: false },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

interface Sse {
  events: Array<{ id: number; event: string; data: Record<string, unknown> }>;
  close(): void;
}

function openEvents(url: string): Promise<Sse> {
  return new Promise((resolve, reject) => {
    const events: Sse['events'] = [];
    const req = httpRequest(url, { headers: { accept: 'text/event-stream' } }, (res) => {
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end = buffer.indexOf('\n\n');
        while (end !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const id = /^id: (\d+)$/m.exec(block)?.[1];
          const event = /^event: (.+)$/m.exec(block)?.[1];
          const data = /^data: (.+)$/m.exec(block)?.[1];
          if (event !== undefined) events.push({ id: Number(id ?? Number.NaN), event, data: JSON.parse(data ?? '{}') });
          end = buffer.indexOf('\n\n');
        }
      });
      resolve({ events, close: () => req.destroy() });
    });
    req.on('error', (error) => {
      if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(error);
    });
    req.end();
  });
}

async function waitFor(condition: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The events of `runs` a stream got, in the order it got them. */
function ofRuns(stream: Sse, runs: ReadonlySet<string>) {
  return stream.events.filter((e) => typeof e.data.run_id === 'string' && runs.has(e.data.run_id));
}

describe('/v1/events under concurrent calls', () => {
  it('every reader gets every call’s events, once each, in the log’s order, while many calls run at once', async () => {
    const readers = await Promise.all([openEvents(`${base}/v1/events`), openEvents(`${base}/v1/events`)]);
    const calls = 400;
    await gateway.project(project.project);
    // Writes and reads of 40 files at once, over many connections (fetch's pool opens one per call in flight).
    const answers = await Promise.all(
      Array.from({ length: calls }, async (_, i) => {
        const tool = i % 2 === 0 ? 'fs.write' : 'fs.list';
        const input = tool === 'fs.write' ? { path: `/load/f${i % 40}.txt`, content: `call ${i}` } : { path: '/' };
        const res = await fetch(`${base}/v1/tools/${tool}:run`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ input }),
        });
        return { status: res.status, body: (await res.json()) as { ok: boolean; tool_run_id: string } };
      }),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(calls).fill(200));
    expect(answers.every((a) => a.body.ok)).toBe(true);
    const runs = new Set(answers.map((a) => a.body.tool_run_id));
    expect(runs.size).toBe(calls);

    for (const reader of readers) await waitFor(() => ofRuns(reader, runs).length >= 2 * calls);
    // A moment more: an event sent twice would show up now.
    await new Promise((r) => setTimeout(r, 200));
    for (const reader of readers) {
      const seen = ofRuns(reader, runs);
      expect(seen).toHaveLength(2 * calls);
      // No event of the log skipped or repeated: the ids follow each other from the first to the last.
      const ids = reader.events.map((e) => e.id);
      expect(ids).toEqual(ids.map((_, i) => (ids[0] as number) + i));
      // Each call: its invocation, then its result, once each.
      const at = new Map<string, string[]>();
      for (const e of seen) at.set(e.data.run_id as string, [...(at.get(e.data.run_id as string) ?? []), e.event]);
      expect([...at.values()].every((types) => types.join() === 'ToolInvocationEvent,ToolResultEvent')).toBe(true);
      expect(at.size).toBe(calls);
    }
    // Both readers got the same events in the same order.
    expect(readers[0]?.events.map((e) => e.id)).toEqual(readers[1]?.events.map((e) => e.id));
    expect(readers[0]?.events.map((e) => e.data)).toEqual(readers[1]?.events.map((e) => e.data));
    for (const reader of readers) reader.close();
  });
});

describe('resuming /v1/events after the buffer wrapped around', () => {
  it('replays exactly the kept events, in order, after the gap, whatever Last-Event-ID says', async () => {
    const calls = 50;
    for (let i = 0; i < calls; i++) {
      await fetch(`${base}/v1/tools/fs.write:run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: { path: `/wrap/f${i}.txt`, content: `${i}` } }),
      });
    }
    // The log keeps 64 events: the 100 of these calls went round its ring more than once.
    const live = await openEvents(`${base}/v1/events?last_event_id=0`);
    await waitFor(() => live.events.filter((e) => e.event !== 'gap').length >= 64);
    live.close();
    const kept = live.events.filter((e) => e.event !== 'gap');
    expect(live.events[0]?.event).toBe('gap');
    expect(kept).toHaveLength(64);
    const last = kept[63]?.id as number;
    expect(kept.map((e) => e.id)).toEqual(kept.map((_, i) => last - 63 + i));
    expect(kept.at(-1)?.data.input).toMatchObject({ path: `/wrap/f${calls - 1}.txt`, content: `${calls - 1}` });

    const resume = async (lastEventId: string) => {
      const stream = await openEvents(`${base}/v1/events?last_event_id=${encodeURIComponent(lastEventId)}`);
      await new Promise((r) => setTimeout(r, 300));
      stream.close();
      return stream.events;
    };
    // A number that is no event's: the ones after it.
    expect((await resume(`${last - 3}.5`)).map((e) => e.id)).toEqual([last - 2, last - 1, last]);
    expect(await resume(String(last))).toEqual([]);
    expect(await resume(String(last + 1000))).toEqual([]);
    const fromBefore = await resume('-7');
    expect(fromBefore[0]).toMatchObject({ event: 'gap', data: { after: -7, resumed_at: last - 63 } });
    expect(fromBefore.slice(1).map((e) => e.id)).toEqual(kept.map((e) => e.id));
  });
});

/** Raw HTTP/1.1 requests on one keep-alive connection, answered one after another. */
function connection(address: string): { ask(head: string): Promise<number>; close(): void } {
  const { hostname, port } = new URL(address);
  const socket: Socket = connect(Number(port), hostname);
  let received = Buffer.alloc(0);
  let waiting: ((status: number) => void) | null = null;
  socket.on('data', (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
    // Each answer has a content-length (bytes): take one whole answer off the front.
    const end = received.indexOf('\r\n\r\n');
    if (end === -1) return;
    const head = received.subarray(0, end).toString('latin1');
    const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
    if (received.length < end + 4 + length) return;
    received = received.subarray(end + 4 + length);
    waiting?.(Number(head.slice(9, 12)));
  });
  return {
    ask: (head) =>
      new Promise((resolve) => {
        waiting = resolve;
        socket.write(`${head}\r\n\r\n`);
      }),
    close: () => socket.destroy(),
  };
}

describe('the host and origin checks on a keep-alive connection', () => {
  it('judges every request of a connection by its own headers, not by the ones let through before', async () => {
    const port = new URL(base).port;
    const conn = connection(base);
    try {
      const request = (host: string, more = '') => conn.ask(`GET /healthz HTTP/1.1\r\nHost: ${host}${more}`);
      expect(await request(`127.0.0.1:${port}`)).toBe(200);
      expect(await request(`127.0.0.1:${port}`)).toBe(200);
      // A rebinding name on the connection a loopback name opened is still refused, and so is a foreign origin.
      expect(await request(`evil.example:${port}`)).toBe(403);
      expect(await request(`127.0.0.1:${port}`, '\r\nOrigin: http://evil.example')).toBe(403);
      expect(await request(`127.0.0.1:${port}`, `\r\nOrigin: http://127.0.0.1:${port}`)).toBe(200);
      expect(await request(`127.0.0.1:${port}`, '\r\nOrigin: null')).toBe(403);
      expect(await request(`localhost:${port}`)).toBe(200);
      expect(await request(`evil.example:${port}`)).toBe(403);
    } finally {
      conn.close();
    }
  });
});
