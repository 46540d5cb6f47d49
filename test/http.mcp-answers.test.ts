import { request as httpRequest } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * How `/mcp` answers a request, on a real gateway on 127.0.0.1 with the SDK's own client: one JSON body
 * when nothing but the answer is to be sent, a stream when the call asked for progress or the server
 * must ask the client something first (an approval), and JSON alone to a client that takes no stream.
 */

let project: TempProject;
const open: Gateway[] = [];
const clients: Client[] = [];

const py = (id: string, body: string) => ({
  [`${id}.py`]: `import time\n\ndef run(input, ctx):\n${body
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n')}\n`,
  [`${id}.json`]: definition({ id, runner: 'py-runner', entry: `${id}.py`, permissions: ['exec.py'], limits: { timeout_ms: 60_000 } }),
});

beforeAll(() => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({ id: 'demo.echo' }),
    'guarded.json': definition({ id: 'demo.guarded' }),
    ...py('slow', "ctx.log('started', input.get('n'))\ntime.sleep(input.get('seconds', 1.5))\nreturn {'slept': input.get('n')}"),
  });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
  await Promise.all(open.splice(0).map((g) => g.close()));
});
afterAll(() => project?.remove());

async function serve(): Promise<string> {
  const gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    engineOptions: { persist: false, watch: false, approvals: { rules: [{ tool: 'demo.guarded' }] } },
  });
  open.push(gateway);
  return gateway.app.listen({ host: '127.0.0.1', port: 0 });
}

interface Answer {
  method: string;
  id: unknown;
  status: number;
  type: string;
  body?: string;
}

/** An SDK client over real HTTP whose every POST and its answer's status and Content-Type are kept. */
async function connect(base: string, name: string, capabilities: Record<string, unknown> = {}): Promise<{ client: Client; answers: Answer[] }> {
  const answers: Answer[] = [];
  const recording = async (url: string | URL, init?: RequestInit): Promise<Response> => {
    const response = await fetch(url, init);
    if (init?.method === 'POST' && typeof init.body === 'string') {
      const sent = JSON.parse(init.body) as { method?: string; id?: unknown };
      const type = response.headers.get('content-type') ?? '';
      const answer: Answer = { method: sent.method ?? 'response', id: sent.id, status: response.status, type };
      if (type.startsWith('application/json')) answer.body = await response.clone().text();
      answers.push(answer);
    }
    return response;
  };
  const client = new Client({ name, version: '1' }, { capabilities });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { fetch: recording }));
  clients.push(client);
  return { client, answers };
}

const calls = (answers: Answer[]) => answers.filter((a) => a.method === 'tools/call');

