import { mkdirSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type CallToolResult, ResourceUpdatedNotificationSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { validate } from '@readme/openapi-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { compileSchema } from '../src/validation.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * The HTTP gateway, through Fastify's injection for the request/response cases and over a real
 * socket for what needs one: concurrent runs, server-sent events, MCP over Streamable HTTP.
 */

// A JS tool that keeps its isolate busy for `ms`: the way to fill the engine's queue.
const BUSY_JS =
  'export default async function run(input) { const end = Date.now() + input.ms; while (Date.now() < end) {} return { waited: input.ms }; }\n';

let project: TempProject;
let gateway: Gateway;
let base: string;

beforeAll(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({ id: 'demo.echo', schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }),
    'busy.js': BUSY_JS,
    'busy.json': definition({
      id: 'demo.busy',
      entry: 'busy.js',
      schema: { type: 'object', properties: { ms: { type: 'integer' } }, required: ['ms'] },
    }),
    'slow-write.js':
      "export default async function run(input, ctx) { await ctx.vfs.write(input.path, 'x'); const end = Date.now() + input.ms; while (Date.now() < end) {} return {}; }\n",
    'slow-write.json': definition({ id: 'demo.slow-write', entry: 'slow-write.js', permissions: ['exec.js', 'vfs.write'] }),
  });
  // A second project of the same workspace, served under /p/other.
  mkdirSync(join(project.workspace, 'other', 'tools'), { recursive: true });
  writeFileSync(join(project.workspace, 'other', 'tools', 'tool.js'), TRIVIAL_JS);
  writeFileSync(join(project.workspace, 'other', 'tools', 'only.json'), definition({ id: 'other.only' }));
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    eventBuffer: 50,
    engineOptions: { persist: false, watch: false, policy: { concurrency: 2, tool_concurrency: 2, queue_length: 2 } },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

function inject(method: 'GET' | 'POST', url: string, payload?: string | object, headers: Record<string, string> = {}) {
  if (payload === undefined) return gateway.app.inject({ method, url, headers });
  if (typeof payload === 'string') return gateway.app.inject({ method, url, payload, headers: { 'content-type': 'application/json', ...headers } });
  return gateway.app.inject({ method, url, payload: payload as Record<string, unknown>, headers });
}

const ENVELOPE_KEYS = ['error', 'meta', 'ok', 'tool_id', 'tool_run_id'];

