import { get as httpGet } from 'node:http';
import { connect } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * Slow clients against a real gateway on 127.0.0.1 with short timeouts: a request trickled a byte at a
 * time is answered 408 and closed once its time is up, headers or body (without a timeout a body sent a
 * byte every 2 s was still open after 70 s), while what the server sends for long (event streams, MCP
 * streams, a long tool run) is not cut.
 */

const HEADERS_MS = 500;
const REQUEST_MS = 1000;

const BUSY_JS =
  'export default async function run(input) { const end = Date.now() + input.ms; while (Date.now() < end) {} return { waited: input.ms }; }\n';

let project: TempProject;
let gateway: Gateway;
let base: string;
let port: number;

beforeAll(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({ id: 'demo.echo' }),
    'busy.js': BUSY_JS,
    'busy.json': definition({ id: 'demo.busy', entry: 'busy.js' }),
  });
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    limits: { headers_timeout_ms: HEADERS_MS, request_timeout_ms: REQUEST_MS },
    engineOptions: { persist: false, watch: false },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  port = Number(new URL(base).port);
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

/**
 * Sends `head` at once, then `trickle` one byte every 100 ms, until the server closes the connection or
 * everything is sent. Resolves with what the server answered and how much of the trickle it took.
 */
function trickle(head: string, trickled: string): Promise<{ answer: string; sent: number; closedEarly: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    let sent = 0;
    let timer: NodeJS.Timeout | undefined;
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      answer += chunk;
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ answer, sent, closedEarly: sent < trickled.length });
    });
    socket.on('connect', () => {
      socket.write(head);
      timer = setInterval(() => {
        if (sent === trickled.length || socket.destroyed) {
          clearInterval(timer);
          if (!socket.destroyed) socket.end();
          return;
        }
        socket.write(trickled[sent++] as string);
      }, 100);
    });
    setTimeout(() => reject(new Error('the trickle outlasted the test')), 60_000).unref();
  });
}

function envelopeOf(answer: string): { error?: { code: string; stage: string; message: string } } {
  return JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
}

describe('a slow client', () => {
  it('trickling a body is answered 408 TIMEOUT and cut off, long before its body is done; nothing runs', async () => {
    const body = JSON.stringify({ input: { path: '/trickled.txt', content: 'x'.repeat(150) } });
    const head = `POST /v1/tools/fs.write:run HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    // 200 bytes at 10 a second would take 20 s: the request has 1 s.
    const { answer, sent, closedEarly } = await trickle(head, body);
    expect(closedEarly).toBe(true);
    expect(sent).toBeLessThan(body.length / 2);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(envelopeOf(answer).error).toMatchObject({ code: 'TIMEOUT', stage: 'transport' });
    expect(envelopeOf(answer).error?.message).toContain(`within ${REQUEST_MS} ms`);
    const read = await fetch(`${base}/v1/tools/fs.read:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"input":{"path":"/trickled.txt"}}',
    });
    expect(await read.json()).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
  }, 60_000);

  it('trickling headers is answered 408 and cut off', async () => {
    const { answer, closedEarly } = await trickle(`GET /v1/tools HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n`, `X-Slow: ${'a'.repeat(100)}\r\n\r\n`);
    expect(closedEarly).toBe(true);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(envelopeOf(answer).error).toMatchObject({ code: 'TIMEOUT' });
  }, 60_000);

  it('many trickling at once are all cut off, and the gateway answers others meanwhile', async () => {
    const head = `POST /v1/tools/demo.echo:run HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`;
    const slow = Array.from({ length: 20 }, () => trickle(head, `{"input":{"a":"${'b'.repeat(83)}"}}`));
    const quick = await fetch(`${base}/v1/tools/demo.echo:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"input":{"a":1}}',
    });
    expect(await quick.json()).toMatchObject({ ok: true, output: { a: 1 } });
    for (const { answer, closedEarly } of await Promise.all(slow)) {
      expect(closedEarly).toBe(true);
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    }
  }, 60_000);
});

describe('what the server sends for long', () => {
  it('an event stream open past the timeouts still delivers', async () => {
    const received: string[] = [];
    const stream = await new Promise<import('node:http').IncomingMessage>((resolve) => httpGet(`${base}/v1/events`, resolve));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => received.push(chunk));
    await new Promise((r) => setTimeout(r, 3 * REQUEST_MS));
    await fetch(`${base}/v1/tools/demo.echo:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"input":{"late":true}}',
    });
    const until = Date.now() + 15_000;
    while (!received.join('').includes('event: ToolResultEvent') && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
    stream.destroy();
    expect(received.join('')).toContain('event: ToolResultEvent');
  }, 60_000);

  it('a tool run longer than the request timeout is answered in full', async () => {
    const res = await fetch(`${base}/v1/tools/demo.busy:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: { ms: 3 * REQUEST_MS } }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true, output: { waited: 3 * REQUEST_MS } });
  }, 60_000);

  it('an MCP client’s GET stream open past the timeouts still brings notifications', async () => {
    const client = new Client({ name: 'timeouts', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    try {
      const heard: string[] = [];
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
        heard.push(n.params.uri);
      });
      const uri = `arium://${project.project}/vfs/later.txt`;
      await client.subscribeResource({ uri });
      await new Promise((r) => setTimeout(r, 3 * REQUEST_MS));
      // Written over plain HTTP: the notification can only come over the session's GET stream.
      await fetch(`${base}/v1/tools/fs.write:run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"input":{"path":"/later.txt","content":"x"}}',
      });
      const until = Date.now() + 15_000;
      while (heard.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
      expect(heard).toEqual([uri]);
    } finally {
      await client.close();
    }
  }, 60_000);
});

describe('the limits', () => {
  it('are checked when the gateway is made', async () => {
    const make = (limits: Record<string, number>) => createGateway({ workspace: project.workspace, project: project.project, limits });
    await expect(make({ request_timeout_ms: 0 })).rejects.toThrow(/request_timeout_ms must be a positive integer \(got 0\)/);
    await expect(make({ headers_timeout_ms: 5000, request_timeout_ms: 1000 })).rejects.toThrow(/headers_timeout_ms \(5000\) must not exceed/);
  });
});