/** One raw POST to /mcp with exactly these headers. */
function post(base: string, message: object, headers: Record<string, string>) {
  return new Promise<{ status: number; type: string; session: string | undefined; text: string }>((resolve, reject) => {
    const req = httpRequest(`${base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          type: String(res.headers['content-type'] ?? ''),
          session: res.headers['mcp-session-id'] as string | undefined,
          text,
        }),
      );
    });
    req.on('error', reject);
    req.end(JSON.stringify(message));
  });
}

async function waitFor(condition: () => boolean, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('a call that needs no stream', () => {
  it('is answered with one application/json body holding its JSON-RPC answer', async () => {
    const base = await serve();
    const { client, answers } = await connect(base, 'plain');
    const result = await client.callTool({ name: 'demo.echo', arguments: { hello: 'json' } });
    expect(result.structuredContent).toEqual({ hello: 'json' });
    const [answer] = calls(answers);
    expect(answer).toMatchObject({ status: 200, type: 'application/json' });
    const body = JSON.parse(answer?.body ?? '') as { jsonrpc: string; id: unknown; result: { structuredContent: unknown } };
    expect(body).toMatchObject({ jsonrpc: '2.0', id: answer?.id, result: { structuredContent: { hello: 'json' } } });
    // The other requests of a session need no stream either.
    await client.listTools();
    expect(answers.find((a) => a.method === 'tools/list')).toMatchObject({ status: 200, type: 'application/json' });
  });

  it('still sends the log lines its tool writes (on the session’s GET stream), then its JSON answer', async () => {
    const base = await serve();
    const { client, answers } = await connect(base, 'logs');
    const logs: unknown[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
      logs.push(note.params.data);
    });
    const result = await client.callTool({ name: 'slow', arguments: { n: 3, seconds: 0.1 } }, undefined, { timeout: 60_000 });
    expect(result.structuredContent).toEqual({ slept: 3 });
    expect(calls(answers)[0]).toMatchObject({ type: 'application/json' });
    await waitFor(() => logs.includes('started 3'));
  }, 60_000);
});

describe('a call that needs a stream', () => {
  it('with a progressToken is answered as server-sent events and hears its progress', async () => {
    const base = await serve();
    const { client, answers } = await connect(base, 'progress');
    const ticks: number[] = [];
    const result = await client.callTool({ name: 'slow', arguments: { n: 1, seconds: 2.5 } }, undefined, {
      onprogress: (p) => ticks.push(p.progress),
      timeout: 60_000,
    });
    expect(result.structuredContent).toEqual({ slept: 1 });
    expect(ticks.length).toBeGreaterThanOrEqual(1);
    expect(calls(answers)[0]).toMatchObject({ status: 200, type: 'text/event-stream' });
  }, 60_000);

  it('that the server must ask about first (an approval by elicitation) becomes a stream, and the answer ends it', async () => {
    const base = await serve();
    const { client, answers } = await connect(base, 'approver', { elicitation: {} });
    const asked: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params.message);
      return { action: 'accept', content: { decision: 'approve' } };
    });
    const approved = await client.callTool({ name: 'demo.guarded', arguments: { go: 1 } }, undefined, { timeout: 60_000 });
    expect(approved.isError).toBeFalsy();
    expect(approved.structuredContent).toEqual({ go: 1 });
    expect(asked).toHaveLength(1);
    expect(asked[0]).toContain('demo.guarded');
    // A call no rule matches, from the same client, asks nothing and is plain JSON.
    await client.callTool({ name: 'demo.echo', arguments: { go: 2 } });
    expect(calls(answers).map((a) => a.type)).toEqual(['text/event-stream', 'application/json']);
  }, 60_000);
});

describe('many sessions at once', () => {
  it('8 sessions × 150 calls, 4 in flight each: every answer is its own request’s, none lost', async () => {
    const base = await serve();
    const sessions = await Promise.all(Array.from({ length: 8 }, (_, s) => connect(base, `load-${s}`)));
    const per = 150;
    const results = await Promise.all(
      sessions.map(async ({ client }, s) => {
        const got: unknown[] = [];
        for (let i = 0; i < per; i += 4) {
          const batch = Array.from({ length: Math.min(4, per - i) }, (_, k) =>
            client.callTool({ name: 'demo.echo', arguments: { s, i: i + k } }).then((r) => r.structuredContent),
          );
          got.push(...(await Promise.all(batch)));
        }
        return got;
      }),
    );
    for (const [s, got] of results.entries()) expect(got).toEqual(Array.from({ length: per }, (_, i) => ({ s, i })));
    const all = sessions.flatMap(({ answers }) => calls(answers));
    expect(all).toHaveLength(8 * per);
    expect(all.every((a) => a.status === 200 && a.type === 'application/json')).toBe(true);
  }, 120_000);
});

/** An `initialize` request (id 1) from a client of that name. */
const initialize = (name: string) => ({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name, version: '1' } },
});

describe('a client that takes one type, or reuses an id', () => {
  it('initializes, is told of nothing it cannot take, and gets its calls answered as JSON', async () => {
    const base = await serve();
    const accept = { accept: 'application/json' };
    const init = await post(base, initialize('json-only'), accept);
    expect(init).toMatchObject({ status: 200, type: 'application/json' });
    expect(JSON.parse(init.text)).toMatchObject({ jsonrpc: '2.0', id: 1, result: { serverInfo: { name: `arium-${project.project}` } } });
    const session = { ...accept, 'mcp-session-id': init.session as string, 'mcp-protocol-version': '2025-11-25' };
    expect((await post(base, { jsonrpc: '2.0', method: 'notifications/initialized' }, session)).status).toBe(202);

    const call = await post(
      base,
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'demo.echo', arguments: { only: 'json' } } },
      session,
    );
    expect(call).toMatchObject({ status: 200, type: 'application/json' });
    expect(JSON.parse(call.text)).toMatchObject({ jsonrpc: '2.0', id: 2, result: { structuredContent: { only: 'json' } } });
    // Asking for progress cannot make a stream it would not take: the answer is JSON all the same.
    const progress = await post(
      base,
      { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'demo.echo', arguments: { p: 1 }, _meta: { progressToken: 'p' } } },
      session,
    );
    expect(progress).toMatchObject({ status: 200, type: 'application/json' });
    expect(JSON.parse(progress.text)).toMatchObject({ id: 3, result: { structuredContent: { p: 1 } } });
  });

  it('a client that takes only text/event-stream gets its answers as streams', async () => {
    const base = await serve();
    const accept = { accept: 'text/event-stream' };
    const init = await post(base, initialize('sse-only'), accept);
    expect(init).toMatchObject({ status: 200, type: 'text/event-stream' });
    const data = (text: string) => JSON.parse(text.match(/^data: (\{.*)$/m)?.[1] ?? 'null') as Record<string, unknown>;
    expect(data(init.text)).toMatchObject({ id: 1, result: { serverInfo: { name: `arium-${project.project}` } } });
    const session = { ...accept, 'mcp-session-id': init.session as string };
    expect((await post(base, { jsonrpc: '2.0', method: 'notifications/initialized' }, session)).status).toBe(202);
    const call = await post(
      base,
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'demo.echo', arguments: { only: 'sse' } } },
      session,
    );
    expect(call).toMatchObject({ status: 200, type: 'text/event-stream' });
    expect(data(call.text)).toMatchObject({ id: 2, result: { structuredContent: { only: 'sse' } } });
  });

  it('a request the client cancels is ended with 202 and no answer, not left open', async () => {
    const base = await serve();
    const accept = { accept: 'application/json, text/event-stream' };
    const init = await post(base, initialize('cancel'), accept);
    const session = { ...accept, 'mcp-session-id': init.session as string };
    const slow = post(base, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'slow', arguments: { n: 5, seconds: 30 } } }, session);
    await new Promise((r) => setTimeout(r, 300));
    const cancel = await post(
      base,
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 5, reason: 'changed my mind' } },
      session,
    );
    expect(cancel.status).toBe(202);
    // MCP gives a cancelled request no answer; its POST ends now rather than when the session does.
    expect(await slow).toMatchObject({ status: 202, text: '' });
  }, 60_000);

  it('a second request under an id still in flight is refused, and the first still gets its answer', async () => {
    const base = await serve();
    const accept = { accept: 'application/json, text/event-stream' };
    const init = await post(base, initialize('dup'), accept);
    const session = { ...accept, 'mcp-session-id': init.session as string };
    const message = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'slow', arguments: { n: 7, seconds: 1 } } };
    const first = post(base, message, session);
    await new Promise((r) => setTimeout(r, 300));
    const second = await post(base, message, session);
    expect(second.status).toBe(400);
    expect(JSON.parse(second.text)).toMatchObject({ id: 7, error: { code: -32600, message: expect.stringContaining('already in flight') } });
    expect(JSON.parse((await first).text)).toMatchObject({ id: 7, result: { structuredContent: { slept: 7 } } });
  }, 60_000);
});