describe('runs', () => {
  it('a success is the run envelope, and a trace id the caller gives is the run’s', async () => {
    const res = await inject('POST', '/v1/tools/demo.echo:run', { input: { text: 'hi' } }, { 'x-trace-id': 'step-7' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ ok: true, tool_id: 'demo.echo', output: { text: 'hi' }, meta: { trace_id: 'step-7' } });
    expect(body.tool_run_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(typeof body.meta.duration_ms).toBe('number');
    const viaBody = await inject('POST', '/v1/tools/demo.echo:run', { input: { text: 'x' }, trace_id: 'from-body' });
    expect(viaBody.json().meta.trace_id).toBe('from-body');
  });

  it('a tool that ran and failed is 200 with ok: false and the normalized error', async () => {
    const res = await inject('POST', '/v1/tools/fs.read:run', { input: { path: '/missing.txt' } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ ok: false, tool_id: 'fs.read', error: { code: 'NOT_FOUND', stage: 'execution', retryable: false } });
  });

  it.each([
    ['an unknown tool', '/v1/tools/no.such:run', { input: {} }, 404, 'UNKNOWN_TOOL'],
    ['input the tool’s schema refuses', '/v1/tools/demo.echo:run', { input: { text: 3 } }, 400, 'INVALID_INPUT'],
    ['a body without input', '/v1/tools/demo.echo:run', { text: 'hi' }, 400, 'INVALID_INPUT'],
    ['input that is not an object', '/v1/tools/demo.echo:run', { input: [1] }, 400, 'INVALID_INPUT'],
    ['an unknown route', '/v1/nothing', { input: {} }, 404, 'NOT_FOUND'],
  ])('%s: status and one error shape', async (_name, url, payload, status, code) => {
    const res = await inject('POST', url, payload);
    expect(res.statusCode).toBe(status);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(ENVELOPE_KEYS);
    expect(body).toMatchObject({ ok: false, error: { code } });
    expect(body.error.message.length).toBeGreaterThan(10);
  });

  // V8 names a position in some JSON.parse messages and not in others (Node 20: "Unexpected end of JSON
  // input", "Unexpected token 'x', … is not valid JSON"); every malformed body gets one all the same.
  it.each([
    ['{"input": {"text": x}}', 19, 1, 20],
    ['{"input": {"text": ', 19, 1, 20],
    ['{"input": {}}}', 13, 1, 14],
    ['{"input": {"a": 1,}}', 18, 1, 19],
    ['{\n  "input": {\n    "text": tru\n  }\n}', 27, 3, 13],
    ['{"input": {"text": "a\\qb"}}', 19, 1, 20],
    ["{'input': {}}", 1, 1, 2],
    ['{"input": {"n": 01}}', 17, 1, 18],
  ])('malformed body %j: 400 with where it broke (character %i, line %i column %i)', async (payload, position, line, column) => {
    const res = await inject('POST', '/v1/tools/demo.echo:run', payload);
    expect(res.statusCode).toBe(400);
    const { error } = res.json();
    expect(error.code).toBe('INVALID_INPUT');
    expect(error.details).toMatchObject({ position, line, column, problem: expect.any(String) });
    expect(error.message).toContain(`at character ${position}, line ${line} column ${column}`);
  });

  it('malformed JSON is 400 naming where it broke; a body over the limit is 413; not JSON at all is 415', async () => {
    const malformed = await inject('POST', '/v1/tools/demo.echo:run', '{"input": {"text": "hi"');
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json()).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT' } });
    expect(malformed.json().error.message).toMatch(/not valid JSON/);
    expect(malformed.json().error.details).toEqual({ position: 23, line: 1, column: 24, problem: 'CloseBraceExpected' });
    const huge = await inject('POST', '/v1/tools/demo.echo:run', { input: { text: 'x'.repeat(2 * 1024 * 1024) } });
    expect(huge.statusCode).toBe(413);
    expect(huge.json()).toMatchObject({ ok: false, error: { code: 'INPUT_TOO_LARGE', details: { limit: expect.any(Number) } } });
    const text = await gateway.app.inject({
      method: 'POST',
      url: '/v1/tools/demo.echo:run',
      payload: 'input=1',
      headers: { 'content-type': 'text/plain' },
    });
    expect(text.statusCode).toBe(415);
    expect(Object.keys(text.json()).sort()).toEqual(ENVELOPE_KEYS);
  });

  it('a denied run is 403; a full queue is 429 with Retry-After, and the rest still run', async () => {
    const denied = await createGateway({
      workspace: project.workspace,
      project: project.project,
      engineOptions: { persist: false, watch: false, grants: ['vfs.read'] },
    });
    try {
      const res = await denied.app.inject({ method: 'POST', url: '/v1/tools/fs.write:run', payload: { input: { path: '/x', content: 'y' } } });
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ ok: false, error: { code: 'DENIED', stage: 'permission' } });
    } finally {
      await denied.close();
    }
    const all = await Promise.all(Array.from({ length: 8 }, () => inject('POST', '/v1/tools/demo.busy:run', { input: { ms: 300 } })));
    const statuses = all.map((r) => r.statusCode);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(4);
    const busy = all.find((r) => r.statusCode === 429);
    expect(busy?.headers['retry-after']).toBe('1');
    expect(busy?.json()).toMatchObject({ ok: false, error: { code: 'BUSY', retryable: true } });
  });
});

