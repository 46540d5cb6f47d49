import { request as httpRequest } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { GatewayLimits } from '../src/limits.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * `/mcp` sessions and their subscriptions are bounded, on a real gateway on 127.0.0.1 with real SDK
 * clients and raw HTTP: so many sessions per key and in all, idle ones closed and their servers freed,
 * so many subscriptions per session, and a write that looks only at the subscriptions it concerns,
 * whatever other sessions hold. (Unbounded, 5,000 never-closed sessions held 219 MB, and 20,000
 * subscriptions in one session made every write of every session wait on a scan of them all.)
 */

let project: TempProject;
const open: Gateway[] = [];
const clients: Client[] = [];

beforeAll(() => {
  project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
  await Promise.all(open.splice(0).map((g) => g.close()));
});
afterAll(() => project?.remove());

async function serve(limits: Partial<GatewayLimits>): Promise<{ gateway: Gateway; base: string }> {
  const gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    limits,
    engineOptions: { persist: false, watch: false },
  });
  open.push(gateway);
  return { gateway, base: await gateway.app.listen({ host: '127.0.0.1', port: 0 }) };
}

async function connect(base: string): Promise<Client> {
  const client = new Client({ name: 'sessions-test', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  clients.push(client);
  return client;
}

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** One JSON-RPC message POSTed to /mcp, from `localAddress` (any 127.x address is this machine). */
function post(base: string, message: object | object[], headers: Record<string, string> = {}, localAddress = '127.0.0.1') {
  return new Promise<{ status: number; session: string | undefined; text: string }>((resolve, reject) => {
    const req = httpRequest(`${base}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...headers }, localAddress }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, session: res.headers['mcp-session-id'] as string | undefined, text }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(message));
  });
}

const initialize = (base: string, localAddress?: string) =>
  post(
    base,
    {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    },
    {},
    localAddress,
  );

async function waitFor(condition: () => boolean, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('sessions', () => {
  it('are capped per key (429) and in all (503), each refusal in the envelope naming its limit; a closed one frees its slot', async () => {
    const { gateway, base } = await serve({ mcp_sessions: 3, mcp_sessions_per_key: 2 });
    await connect(base);
    const second = new StreamableHTTPClientTransport(new URL(`${base}/mcp`));
    const kept = new Client({ name: 'second', version: '1' });
    await kept.connect(second);
    clients.push(kept);
    // Without a key, a client is its address: a third session from 127.0.0.1 is one too many.
    await expect(connect(base)).rejects.toThrow(/"code":"BUSY"[\s\S]*mcp_sessions_per_key/);
    const refused = await initialize(base);
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.text)).toMatchObject({
      ok: false,
      error: { code: 'BUSY', retryable: true, details: { limit: 2, limit_name: 'mcp_sessions_per_key' } },
    });
    // Another address has its own share, until the gateway's total is reached.
    expect((await initialize(base, '127.0.0.2')).status).toBe(200);
    const full = await initialize(base, '127.0.0.3');
    expect(full.status).toBe(503);
    expect(JSON.parse(full.text)).toMatchObject({ error: { code: 'UNAVAILABLE', details: { limit: 3, limit_name: 'mcp_sessions' } } });
    expect(gateway.mcpSessions().sessions).toBe(3);
    // A session the client ends (DELETE) gives its slot back.
    await second.terminateSession();
    await waitFor(() => gateway.mcpSessions().sessions === 2);
    expect((await initialize(base)).status).toBe(200);
  }, 60_000);

  it('opened at the same moment, no more than the cap are made', async () => {
    const { gateway, base } = await serve({ mcp_sessions_per_key: 3 });
    const answers = await Promise.all(Array.from({ length: 12 }, () => initialize(base)));
    expect(answers.filter((a) => a.status === 200)).toHaveLength(3);
    expect(answers.filter((a) => a.status === 429)).toHaveLength(9);
    expect(gateway.mcpSessions().sessions).toBe(3);
  }, 60_000);

  it('an idle session is closed and its server let go; one with an open stream is not; the client is told to start again', async () => {
    const { gateway, base } = await serve({ mcp_session_idle_ms: 300 });
    const streaming = await connect(base);
    const engine = gateway.engines().get(project.project);
    const listening = engine?.events.listenerCount('result') ?? 0;
    const { session } = await initialize(base);
    expect(session).toBeDefined();
    expect(gateway.mcpSessions().sessions).toBe(2);
    expect(engine?.events.listenerCount('result')).toBe(listening + 1);
    // Left alone, the raw session goes, and its server stops listening to the engine.
    await waitFor(() => gateway.mcpSessions().sessions === 1);
    expect(engine?.events.listenerCount('result')).toBe(listening);
    const late = await post(base, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, { 'mcp-session-id': session as string });
    expect(late.status).toBe(404);
    expect(late.text).toContain('initialize a new one');
    // The SDK client holds its GET stream open all along: it is not idle, and still works.
    await new Promise((r) => setTimeout(r, 1000));
    expect(gateway.mcpSessions().sessions).toBe(1);
    expect((await streaming.callTool({ name: 'demo.echo', arguments: { a: 1 } })).structuredContent).toEqual({ a: 1 });
  }, 60_000);
});

describe('subscriptions', () => {
  it('are capped per session with a JSON-RPC error naming the limit; unsubscribing makes room', async () => {
    const { base } = await serve({ mcp_subscriptions: 3 });
    const client = await connect(base);
    const uri = (name: string) => `arium://${project.project}/vfs/${name}`;
    for (const name of ['a', 'b', 'c']) await client.subscribeResource({ uri: uri(name) });
    await client.subscribeResource({ uri: uri('a') });
    const over = client.subscribeResource({ uri: uri('d') });
    await expect(over).rejects.toMatchObject({ code: ErrorCode.InvalidRequest });
    await expect(client.subscribeResource({ uri: uri('d') })).rejects.toThrow(/already holds 3 subscriptions.*mcp_subscriptions/);
    await client.unsubscribeResource({ uri: uri('a') });
    await client.subscribeResource({ uri: uri('d') });
  }, 60_000);

  it('a write looks only at the subscriptions it concerns, not at 20,000 another session holds', async () => {
    const { gateway, base } = await serve({ mcp_subscriptions: 20_000 });
    const [heavy, light] = [await connect(base), await connect(base)] as [Client, Client];
    const heard = { heavy: [] as string[], light: [] as string[] };
    heavy.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      heard.heavy.push(n.params.uri);
    });
    light.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      heard.light.push(n.params.uri);
    });
    const prefix = `arium://${project.project}/vfs`;
    // 20,000 subscribe requests in the heavy session's name, 100 to a POST (the SDK's most per batch):
    // one request each is minutes on a loaded machine.
    const session = (heavy.transport as StreamableHTTPClientTransport).sessionId as string;
    const batch = (first: number) =>
      Array.from({ length: 100 }, (_, j) => ({
        jsonrpc: '2.0',
        id: first + j + 10,
        method: 'resources/subscribe',
        params: { uri: `${prefix}/b/${Math.floor((first + j) / 100)}/f${first + j}.txt` },
      }));
    for (let first = 0; first < 20_000; first += 400) {
      const answers = await Promise.all([0, 100, 200, 300].map((offset) => post(base, batch(first + offset), { 'mcp-session-id': session })));
      for (const answer of answers) {
        expect(answer.status).toBe(200);
        expect(answer.text).not.toContain('"error"');
      }
    }
    await light.subscribeResource({ uri: `${prefix}/a/x.txt` });
    await light.subscribeResource({ uri: `${prefix}/a` });
    expect(gateway.mcpSessions().subscriptions).toBe(20_002);

    const before = gateway.mcpSessions().subscriptions_examined;
    await light.callTool({ name: 'fs.write', arguments: { path: '/a/x.txt', content: 'hello' } });
    await waitFor(() => heard.light.length === 2);
    expect(heard.light.sort()).toEqual([`${prefix}/a`, `${prefix}/a/x.txt`]);
    // The file and the folder above it: two subscriptions looked at, none of the other session's.
    expect(gateway.mcpSessions().subscriptions_examined - before).toBe(2);

    // The heavy session hears about its own file, found the same way.
    const again = gateway.mcpSessions().subscriptions_examined;
    await light.callTool({ name: 'fs.write', arguments: { path: '/b/71/f7123.txt', content: 'x' } });
    await waitFor(() => heard.heavy.length === 1);
    expect(heard.heavy).toEqual([`${prefix}/b/71/f7123.txt`]);
    expect(gateway.mcpSessions().subscriptions_examined - again).toBe(1);
    // A folder that goes takes every subscription below it along: those are the ones looked at.
    const removed = gateway.mcpSessions().subscriptions_examined;
    await light.callTool({ name: 'fs.delete', arguments: { path: '/b/71', recursive: true } });
    await waitFor(() => heard.heavy.length === 101);
    expect(gateway.mcpSessions().subscriptions_examined - removed).toBe(100);
    expect(heard.light).toHaveLength(2);
  }, 180_000);
});

