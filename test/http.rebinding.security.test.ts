import { mkdirSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SecurityEvent } from '../src/events.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * DNS rebinding and cross-site pages against a real gateway on 127.0.0.1 with its defaults (no API
 * key): what a page at http://evil.example re-pointed at 127.0.0.1 sends is `Host: evil.example:<port>`,
 * and what a page of another site sends is its `Origin`. Each is refused on every route, says how to
 * allow it, and is reported as a SecurityEvent; the gateway's own page and clients without a browser
 * go on working.
 */

let project: TempProject;
let gateway: Gateway;
let base: string;
let port: number;

beforeAll(async () => {
  project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
  mkdirSync(join(project.workspace, 'other', 'tools'), { recursive: true });
  writeFileSync(join(project.workspace, 'other', 'tools', 'tool.js'), TRIVIAL_JS);
  writeFileSync(join(project.workspace, 'other', 'tools', 'only.json'), definition({ id: 'other.only' }));
  gateway = await createGateway({ workspace: project.workspace, project: project.project, engineOptions: { persist: false, watch: false } });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  port = Number(new URL(base).port);
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** A request to the gateway on 127.0.0.1 with the headers a browser would send, `Host` included. */
function send(method: string, path: string, headers: Record<string, string>, body?: string, url = base): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method, headers, setHost: !('host' in headers) }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      // An event stream never ends: what it sends in its first second shows what it serves.
      if (res.headers['content-type']?.startsWith('text/event-stream')) setTimeout(() => res.destroy(), 1000);
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('close', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const json = { 'content-type': 'application/json' };
const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'page', version: '1' } },
});
const MCP_HEADERS = { ...json, accept: 'application/json, text/event-stream' };

describe('a foreign Host (DNS rebinding)', () => {
  it('cannot write a file, open an MCP session, or read the event stream; each refusal says how to allow the name', async () => {
    const evil = { host: `evil.example:${port}` };
    const write = await send('POST', '/v1/tools/fs.write:run', { ...evil, ...json }, JSON.stringify({ input: { path: '/pwned.txt', content: 'x' } }));
    expect(write.status).toBe(403);
    const body = JSON.parse(write.text);
    expect(body).toMatchObject({
      ok: false,
      error: { code: 'DENIED', stage: 'permission', details: { header: 'host', value: `evil.example:${port}` } },
    });
    expect(body.error.message).toContain('--allow-host evil.example');
    expect(body.error.message).toContain('DNS rebinding');

    const session = await send('POST', '/mcp', { ...evil, ...MCP_HEADERS }, INITIALIZE);
    expect(session.status).toBe(403);
    expect(session.headers['mcp-session-id']).toBeUndefined();
    expect(gateway.mcpSessions().sessions).toBe(0);
    const events = await send('GET', '/v1/events?last_event_id=0', { ...evil, accept: 'text/event-stream' });
    expect(events.status).toBe(403);
    expect(events.text).not.toContain('ToolResultEvent');

    // The file was not written: the same request by the gateway's own address says so.
    const read = await send('POST', '/v1/tools/fs.read:run', json, JSON.stringify({ input: { path: '/pwned.txt' } }));
    expect(JSON.parse(read.text)).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
  });

  it.each([
    ['GET', '/healthz'],
    ['GET', '/'],
    ['GET', '/assets/index.js'],
    ['GET', '/v1/openapi.json'],
    ['GET', '/v1/tools'],
    ['GET', '/v1/fs/list?path=/'],
    ['GET', '/p/other/'],
    ['GET', '/p/other/v1/tools'],
    ['GET', '/p/other/v1/events'],
    ['POST', '/p/other/mcp'],
    ['GET', '/no/such/route'],
  ])('%s %s is refused too', async (method, path) => {
    const answer = await send(
      method,
      path,
      { host: `rebind.attacker.test:${port}`, ...(method === 'POST' ? MCP_HEADERS : {}) },
      method === 'POST' ? INITIALIZE : undefined,
    );
    expect(answer.status).toBe(403);
    expect(JSON.parse(answer.text)).toMatchObject({ error: { code: 'DENIED', details: { header: 'host' } } });
  });

  it('names that look local but are DNS names are refused; loopback names and IP addresses are served', async () => {
    for (const host of [`127.0.0.1.nip.io:${port}`, `localhost.evil.example:${port}`, `local:${port}`, 'evil.example']) {
      expect((await send('GET', '/v1/tools', { host })).status, host).toBe(403);
    }
    for (const host of [
      `localhost:${port}`,
      `LOCALHOST.:${port}`,
      `app.localhost:${port}`,
      `127.0.0.1:${port}`,
      `127.9.9.9:${port}`,
      `[::1]:${port}`,
      `10.1.2.3:${port}`,
    ]) {
      expect((await send('GET', '/v1/tools', { host })).status, host).toBe(200);
    }
  });

  it('each refusal is a SecurityEvent of the project the path names, or of every open engine', async () => {
    await send('GET', '/p/other/v1/tools', {});
    const engines = gateway.engines();
    const seen = new Map<string, SecurityEvent[]>();
    for (const [name, engine] of engines) {
      seen.set(name, []);
      engine.events.on('security', (event) => seen.get(name)?.push(event));
    }
    await send('POST', '/p/other/v1/tools/other.only:run', { host: `evil.example:${port}`, ...json }, '{"input":{}}');
    expect(seen.get('other')).toEqual([
      expect.objectContaining({
        type: 'SecurityEvent',
        action: 'request_refused',
        tool: 'other.only',
        run_id: null,
        operation: 'POST /p/other/v1/tools/other.only:run',
        request: { header: 'host', value: `evil.example:${port}`, address: '127.0.0.1' },
      }),
    ]);
    expect(seen.get(project.project)).toEqual([]);
    await send('GET', '/p/never-opened/v1/tools', { origin: 'http://evil.example' });
    for (const name of engines.keys()) {
      expect(seen.get(name)?.at(-1)).toMatchObject({ action: 'request_refused', request: { header: 'origin', value: 'http://evil.example' } });
    }
  });

  it('with no engine open yet, the refusal opens the default project and is in its event stream', async () => {
    const fresh = await createGateway({ workspace: project.workspace, project: project.project, engineOptions: { persist: false, watch: false } });
    try {
      const url = await fresh.app.listen({ host: '127.0.0.1', port: 0 });
      expect(fresh.engines().size).toBe(0);
      expect((await send('GET', '/healthz', { host: 'evil.example' }, undefined, url)).status).toBe(403);
      const stream = await send('GET', '/v1/events?last_event_id=0', {}, undefined, url);
      expect(stream.status).toBe(200);
      expect(stream.text).toContain('event: SecurityEvent');
      expect(stream.text).toContain('"action":"request_refused"');
    } finally {
      await fresh.close();
    }
  });
});