describe('tools, projects, history', () => {
  it('lists the tools and shows one; an unknown one is 404 in the same shape', async () => {
    const list = (await inject('GET', '/v1/tools')).json();
    expect(list.tools.map((t: { id: string }) => t.id)).toEqual(expect.arrayContaining(['fs.read', 'demo.echo', 'demo.busy']));
    expect(JSON.stringify(list)).not.toContain(project.dir);
    expect((await inject('GET', '/v1/tools/demo.echo')).json()).toMatchObject({
      id: 'demo.echo',
      runner: 'js-runner',
      schema: { required: ['text'] },
    });
    const missing = await inject('GET', '/v1/tools/no.such');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toMatchObject({ ok: false, tool_id: 'no.such', error: { code: 'UNKNOWN_TOOL' } });
  });

  it('serves another project of the workspace under /p/<project>, opened on first use; an unknown project is 404', async () => {
    const other = (await inject('GET', '/p/other/v1/tools')).json();
    expect(other.tools.map((t: { id: string }) => t.id)).toContain('other.only');
    expect(other.tools.map((t: { id: string }) => t.id)).not.toContain('demo.echo');
    expect((await inject('POST', '/p/other/v1/tools/other.only:run', { input: { a: 1 } })).json()).toMatchObject({ ok: true, output: { a: 1 } });
    expect([...gateway.engines().keys()].sort()).toEqual(['other', 'p']);
    const none = await inject('GET', '/p/nowhere/v1/tools');
    expect(none.statusCode).toBe(404);
    expect(none.json()).toMatchObject({ ok: false, error: { code: 'NOT_FOUND', details: { project: 'nowhere' } } });
    const bad = await inject('GET', '/p/..%2F..%2Fetc/v1/tools');
    expect(bad.statusCode).toBe(404);
  });

  it('takes snapshots, diffs and restores', async () => {
    await inject('POST', '/v1/tools/fs.write:run', { input: { path: '/notes.txt', content: 'one\n' } });
    const snap = await inject('POST', '/v1/snapshots', { label: 'first' });
    expect(snap.statusCode).toBe(201);
    const id = snap.json().id;
    await inject('POST', '/v1/tools/fs.write:run', { input: { path: '/notes.txt', content: 'two\n' } });
    const diff = (await inject('GET', `/v1/diff?from=${id}&to=live`)).json();
    expect(JSON.stringify(diff)).toContain('+two');
    expect((await inject('GET', '/v1/snapshots')).json().snapshots.map((s: { id: string }) => s.id)).toContain(id);
    expect((await inject('POST', '/v1/restore', { ref: 'first' })).statusCode).toBe(200);
    expect((await inject('POST', '/v1/tools/fs.read:run', { input: { path: '/notes.txt' } })).json().output.content).toBe('one\n');
    const unknown = await inject('POST', '/v1/restore', { ref: 'no-such-snapshot' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
    expect((await inject('GET', '/v1/diff?frm=x')).statusCode).toBe(400);
  });

  it('serves an OpenAPI document a strict OpenAPI 3.1 validator accepts', async () => {
    const doc = (await inject('GET', '/v1/openapi.json')).json();
    // @readme/openapi-parser checks the document against the 3.1 schema and the rules the schema cannot
    // say (path parameters declared, unique operation ids); swagger-parser misses some of them.
    const result = await validate(doc);
    expect(result.valid ? [] : result.errors.map((e) => e.message)).toEqual([]);
  });

  it('declares every parameter of every path template in the OpenAPI document, and only those', async () => {
    const doc = (await inject('GET', '/v1/openapi.json')).json();
    const mismatches: string[] = [];
    for (const [path, operations] of Object.entries(
      doc.paths as Record<string, Record<string, { parameters?: { in: string; name: string; required?: boolean }[] }>>,
    )) {
      const inTemplate = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      for (const [method, operation] of Object.entries(operations)) {
        const declared = (operation.parameters ?? []).filter((p) => p.in === 'path');
        if (declared.some((p) => p.required !== true)) mismatches.push(`${method} ${path}: a path parameter is not required`);
        const names = declared.map((p) => p.name).sort();
        if (names.join() !== inTemplate.join()) mismatches.push(`${method} ${path}: template ${inTemplate} but declares ${names}`);
      }
    }
    expect(mismatches).toEqual([]);
  });

  it('publishes an OpenAPI 3.1 document naming every route, whose envelope schema the answers match', async () => {
    const doc = (await inject('GET', '/v1/openapi.json')).json();
    expect(doc.openapi).toBe('3.1.0');
    for (const path of ['/v1/tools', '/v1/tools/{id}', '/v1/tools/{id}:run', '/v1/snapshots', '/v1/diff', '/v1/restore', '/v1/events']) {
      expect(Object.keys(doc.paths)).toContain(path);
      expect(Object.keys(doc.paths)).toContain(`/p/{project}${path}`);
    }
    const run = doc.paths['/v1/tools/{id}:run'].post;
    expect(run.requestBody.content['application/json'].schema.required).toEqual(['input']);
    const ok = compileSchema(run.responses['200'].content['application/json'].schema);
    const notFound = compileSchema(run.responses['404'].content['application/json'].schema);
    expect(ok((await inject('POST', '/v1/tools/demo.echo:run', { input: { text: 'a' } })).json())).toBeNull();
    expect(notFound((await inject('POST', '/v1/tools/no.such:run', { input: {} })).json())).toBeNull();
    expect(ok({ ok: 'yes' })).not.toBeNull();
  });
});

describe('over a real socket', () => {
  it('fifty runs at once from parallel connections all succeed, each recorded, and each event reaches a live stream', async () => {
    const stream = await openEvents(`${base}/v1/events`);
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => post(`${base}/v1/tools/fs.write:run`, { input: { path: `/many/f${i}.txt`, content: `n${i}` } })),
    );
    expect(results.map((r) => r.status)).toEqual(Array(50).fill(200));
    expect(results.every((r) => (r.body as { ok: boolean }).ok)).toBe(true);
    const listed = await post(`${base}/v1/tools/fs.list:run`, { input: { path: '/many' } });
    expect((listed.body as { output: { entries: unknown[] } }).output.entries).toHaveLength(50);
    await waitFor(() => stream.events.filter((e) => e.event === 'ToolResultEvent' && e.data.includes('/many/')).length >= 50);
    stream.close();
  });

  it('a client that disconnects cancels its run: nothing it would have written lands', async () => {
    const controller = new AbortController();
    const run = fetch(`${base}/v1/tools/demo.slow-write:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: { path: '/gone.txt', ms: 2000 } }),
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 400);
    await expect(run).rejects.toThrow();
    // Past the tool's 2 s: had the run not been cancelled, its write would have landed by now.
    await new Promise((r) => setTimeout(r, 2600));
    const read = await post(`${base}/v1/tools/fs.read:run`, { input: { path: '/gone.txt' } });
    expect(read.body).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
  });

  it('a stream resumed with Last-Event-ID gets exactly what it missed, and says so when the buffer lost some', async () => {
    const first = await openEvents(`${base}/v1/events`);
    await post(`${base}/v1/tools/demo.echo:run`, { input: { text: 'one' } });
    await waitFor(() => first.events.some((e) => e.event === 'ToolResultEvent'));
    const last = Math.max(...first.events.map((e) => e.id));
    first.close();
    await post(`${base}/v1/tools/demo.echo:run`, { input: { text: 'two' } });
    const resumed = await openEvents(`${base}/v1/events`, { 'last-event-id': String(last) });
    await waitFor(() => resumed.events.some((e) => e.event === 'ToolResultEvent'));
    expect(resumed.events[0]?.id).toBe(last + 1);
    expect(resumed.events.map((e) => e.id)).toEqual(resumed.events.map((_, i) => last + 1 + i));
    expect(resumed.events.some((e) => e.event === 'gap')).toBe(false);
    resumed.close();
    // 50 kept: after 40 more runs (two events each) the first events are gone.
    await Promise.all(Array.from({ length: 40 }, () => post(`${base}/v1/tools/demo.echo:run`, { input: { text: 'more' } })));
    const late = await openEvents(`${base}/v1/events`, { 'last-event-id': String(last) });
    await waitFor(() => late.events.length > 1);
    expect(late.events[0]).toMatchObject({ event: 'gap' });
    expect(JSON.parse(late.events[0]?.data ?? '{}')).toMatchObject({ after: last, missed: expect.any(Number) });
    late.close();
  });

  it('speaks MCP over Streamable HTTP at /mcp, a session per client, through the SDK’s client', async () => {
    const clients = await Promise.all(
      [0, 1].map(async () => {
        const client = new Client({ name: 'http-test', version: '1' });
        await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
        return client;
      }),
    );
    try {
      const [a, b] = clients as [Client, Client];
      expect((await a.listTools()).tools.map((t) => t.name)).toContain('demo.echo');
      const [ra, rb] = (await Promise.all([
        a.callTool({ name: 'demo.echo', arguments: { text: 'from a' } }),
        b.callTool({ name: 'demo.echo', arguments: { text: 'from b' } }),
      ])) as [CallToolResult, CallToolResult];
      expect(ra.structuredContent).toEqual({ text: 'from a' });
      expect(rb.structuredContent).toEqual({ text: 'from b' });
      const failed = (await a.callTool({ name: 'demo.echo', arguments: {} })) as CallToolResult;
      expect(failed).toMatchObject({ isError: true, structuredContent: { error: { code: 'INVALID_INPUT' } } });
      const other = new Client({ name: 'other', version: '1' });
      await other.connect(new StreamableHTTPClientTransport(new URL(`${base}/p/other/mcp`)));
      expect((await other.listTools()).tools.map((t) => t.name)).toContain('other.only');
      await other.close();
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
    const stray = await post(
      `${base}/mcp`,
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { accept: 'application/json, text/event-stream', 'mcp-session-id': 'made-up' },
    );
    expect(stray.status).toBe(404);
  });

  it('over Streamable HTTP too: resources and subscriptions, list_changed, and a cancelled call writes nothing', async () => {
    // Its own gateway, watching the tools folder, over its own project.
    const own = tempProject({
      'tool.js': TRIVIAL_JS,
      'slow.js':
        "export default async function run(input, ctx) { await ctx.vfs.write('/late.txt', 'no'); const end = Date.now() + input.ms; while (Date.now() < end) {} return {}; }\n",
      'slow.json': definition({ id: 'demo.slow', entry: 'slow.js', permissions: ['exec.js', 'vfs.write'] }),
    });
    const watching = await createGateway({ workspace: own.workspace, project: own.project, engineOptions: { persist: false } });
    const client = new Client({ name: 'http-features', version: '1' });
    try {
      const url = await watching.app.listen({ host: '127.0.0.1', port: 0 });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));
      const updated: string[] = [];
      let changed = 0;
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
        updated.push(n.params.uri);
      });
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
        changed++;
      });
      const uri = `arium://${own.project}/vfs/notes/a.txt`;
      await client.subscribeResource({ uri });
      await client.callTool({ name: 'fs.write', arguments: { path: '/notes/a.txt', content: 'hello' } });
      await waitFor(() => updated.length > 0);
      expect(updated).toEqual([uri]);
      expect((await client.readResource({ uri })).contents).toEqual([{ uri, mimeType: 'text/plain', text: 'hello' }]);

      own.write('late.json', definition({ id: 'demo.late' }));
      await waitFor(() => changed > 0);
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('demo.late');

      const controller = new AbortController();
      const call = client.callTool({ name: 'demo.slow', arguments: { ms: 3000 } }, undefined, { signal: controller.signal, timeout: 60_000 });
      setTimeout(() => controller.abort('stop'), 500);
      await expect(call).rejects.toThrow();
      await new Promise((r) => setTimeout(r, 3500));
      const read = (await client.callTool({ name: 'fs.read', arguments: { path: '/late.txt' } })) as CallToolResult;
      expect(read.structuredContent).toMatchObject({ error: { code: 'NOT_FOUND' } });
    } finally {
      await client.close();
      await watching.close();
      own.remove();
    }
  }, 60_000);
});

