import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { httpProviderKind } from '../src/providers/http.js';
import type { Provider, ProviderCallContext, ProviderOutcome } from '../src/providers/provider.js';

/**
 * The `http` provider kind against real AX tool workers on 127.0.0.1: a worker written here (one
 * endpoint per tool, each answering as a test tells it), and the example worker in examples/http-worker
 * run as a process of its own where the test kills it.
 */

interface Envelope {
  meta: { trace_id: string; tool_run_id: string; domain_id: string; deadline_ms: number };
  input: unknown;
}
type Handler = (envelope: Envelope, res: ServerResponse, req: IncomingMessage) => void;

const ok = (envelope: Envelope, output: unknown) => ({
  ok: true,
  meta: { trace_id: envelope.meta.trace_id, tool_run_id: envelope.meta.tool_run_id, duration_ms: 1 },
  output,
});
function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** A worker: each request is recorded; `handlers` answers by path (default: echo the input back). */
class TestWorker {
  readonly server: Server;
  readonly requests: Array<{ path: string; headers: IncomingMessage['headers']; envelope: Envelope }> = [];
  readonly handlers = new Map<string, Handler>();
  /** Run ids whose request the gateway closed before the worker answered. */
  readonly abandoned: string[] = [];
  active = 0;
  maxActive = 0;
  healthChecks = 0;
  url = '';

  constructor() {
    this.server = createServer((req, res) => {
      if (req.method === 'GET' && req.url?.endsWith('/healthz')) {
        this.healthChecks++;
        return json(res, 200, { status: 'ok' });
      }
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const envelope = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Envelope;
        this.requests.push({ path: req.url ?? '', headers: req.headers, envelope });
        this.active++;
        this.maxActive = Math.max(this.maxActive, this.active);
        let done = false;
        const finish = () => {
          if (done) return;
          done = true;
          this.active--;
        };
        res.on('finish', finish);
        res.on('close', () => {
          if (!res.writableFinished) this.abandoned.push(envelope.meta.tool_run_id);
          finish();
        });
        const handler = this.handlers.get(req.url ?? '') ?? ((env, r) => json(r, 200, ok(env, env.input)));
        handler(envelope, res, req);
      });
    });
  }

  async listen(): Promise<void> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }
}

const SCHEMA = { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false };
const SECRET = 'sk-worker-7f3a91c2e5d84b06';

const temp = mkdtempSync(join(tmpdir(), 'arium-http-provider-'));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
let dirs = 0;

/** A project folder with a bundle: tools by id → extra manifest fields; policies as given. */
function project(tools: Record<string, Record<string, unknown>>, policies?: unknown): string {
  const dir = join(temp, `p${dirs++}`);
  mkdirSync(join(dir, 'domain', 'schemas'), { recursive: true });
  writeFileSync(join(dir, 'domain', 'schemas', 'in.json'), JSON.stringify(SCHEMA));
  const manifest = {
    domain_id: 'test_domain',
    version: '0.1',
    tools: Object.entries(tools).map(([id, extra]) => ({
      tool_id: id,
      description: `the ${id} tool`,
      transport: { type: 'http', base_url: 'http://tool-worker:8080', endpoint: `/${id}` },
      input_schema_ref: 'schemas/in.json',
      ...extra,
    })),
  };
  writeFileSync(join(dir, 'domain', 'manifest.yaml'), stringify(manifest));
  if (policies !== undefined) writeFileSync(join(dir, 'domain', 'policies.yaml'), typeof policies === 'string' ? policies : stringify(policies));
  return dir;
}

const providers: Provider[] = [];
afterEach(async () => {
  await Promise.all(providers.splice(0).map((p) => p.close()));
});

function make(dir: string, settings: Record<string, unknown>, secrets: Record<string, string> = {}): { provider: Provider; logs: string[] } {
  const logs: string[] = [];
  // `policies: null`: a bundle without policies.yaml.
  const { policies, ...rest } = settings;
  const parsed = httpProviderKind.parse(
    { manifest: 'domain/manifest.yaml', ...(policies === null ? {} : { policies: 'domain/policies.yaml' }), ...rest },
    '/providers/w/http',
  );
  const provider = httpProviderKind.create('w', parsed, {
    projectDir: dir,
    secret: (name) => secrets[name],
    log: (level, message) => logs.push(`${level}: ${message}`),
  });
  providers.push(provider);
  return { provider, logs };
}