describe('replay', () => {
  it('a session keeps at most mcp_replay_bytes of its last messages for clients that reconnect', async () => {
    const budget = 64 * 1024;
    const { gateway, base } = await serve({ mcp_replay_bytes: budget });
    const client = await connect(base);
    const big = 'x'.repeat(20 * 1024);
    // Calls that ask for progress are answered as streams, which a client can resume (a plain call is
    // answered as JSON: nothing to resume, nothing kept).
    const onprogress = () => {};
    for (let i = 0; i < 20; i++) await client.callTool({ name: 'demo.echo', arguments: { big, i } }, undefined, { onprogress });
    // Twenty answers of 20 KB each were sent; only the newest that fit in 64 KB are kept.
    const held = gateway.mcpSessions().replay_bytes;
    expect(held).toBeGreaterThan(20 * 1024);
    expect(held).toBeLessThanOrEqual(budget);

    // Each answer went out with an event id, for a client that loses its stream to resume after.
    const session = (client.transport as StreamableHTTPClientTransport).sessionId as string;
    const answer = await post(
      base,
      { jsonrpc: '2.0', id: 99, method: 'tools/call', params: { name: 'demo.echo', arguments: { big }, _meta: { progressToken: 99 } } },
      {
        'mcp-session-id': session,
      },
    );
    expect(answer.text).toMatch(/^id: \S+_\d+$/m);
    expect(gateway.mcpSessions().replay_bytes).toBeLessThanOrEqual(budget);
  }, 60_000);
});