describe('with an API key', () => {
  it('refuses every request without the right key (401, same shape, the key never echoed); /healthz stays open', async () => {
    const key = 'sk-test-0123456789abcdef';
    const locked = await createGateway({
      workspace: project.workspace,
      project: project.project,
      apiKey: key,
      engineOptions: { persist: false, watch: false },
    });
    try {
      const call = (headers: Record<string, string>) =>
        locked.app.inject({ method: 'POST', url: '/v1/tools/demo.echo:run', payload: { input: { text: 'k' } }, headers });
      const refused: Array<Record<string, string>> = [
        {},
        { authorization: 'Bearer wrong' },
        { authorization: `Bearer ${key}x` },
        { 'x-api-key': key.slice(0, -1) },
        { authorization: key },
      ];
      for (const headers of refused) {
        const res = await call(headers);
        expect(res.statusCode).toBe(401);
        expect(Object.keys(res.json()).sort()).toEqual(ENVELOPE_KEYS);
        expect(res.body).not.toContain(key);
      }
      expect((await call({ authorization: `Bearer ${key}` })).json()).toMatchObject({ ok: true, output: { text: 'k' } });
      expect((await call({ 'x-api-key': key })).statusCode).toBe(200);
      expect((await locked.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
      expect((await locked.app.inject({ method: 'GET', url: '/v1/openapi.json' })).statusCode).toBe(401);
    } finally {
      await locked.close();
    }
  });
});

interface Sse {
  events: Array<{ id: number; event: string; data: string }>;
  close: () => void;
}

function openEvents(url: string, headers: Record<string, string> = {}): Promise<Sse> {
  return new Promise((resolve, reject) => {
    const events: Sse['events'] = [];
    const req = httpRequest(url, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end = buffer.indexOf('\n\n');
        while (end !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = Object.fromEntries(
            block
              .split('\n')
              .filter((l) => !l.startsWith(':') && l.includes(':'))
              .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trimStart()]),
          );
          if (fields.event) events.push({ id: Number(fields.id ?? Number.NaN), event: fields.event, data: fields.data ?? '' });
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

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, body: parsed };
}

async function waitFor(condition: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