function ctx(over: Partial<ProviderCallContext> = {}): ProviderCallContext {
  return { signal: new AbortController().signal, timeoutMs: 30_000, runId: randomUUID(), traceId: randomUUID(), ...over };
}

function failure(outcome: ProviderOutcome) {
  if (outcome.ok) throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  return outcome;
}

const worker = new TestWorker();
beforeAll(() => worker.listen());
afterAll(() => worker.close());
afterEach(() => {
  worker.handlers.clear();
});

describe('the bundle', () => {
  it('starts once for concurrent first callers, each of which sees the whole start', async () => {
    const dir = project({ echo: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    const before = worker.healthChecks;
    const first = provider.start();
    await provider.start();
    expect(provider.status().details).toMatchObject({ workers: [{ healthy: true }] });
    await first;
    expect(worker.healthChecks - before).toBe(1);
  });

  it('lists the manifest tools with their schemas, timeouts and egress metadata', async () => {
    const dir = project(
      {
        'crawl.page': { display_name: 'Crawl', timeout_sec: 2.5, egress_allowlist: ['api.firecrawl.dev:443'] },
        'crawl.site': {},
      },
      {
        concurrency: { max_inflight: 4, per_tool_max_inflight: { 'crawl.page': 2 } },
        timeouts: { default_tool_timeout_sec: 60 },
        network: { default_egress_policy: 'deny' },
      },
    );
    const { provider } = make(dir, { url: worker.url });
    expect(provider.tools()).toEqual([]);
    await provider.start();
    expect(provider.tools()).toEqual([
      {
        name: 'crawl.page',
        description: 'the crawl.page tool',
        inputSchema: SCHEMA,
        timeoutMs: 2500,
        annotations: {
          title: 'Crawl',
          ax: { domain_id: 'test_domain', egress_allowlist: ['api.firecrawl.dev:443'], default_egress_policy: 'deny', max_inflight: 2 },
        },
      },
      {
        name: 'crawl.site',
        description: 'the crawl.site tool',
        inputSchema: SCHEMA,
        timeoutMs: 60_000,
        annotations: { ax: { domain_id: 'test_domain', egress_allowlist: [], default_egress_policy: 'deny' } },
      },
    ]);
    const status = provider.status();
    expect(status).toMatchObject({ name: 'w', kind: 'http', state: 'ready', tools: 2, restarts: 0 });
    expect(status.details).toMatchObject({
      domain_id: 'test_domain',
      version: '0.1',
      workers: [{ url: `${worker.url}/healthz`, healthy: true, status: 200 }],
    });
  });

  it.each([
    [
      'a tool field it does not know',
      { t: { timeout_secs: 5 } },
      undefined,
      /manifest\.yaml: tools\[0\]\.timeout_secs is not a tool field \(known: tool_id, /,
    ],
    ['no input schema', { t: { input_schema_ref: undefined } }, undefined, /input_schema_ref is required/],
    ['a schema file outside the bundle', { t: { input_schema_ref: '../../secret.json' } }, undefined, /leaves the manifest's folder/],
    ['a schema file that is missing', { t: { input_schema_ref: 'schemas/none.json' } }, undefined, /schemas\/none\.json cannot be read \(ENOENT\)/],
    ['a transport that is not http', { t: { transport: { type: 'grpc', base_url: 'http://x:1' } } }, undefined, /transport\.type must be "http"/],
    ['an upper-case tool id', { T: {} }, undefined, /tool_id "T" must be lower case/],
    ['a bad egress entry', { t: { egress_allowlist: ['https://api.x.dev'] } }, undefined, /egress_allowlist must be a list of "host:port"/],
    ['a negative timeout', { t: { timeout_sec: -1 } }, undefined, /timeout_sec must be a positive number/],
    [
      'a policy for a tool the manifest lacks',
      { t: {} },
      { concurrency: { per_tool_max_inflight: { other: 1 } } },
      /per_tool_max_inflight\.other names no tool of the manifest \(t\)/,
    ],
    ['a policies section it does not know', { t: {} }, { retries: { max: 3 } }, /policies\.yaml: retries is not a policies section/],
    [
      'a concurrency that is not a whole number',
      { t: {} },
      { concurrency: { max_inflight: 1.5 } },
      /concurrency\.max_inflight must be a positive integer/,
    ],
    ['policies that are not YAML', { t: {} }, 'concurrency: [1, 2\n', /policies\.yaml is not valid YAML/],
    ['a key given twice', { t: {} }, 'timeouts: {}\ntimeouts: {}\n', /policies\.yaml is not valid YAML: Map keys must be unique/],
  ])('refuses %s, naming the file and the field', async (_what, tools, policies, message) => {
    const dir = project(tools, policies);
    const { provider } = make(dir, { url: worker.url, ...(policies === undefined ? { policies: null } : {}) });
    await expect(provider.start()).rejects.toThrow(message);
    expect(provider.status()).toMatchObject({ state: 'failed', error: expect.stringMatching(message) });
    expect(failure(await provider.call('t', { text: 'x' }, ctx()))).toMatchObject({ code: 'UNAVAILABLE', retryable: false });
  });

  it('refuses a manifest of a version it does not read', async () => {
    const dir = project({ t: {} });
    writeFileSync(join(dir, 'domain', 'manifest.yaml'), 'domain_id: d\nversion: "2.0"\ntools: []\n');
    const { provider } = make(dir, { url: worker.url, policies: null });
    await expect(provider.start()).rejects.toThrow(/manifest\.yaml: version "2\.0" is not a version this engine reads \(0\.1\)/);
  });
});

describe('settings', () => {
  it.each([
    [{ manifest: 'm.yaml', endpoint: '/x' }, /\/providers\/w\/http\/endpoint is not a setting of an http provider/],
    [{}, /\/providers\/w\/http\/manifest is required/],
    [{ manifest: 'm.yaml', url: 'ftp://x' }, /\/providers\/w\/http\/url must be an http:\/\/ or https:\/\/ URL/],
    [{ manifest: 'm.yaml', url: 'http://u:p@127.0.0.1:1' }, /must not carry credentials/],
    [{ manifest: 'm.yaml', headers: { 'Content-Length': '1' } }, /headers\/Content-Length is set by the provider itself/],
    [{ manifest: 'm.yaml', headers: { 'X-A': 'a\r\nX-B: b' } }, /headers\/X-A must not contain line breaks/],
    [{ manifest: 'm.yaml', headers: { 'X-A': { $secret: 'k', suffix: '!' } } }, /headers\/X-A\/suffix is not a field of a secret reference/],
    [{ manifest: 'm.yaml', headers: { 'X-A': 5 } }, /headers\/X-A must be a string or a secret reference/],
    [{ manifest: 'm.yaml', max_response_bytes: 10 }, /max_response_bytes must be an integer from 1024/],
  ])('parse refuses %j', (raw, message) => {
    expect(() => httpProviderKind.parse(raw, '/providers/w/http')).toThrow(message);
  });
});

describe('a call', () => {
  it('POSTs the request envelope to the tool endpoint and returns the output', async () => {
    const dir = project({ echo: { timeout_sec: 20 } }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const c = ctx({ timeoutMs: 5000 });
    const before = Date.now();
    const outcome = await provider.call('echo', { text: 'hello' }, c);
    expect(outcome).toEqual({ ok: true, data: { text: 'hello' } });
    const seen = worker.requests.at(-1);
    expect(seen?.path).toBe('/echo');
    expect(seen?.headers['content-type']).toBe('application/json');
    expect(seen?.envelope.input).toEqual({ text: 'hello' });
    expect(seen?.envelope.meta).toMatchObject({ trace_id: c.traceId, tool_run_id: c.runId, domain_id: 'test_domain' });
    // The deadline is the smaller of the call's budget (5 s) and the tool's timeout (20 s).
    expect(seen?.envelope.meta.deadline_ms).toBeGreaterThanOrEqual(before + 5000);
    expect(seen?.envelope.meta.deadline_ms).toBeLessThanOrEqual(Date.now() + 5000);
  });

  it('passes the input through as given: validating it is the engine’s stage, before the provider', async () => {
    const dir = project({ echo: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const input = { text: 42, extra: ['not', 'in', 'the', 'schema'] };
    expect(await provider.call('echo', input, ctx())).toEqual({ ok: true, data: input });
    expect(worker.requests.at(-1)?.envelope.input).toEqual(input);
  });

  it('without url, uses the manifest transport base_url and endpoint', async () => {
    const dir = project({ echo: { transport: { type: 'http', base_url: `${worker.url}/base/`, endpoint: '/echo' } } });
    const { provider } = make(dir, { policies: null });
    await provider.start();
    worker.handlers.set('/base/echo', (env, res) => json(res, 200, ok(env, 'based')));
    expect(await provider.call('echo', { text: 'x' }, ctx())).toEqual({ ok: true, data: 'based' });
  });

  it('answers UNKNOWN_TOOL for a tool the manifest does not list', async () => {
    const dir = project({ echo: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    expect(failure(await provider.call('nope', {}, ctx()))).toMatchObject({ code: 'UNKNOWN_TOOL', message: expect.stringContaining('lists echo') });
  });
});

describe("the worker's error envelopes", () => {
  const error = (code: string, retryable?: boolean) => (env: Envelope, res: ServerResponse) =>
    json(res, 200, {
      ok: false,
      meta: { trace_id: env.meta.trace_id, tool_run_id: env.meta.tool_run_id, duration_ms: 3 },
      error: { code, message: `upstream said no (${code})`, ...(retryable === undefined ? {} : { retryable }), details: { upstream_status: 502 } },
    });

  it.each([
    ['UPSTREAM_ERROR', true, 'UNAVAILABLE', true],
    ['UPSTREAM_ERROR', false, 'TOOL_ERROR', false],
    ['UPSTREAM_ERROR', undefined, 'UNAVAILABLE', true],
    ['VALIDATION_ERROR', undefined, 'INVALID_INPUT', false],
    ['TIMEOUT', undefined, 'TIMEOUT', true],
    ['INTERNAL', undefined, 'TOOL_ERROR', false],
    ['QUOTA', undefined, 'TOOL_ERROR', false],
  ])('%s (retryable %s) is %s, retryable %s', async (workerCode, retryable, code, expectRetryable) => {
    const dir = project({ e: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    worker.handlers.set('/e', error(workerCode, retryable));
    expect(failure(await provider.call('e', { text: 'x' }, ctx()))).toEqual({
      ok: false,
      code,
      retryable: expectRetryable,
      message: `upstream said no (${workerCode}) (worker ${worker.url}/e: ${workerCode})`,
      details: { worker_code: workerCode, worker_details: { upstream_status: 502 }, worker_duration_ms: 3 },
    });
  });
});

describe('malformed answers are errors, never data', () => {
  type Answer = (env: Envelope, res: ServerResponse) => void;
  const raw =
    (status: number, type: string | undefined, body: string): Answer =>
    (_env, res) => {
      res.writeHead(status, type === undefined ? {} : { 'content-type': type });
      res.end(body);
    };
  const cases: Array<[string, Answer, string, RegExp]> = [
    ['text/plain', raw(200, 'text/plain', '{"ok":true}'), 'INVALID_OUTPUT', /answered with content type text\/plain, not an AX response envelope/],
    ['no content type', raw(200, undefined, '{}'), 'INVALID_OUTPUT', /with content type \(none\)/],
    [
      'JSON content type, not JSON',
      raw(200, 'application/json', '{"ok": tru'),
      'INVALID_OUTPUT',
      /text that is not JSON .* It began: "\{\\"ok\\": tru"/,
    ],
    ['an array', raw(200, 'application/json', '[1]'), 'INVALID_OUTPUT', /JSON that is not an object/],
    ['no "ok"', (env, res) => json(res, 200, { meta: env.meta, output: 1 }), 'INVALID_OUTPUT', /without a boolean "ok"/],
    ['no meta', (_env, res) => json(res, 200, { ok: true, output: 1 }), 'INVALID_OUTPUT', /without a "meta" object/],
    [
      'ok without output',
      (env, res) => json(res, 200, { ok: true, meta: { tool_run_id: env.meta.tool_run_id } }),
      'INVALID_OUTPUT',
      /"ok": true envelope without "output"/,
    ],
    [
      'another run’s tool_run_id',
      (env, res) => json(res, 200, { ok: true, meta: { trace_id: env.meta.trace_id, tool_run_id: 'someone-else' }, output: { stolen: true } }),
      'INVALID_OUTPUT',
      /an envelope for another run \(meta\.tool_run_id "someone-else", expected "/,
    ],
    [
      'another trace',
      (env, res) => json(res, 200, { ok: true, meta: { trace_id: 'x', tool_run_id: env.meta.tool_run_id }, output: 1 }),
      'INVALID_OUTPUT',
      /an envelope of another trace/,
    ],
    [
      'an error without a message',
      (env, res) => json(res, 200, { ok: false, meta: { tool_run_id: env.meta.tool_run_id }, error: { code: 'X' } }),
      'INVALID_OUTPUT',
      /an error without a string "code" and "message"/,
    ],
    [
      '500 with HTML',
      raw(500, 'text/html', '<html><body>Internal Server Error</body></html>'),
      'TOOL_ERROR',
      /answered HTTP 500 \(text\/html\) without an AX envelope\. It began: "<html>/,
    ],
    ['503', raw(503, 'text/plain', 'overloaded'), 'UNAVAILABLE', /HTTP 503 .*retry later/],
    [
      '404',
      raw(404, 'application/json', '{"detail":"Not Found"}'),
      'MISCONFIGURED',
      /HTTP 404 .*check the provider's url, the manifest's transport\.endpoint/,
    ],
    ['ok envelope under 500', (env, res) => json(res, 500, ok(env, 'x')), 'TOOL_ERROR', /HTTP 500 \(application\/json\)/],
  ];

  it.each(cases)('%s', async (_what, answer, code, message) => {
    const dir = project({ m: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    worker.handlers.set('/m', answer);
    const outcome = failure(await provider.call('m', { text: 'x' }, ctx()));
    expect(outcome.code).toBe(code);
    expect(outcome.message).toMatch(message);
    expect(outcome.retryable).toBe(code === 'UNAVAILABLE');
  });

  it.each([
    ['declared in content-length', true],
    ['streamed without a length', false],
  ])('an answer over max_response_bytes (%s) is cut off: OUTPUT_LIMIT', async (_what, declared) => {
    const dir = project({ big: {} }, {});
    const { provider } = make(dir, { url: worker.url, max_response_bytes: 4096 });
    await provider.start();
    let written = 0;
    worker.handlers.set('/big', (env, res) => {
      const body = JSON.stringify(ok(env, 'x'.repeat(1024 * 1024)));
      res.writeHead(
        200,
        declared ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } : { 'content-type': 'application/json' },
      );
      // In pieces, so that the provider's cut is seen by the worker as a closed connection.
      const write = (at: number): void => {
        if (at >= body.length || res.destroyed) {
          res.end();
          return;
        }
        written = at;
        res.write(body.slice(at, at + 16 * 1024), () => setTimeout(() => write(at + 16 * 1024), 1));
      };
      write(0);
    });
    const outcome = failure(await provider.call('big', { text: 'x' }, ctx()));
    expect(outcome).toMatchObject({ code: 'OUTPUT_LIMIT', details: { limit_bytes: 4096 } });
    expect(outcome.message).toMatch(/answered more than 4096 bytes; the answer was cut off and not used/);
    await expect.poll(() => worker.abandoned.length).toBeGreaterThan(0);
    expect(written).toBeLessThan(1024 * 1024);
  });
});

describe('timeouts', () => {
  it("a slow worker ends TIMEOUT at the tool's timeout_sec, and its request is aborted", async () => {
    const dir = project({ slow: { timeout_sec: 0.3 } }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    worker.handlers.set('/slow', () => {});
    const c = ctx();
    const outcome = failure(await provider.call('slow', { text: 'x' }, c));
    expect(outcome).toMatchObject({ code: 'TIMEOUT', retryable: true, details: { timeout_ms: 300 } });
    expect(outcome.message).toMatch(/did not answer within 300 ms; the request was aborted/);
    await expect.poll(() => worker.abandoned).toContain(c.runId);
  });

  it("the policies' default timeout applies to a tool without its own; the call's smaller budget wins", async () => {
    const dir = project({ slow: {} }, { timeouts: { default_tool_timeout_sec: 0.2 } });
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    expect(provider.tools()[0]?.timeoutMs).toBe(200);
    worker.handlers.set('/slow', () => {});
    expect(failure(await provider.call('slow', { text: 'x' }, ctx()))).toMatchObject({ code: 'TIMEOUT', details: { timeout_ms: 200 } });
    expect(failure(await provider.call('slow', { text: 'x' }, ctx({ timeoutMs: 50 })))).toMatchObject({
      code: 'TIMEOUT',
      details: { timeout_ms: 50 },
    });
  });

  it('an input that is not JSON (never from the engine) is INTERNAL, not sent', async () => {
    const dir = project({ echo: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const outcome = failure(await provider.call('echo', { n: 1n }, ctx()));
    expect(outcome).toMatchObject({ code: 'INTERNAL', message: expect.stringMatching(/failed before it was sent: .*BigInt/) });
  });

  it("the caller's signal cancels the call and aborts the request", async () => {
    const dir = project({ slow: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    worker.handlers.set('/slow', () => {});
    const controller = new AbortController();
    const c = ctx({ signal: controller.signal });
    const call = provider.call('slow', { text: 'x' }, c);
    await expect.poll(() => worker.requests.some((r) => r.envelope.meta.tool_run_id === c.runId)).toBe(true);
    controller.abort();
    expect(failure(await call)).toMatchObject({ code: 'CANCELLED', retryable: false });
    await expect.poll(() => worker.abandoned).toContain(c.runId);
  });
});

describe('concurrency from policies.yaml', () => {
  it('runs at most per_tool_max_inflight calls of a tool at once; the next ones wait for a slot', async () => {
    const dir = project({ held: {}, other: {} }, { concurrency: { max_inflight: 8, per_tool_max_inflight: { held: 2 } } });
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const waiting: Array<() => void> = [];
    let heldActive = 0;
    let heldMax = 0;
    worker.handlers.set('/held', (env, res) => {
      heldActive++;
      heldMax = Math.max(heldMax, heldActive);
      waiting.push(() => {
        heldActive--;
        json(res, 200, ok(env, env.input));
      });
    });
    const calls = [1, 2, 3, 4, 5].map((n) => provider.call('held', { text: String(n) }, ctx()));
    await expect.poll(() => waiting.length).toBe(2);
    expect(provider.status().details).toMatchObject({ in_flight: 5, queued: 3 });
    // Another tool is not held back by the full one.
    expect(await provider.call('other', { text: 'free' }, ctx())).toEqual({ ok: true, data: { text: 'free' } });
    for (let released = 0; released < 5; released++) {
      await expect.poll(() => waiting.length).toBeGreaterThan(0);
      expect(heldActive).toBeLessThanOrEqual(2);
      (waiting.shift() as () => void)();
    }
    const outcomes = await Promise.all(calls);
    expect(outcomes.map((o) => (o.ok ? o.data : o))).toEqual([1, 2, 3, 4, 5].map((n) => ({ text: String(n) })));
    expect(heldMax).toBe(2);
  });

  it('max_inflight bounds the calls of all tools together', async () => {
    const dir = project({ a: {}, b: {} }, { concurrency: { max_inflight: 1 } });
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const release: Array<() => void> = [];
    const hold: Handler = (env, res) => release.push(() => json(res, 200, ok(env, env.input)));
    worker.handlers.set('/a', hold);
    worker.handlers.set('/b', hold);
    const a = provider.call('a', { text: 'a' }, ctx());
    const b = provider.call('b', { text: 'b' }, ctx());
    await expect.poll(() => release.length).toBe(1);
    await new Promise((r) => setTimeout(r, 100));
    expect(release.length).toBe(1);
    (release.shift() as () => void)();
    await expect.poll(() => release.length).toBe(1);
    (release.shift() as () => void)();
    expect(await Promise.all([a, b])).toEqual([
      { ok: true, data: { text: 'a' } },
      { ok: true, data: { text: 'b' } },
    ]);
  });

  it('past 256 waiting calls, one more is refused BUSY at once', async () => {
    const dir = project({ held: {} }, { concurrency: { per_tool_max_inflight: { held: 1 } } });
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const release: Array<() => void> = [];
    worker.handlers.set('/held', (env, res) => release.push(() => json(res, 200, ok(env, 1))));
    const running = provider.call('held', { text: 'x' }, ctx());
    await expect.poll(() => release.length).toBe(1);
    const controller = new AbortController();
    const waiting = Array.from({ length: 256 }, () => provider.call('held', { text: 'x' }, ctx({ signal: controller.signal })));
    expect(provider.status().details).toMatchObject({ queued: 256 });
    const refused = failure(await provider.call('held', { text: 'x' }, ctx()));
    expect(refused).toMatchObject({ code: 'BUSY', retryable: true });
    expect(refused.message).toMatch(/held is at the concurrency its policies allow and 256 calls already wait for a slot \(at most 256\)/);
    controller.abort();
    expect(new Set((await Promise.all(waiting)).map((o) => (o.ok ? 'ok' : o.code)))).toEqual(new Set(['CANCELLED']));
    (release.shift() as () => void)();
    expect(await running).toEqual({ ok: true, data: 1 });
  });

  it('a call that waits for a slot past its timeout ends TIMEOUT without reaching the worker', async () => {
    const dir = project({ held: {} }, { concurrency: { per_tool_max_inflight: { held: 1 } } });
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    const release: Array<() => void> = [];
    worker.handlers.set('/held', (env, res) => release.push(() => json(res, 200, ok(env, 1))));
    const first = provider.call('held', { text: 'x' }, ctx());
    await expect.poll(() => release.length).toBe(1);
    const second = ctx({ timeoutMs: 150 });
    const outcome = failure(await provider.call('held', { text: 'x' }, second));
    expect(outcome).toMatchObject({ code: 'TIMEOUT', retryable: true });
    expect(outcome.message).toMatch(/waited for a concurrency slot of held \(policies\.yaml\) and got none within 150 ms/);
    expect(worker.requests.some((r) => r.envelope.meta.tool_run_id === second.runId)).toBe(false);
    (release.shift() as () => void)();
    expect(await first).toEqual({ ok: true, data: 1 });
  });
});

describe('a worker that is gone', () => {
  const EXAMPLE = resolve(import.meta.dirname, '..', 'examples', 'http-worker');
  let child: ChildProcess | undefined;
  afterEach(() => {
    child?.kill('SIGKILL');
    child = undefined;
  });

  async function startExample(): Promise<{ url: string; lines: string[] }> {
    child = spawn(process.execPath, [join(EXAMPLE, 'worker.mjs')], {
      env: { ...process.env, PORT: '0', WORKER_TOKEN: SECRET },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: string[] = [];
    let url = '';
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      for (const line of text.split('\n').filter(Boolean)) {
        lines.push(line);
        url = /^listening on (\S+)/.exec(line)?.[1] ?? url;
      }
    });
    await expect.poll(() => url, { timeout: 10_000 }).not.toBe('');
    return { url, lines };
  }

  it('a worker process killed mid-call ends the call UNAVAILABLE, retryable', async () => {
    const { url, lines } = await startExample();
    const { provider } = make(EXAMPLE, { url, headers: { Authorization: { $secret: 'worker_token', prefix: 'Bearer ' } } }, { worker_token: SECRET });
    await provider.start();
    expect(await provider.call('text.stats', { text: 'one two\nthree' }, ctx())).toEqual({ ok: true, data: { words: 3, chars: 13, lines: 2 } });
    const c = ctx();
    const call = provider.call('text.stats', { text: 'slow', delay_ms: 30_000 }, c);
    await expect.poll(() => lines).toContain(`run ${c.runId}`);
    child?.kill('SIGKILL');
    const outcome = failure(await call);
    expect(outcome).toMatchObject({ code: 'UNAVAILABLE', retryable: true, details: { reason: 'connection_lost' } });
    expect(outcome.message).toMatch(/the connection broke before its answer was complete: the tool may have run/);
    // Once gone, it cannot be reached at all. (A call may first meet the kept-alive connection of the
    // first call, which the worker's death closed: the provider cannot tell that from a call it took.)
    await expect
      .poll(async () => {
        const next = await provider.call('text.stats', { text: 'x' }, ctx());
        return next.ok ? next : { code: next.code, retryable: next.retryable, reason: next.details?.reason };
      })
      .toEqual({ code: 'UNAVAILABLE', retryable: true, reason: 'unreachable' });
  });

  it('a worker down at start is reported in status, not a failed start', async () => {
    const dir = project({ echo: {} }, {});
    const closed = new TestWorker();
    await closed.listen();
    const url = closed.url;
    await closed.close();
    const { provider, logs } = make(dir, { url });
    await provider.start();
    expect(provider.status()).toMatchObject({
      state: 'ready',
      details: { workers: [{ url: `${url}/healthz`, healthy: false, error: expect.stringContaining('ECONNREFUSED') }] },
    });
    expect(logs.join('\n')).toMatch(/did not answer .*ECONNREFUSED.*its calls fail UNAVAILABLE until it does/);
    const outcome = failure(await provider.call('echo', { text: 'x' }, ctx()));
    expect(outcome).toMatchObject({ code: 'UNAVAILABLE', retryable: true, details: { reason: 'unreachable' } });
    expect(outcome.message).toMatch(/could not be reached; .*ECONNREFUSED/);
  });

  it('close() ends the calls in flight UNAVAILABLE, and later calls too', async () => {
    const dir = project({ slow: {} }, {});
    const { provider } = make(dir, { url: worker.url });
    await provider.start();
    worker.handlers.set('/slow', () => {});
    const c = ctx();
    const call = provider.call('slow', { text: 'x' }, c);
    await expect.poll(() => worker.requests.some((r) => r.envelope.meta.tool_run_id === c.runId)).toBe(true);
    await provider.close();
    expect(failure(await call)).toMatchObject({ code: 'UNAVAILABLE', retryable: true, details: { reason: 'closed' } });
    expect(provider.status().state).toBe('closed');
    expect(failure(await provider.call('slow', { text: 'x' }, ctx()))).toMatchObject({ code: 'UNAVAILABLE', message: 'The provider "w" is closed' });
  });
});

describe('secrets in headers', () => {
  const headers = { Authorization: { $secret: 'worker_token', prefix: 'Bearer ' }, 'X-Api-Key': { $secret: 'api_key' }, 'X-Client': 'arium' };
  const secrets = { worker_token: SECRET, api_key: 'ak-5b1e0c93d7f2a468' };

  it('are sent to the worker, and never come back in outputs, errors or status', async () => {
    const dir = project({ leak: {}, fail: {}, html: {} }, {});
    const { provider } = make(dir, { url: worker.url, headers }, secrets);
    await provider.start();
    worker.handlers.set('/leak', (env, res) => json(res, 200, ok(env, { auth: env.input, echoed: worker.requests.at(-1)?.headers })));
    worker.handlers.set('/fail', (env, res) => {
      const auth = worker.requests.at(-1)?.headers.authorization;
      json(res, 200, {
        ok: false,
        meta: { tool_run_id: env.meta.tool_run_id },
        error: { code: 'INTERNAL', message: `bad token ${auth}`, details: { key: worker.requests.at(-1)?.headers['x-api-key'] } },
      });
    });
    worker.handlers.set('/html', (_env, res) => {
      res.writeHead(500, { 'content-type': 'text/html' });
      res.end(`<p>denied for ${SECRET}</p>`);
    });
    const leaked = await provider.call('leak', { text: 'x' }, ctx());
    const seen = worker.requests.at(-1)?.headers;
    expect(seen).toMatchObject({ authorization: `Bearer ${SECRET}`, 'x-api-key': secrets.api_key, 'x-client': 'arium' });
    const failed = await provider.call('fail', { text: 'x' }, ctx());
    const html = await provider.call('html', { text: 'x' }, ctx());
    const everything = JSON.stringify([leaked, failed, html, provider.status()]);
    expect(everything).not.toContain(SECRET);
    expect(everything).not.toContain(secrets.api_key);
    expect(failure(failed).message).toBe(`bad token Bearer [secret:worker_token] (worker ${worker.url}/fail: INTERNAL)`);
    expect(failure(failed).details).toMatchObject({ worker_details: { key: '[secret:api_key]' } });
    expect(failure(html).message).toContain('denied for [secret:worker_token]');
    expect(provider.status().details).toMatchObject({ headers: ['Authorization', 'X-Api-Key', 'X-Client'] });
  });

  it('a secret the project lacks fails the start naming it, and never a value', async () => {
    const dir = project({ echo: {} }, {});
    const { provider } = make(dir, { url: worker.url, headers }, { worker_token: SECRET });
    await expect(provider.start()).rejects.toThrow(/header X-Api-Key names the secret "api_key", which the project does not have/);
    expect(JSON.stringify(provider.status())).not.toContain(SECRET);
  });
});

describe('end to end through the engine', () => {
  it('a schema-invalid input never reaches the worker; a valid one runs', async () => {
    const { createEngine } = await import('../src/index.js');
    const dir = project({ echo: {} }, { concurrency: { per_tool_max_inflight: { echo: 2 } } });
    mkdirSync(join(dir, 'tools'), { recursive: true });
    writeFileSync(
      join(dir, 'arium.json'),
      JSON.stringify({
        providers: { w: { http: { url: worker.url, manifest: 'domain/manifest.yaml', policies: 'domain/policies.yaml' }, tools: ['*'] } },
      }),
    );
    const engine = await createEngine({ workspace: temp, project: basename(dir), watch: false, persist: false });
    try {
      const before = worker.requests.length;
      const bad = await engine.call('w.echo', { text: 42 });
      expect(bad.ok ? null : bad.error.code).toBe('INVALID_INPUT');
      expect(worker.requests.length).toBe(before);
      const good = await engine.call('w.echo', { text: 'hi' });
      expect(good.ok ? good.data : good.error).toEqual({ text: 'hi' });
    } finally {
      await engine.close();
    }
  });
});