describe('a foreign Origin (a page of another site)', () => {
  it('cannot open an MCP session or run a tool, from another site, another local port, or Origin null', async () => {
    for (const origin of ['http://evil.example', `http://localhost:${port + 1}`, `http://127.0.0.1:${port + 1}`, 'null', 'file://']) {
      const session = await send('POST', '/mcp', { origin, ...MCP_HEADERS }, INITIALIZE);
      expect(session.status, origin).toBe(403);
      const error = JSON.parse(session.text).error;
      expect(error).toMatchObject({ code: 'DENIED', details: { header: 'origin', value: origin } });
      if (origin.startsWith('http:')) expect(error.message).toContain(`--allow-origin ${origin}`);
      const run = await send('POST', '/v1/tools/fs.write:run', { origin, ...json }, JSON.stringify({ input: { path: '/x.txt', content: 'x' } }));
      expect(run.status, origin).toBe(403);
    }
    expect(gateway.mcpSessions().sessions).toBe(0);
  });

  it('the gateway’s own page (same origin) and clients that send no Origin keep working', async () => {
    for (const [host, origin] of [
      [`127.0.0.1:${port}`, `http://127.0.0.1:${port}`],
      [`localhost:${port}`, `http://localhost:${port}`],
    ] as const) {
      const run = await send('POST', '/v1/tools/demo.echo:run', { host, origin, ...json }, '{"input":{"a":1}}');
      expect(run.status, origin).toBe(200);
    }
    const client = new Client({ name: 'sdk', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    try {
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('demo.echo');
    } finally {
      await client.close();
    }
  });
});

describe('names and origins the user lists', () => {
  it('are served; others still are not; a malformed one is refused when the gateway is made', async () => {
    const listed = await createGateway({
      workspace: project.workspace,
      project: project.project,
      allowedHosts: ['devbox.lan'],
      allowedOrigins: ['http://localhost:5173'],
      engineOptions: { persist: false, watch: false },
    });
    try {
      const url = await listed.app.listen({ host: '127.0.0.1', port: 0 });
      const own = new URL(url).port;
      expect((await send('GET', '/v1/tools', { host: `devbox.lan:${own}` }, undefined, url)).status).toBe(200);
      expect((await send('GET', '/v1/tools', { host: `DevBox.Lan:${own}`, origin: `http://devbox.lan:${own}` }, undefined, url)).status).toBe(200);
      expect((await send('GET', '/v1/tools', { origin: 'http://localhost:5173' }, undefined, url)).status).toBe(200);
      expect((await send('GET', '/v1/tools', { host: `other.lan:${own}` }, undefined, url)).status).toBe(403);
      expect((await send('GET', '/v1/tools', { origin: 'http://localhost:5174' }, undefined, url)).status).toBe(403);
    } finally {
      await listed.close();
    }
    for (const [allowedHosts, allowedOrigins, message] of [
      [['devbox.lan:8080'], [], /"devbox.lan:8080" is not a host name to allow/],
      [['*.lan'], [], /not a host name to allow/],
      [[], ['localhost:5173'], /"localhost:5173" is not an origin to allow/],
      [[], ['http://localhost:5173/app'], /not an origin to allow/],
    ] as const) {
      await expect(
        createGateway({
          workspace: project.workspace,
          project: project.project,
          allowedHosts: [...allowedHosts],
          allowedOrigins: [...allowedOrigins],
        }),
      ).rejects.toThrow(message);
    }
  });
});
