import { type ChildProcess, fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server as HttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { createEngine } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';
import type { RunFigures, Target, ToChild } from './mcp-http-child.js';
import { median } from './stats.js';

const ROOT = join(import.meta.dirname, '..', '..');
const SESSIONS = 8;

/**
 * MCP over Streamable HTTP with 8 SDK client sessions (in a second process, as an MCP client is), each
 * calling back to back, against its floors, in one interleaved run: rounds of a few seconds per side,
 * the sides alternated, medians of the rounds.
 *
 * - `bare`: a `node:http` server that parses each POST and answers a fixed `tools/call` result of the
 *   size of the gateway's `fs.read` answer (with the request's id): what the SDK's client and the
 *   loopback cost, nothing of a server.
 * - `sdk_json`: the SDK's own `StreamableHTTPServerTransport` in its JSON mode with a `Server` whose
 *   one tool does nothing: the SDK's server side, without Fastify or the engine.
 * - `gateway_json`: the gateway's `/mcp`, a 1 KB `fs.read` per call, answered as JSON.
 * - `gateway_sse`: the same calls with a progressToken, answered as SSE streams (every call was, before).
 * - `stdio`: `arium mcp --no-daemon` over stdio, one session (a stdio server has one client) with 8
 *   callers in flight.
 * - `raw_*`: the HTTP sides again with `node:http` keep-alive clients instead of the SDK's (8 sessions,
 *   each POSTing its JSON-RPC request and checking the id of the answer): the servers' cost without the
 *   SDK client's fetch and validation, which on 2 shared cores weighs as much as the server.
 *
 * `--rounds N` (default 8), `--round-ms N` (default 1500), `--only side,side` (to profile one side).
 */
export async function benchMcpHttp(flags: ReadonlyMap<string, string> = new Map()): Promise<Record<string, unknown>> {
  const rounds = Number(flags.get('rounds') ?? 8);
  const roundMs = Number(flags.get('round-ms') ?? 1500);
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-mcp-http-'));
  const content = `${'x'.repeat(1023)}\n`;
  for (const p of ['web', 'served']) mkdirSync(join(dir, p, 'tools'), { recursive: true });
  // The twin project `arium mcp` serves gets the same file, written through an engine closed before it starts.
  const seed = await createEngine({ workspace: dir, project: 'served', watch: false });
  seed.vfs.write('/data/a.txt', content);
  await seed.close();
  const gateway = await createGateway({ workspace: dir, project: 'web', engineOptions: { watch: false } });
  const sdk = sdkServer();
  const input = { path: '/data/a.txt' };
  let child: ChildProcess | undefined;
  let bare: HttpServer | undefined;
  try {
    const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    const engine = await gateway.project('web');
    engine.vfs.write('/data/a.txt', content);
    const sample = await engine.call('fs.read', input);
    bare = bareServer(cannedResult(sample.ok ? sample.data : null));
    const bareUrl = `${await listen(bare)}/mcp`;
    const sdkUrl = `${await listen(sdk.http)}/mcp`;
    const targets: Record<string, Target> = {
      bare: { url: bareUrl, tool: 'fs.read', input, clients: SESSIONS },
      sdk_json: { url: sdkUrl, tool: 'noop', input, clients: SESSIONS },
      gateway_json: { url: `${base}/mcp`, tool: 'fs.read', input, clients: SESSIONS },
      gateway_sse: { url: `${base}/mcp`, tool: 'fs.read', input, progress: true, clients: SESSIONS },
      stdio: {
        stdio: { command: process.execPath, args: [join(ROOT, 'bin', 'arium.js'), '--workspace', dir, '--project', 'served', 'mcp', '--no-daemon'] },
        tool: 'fs.read',
        input,
        clients: 1,
      },
      raw_bare: { url: bareUrl, tool: 'fs.read', input, clients: SESSIONS, raw: true },
      raw_sdk_json: { url: sdkUrl, tool: 'noop', input, clients: SESSIONS, raw: true },
      raw_gateway_json: { url: `${base}/mcp`, tool: 'fs.read', input, clients: SESSIONS, raw: true },
      raw_gateway_sse: { url: `${base}/mcp`, tool: 'fs.read', input, progress: true, clients: SESSIONS, raw: true },
    };
    // `--only a,b` keeps those sides (to profile one); the ratios then name only those measured.
    const only = flags.get('only')?.split(',');
    if (only) for (const name of Object.keys(targets)) if (!only.includes(name)) delete targets[name];
    child = fork(join(import.meta.dirname, 'mcp-http-child.js'), [], {
      execArgv: ['--no-node-snapshot'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const ask = askOf(child);
    await ask({ type: 'setup', targets });
    const names = Object.keys(targets);
    for (const name of names) await ask({ type: 'run', name, callers: SESSIONS, ms: 1000 }); // warm-up
    const figures = new Map<string, RunFigures[]>(names.map((n) => [n, []]));
    for (let round = 0; round < rounds; round++) {
      // Alternate the order so no side always follows the same one.
      const order = round % 2 === 0 ? names : [...names].reverse();
      for (const name of order) {
        const got = (await ask({ type: 'run', name, callers: SESSIONS, ms: roundMs })) as { figures: RunFigures };
        figures.get(name)?.push(got.figures);
      }
    }
    await ask({ type: 'stop' }).catch(() => {});
    const summary: Record<string, unknown> = {};
    for (const [name, runs] of figures) {
      summary[name] = {
        calls_per_s: median(runs.map((r) => r.per_s)),
        p50_ms: median(runs.map((r) => r.p50_ms)),
        p99_ms: median(runs.map((r) => r.p99_ms)),
        rounds: runs.map((r) => r.per_s),
      };
    }
    // The load of a shared machine moves within a run: each ratio is the median of the rounds' ratios
    // (the two sides measured seconds apart), not the ratio of the medians.
    const ratio = (a: string, b: string) => {
      const [x, y] = [figures.get(a), figures.get(b)];
      if (!x || !y) return Number.NaN;
      return Math.round(median(x.map((r, i) => r.per_s / (y[i]?.per_s ?? Number.NaN))) * 100) / 100;
    };
    return {
      sessions: SESSIONS,
      round_ms: roundMs,
      rounds,
      ...summary,
      gateway_json_over_sse: ratio('gateway_json', 'gateway_sse'),
      gateway_json_over_bare: ratio('gateway_json', 'bare'),
      gateway_json_over_sdk_json: ratio('gateway_json', 'sdk_json'),
      sdk_json_over_bare: ratio('sdk_json', 'bare'),
      gateway_json_over_stdio: ratio('gateway_json', 'stdio'),
      raw_gateway_json_over_sse: ratio('raw_gateway_json', 'raw_gateway_sse'),
      raw_gateway_json_over_bare: ratio('raw_gateway_json', 'raw_bare'),
      raw_gateway_json_over_sdk_json: ratio('raw_gateway_json', 'raw_sdk_json'),
    };
  } finally {
    child?.kill();
    bare?.closeAllConnections();
    if (bare?.listening) await new Promise((r) => bare?.close(r));
    await gateway.close();
    await sdk.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function askOf(child: ChildProcess): (message: ToChild) => Promise<unknown> {
  return (message) =>
    new Promise((resolve, reject) => {
      if (message.type === 'stop') {
        child.send(message);
        child.once('exit', () => resolve(null));
        return;
      }
      child.once('message', (answer: { ok: boolean; error?: string }) => (answer.ok ? resolve(answer) : reject(new Error(answer.error))));
      child.send(message);
    });
}

function listen(server: HttpServer): Promise<string> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
  });
}

/** The gateway's answer to `fs.read` as a result, with `__ID__` where the request's id goes. */
function cannedResult(data: unknown): string {
  const result = {
    content: [{ type: 'text', text: JSON.stringify(data) }],
    structuredContent: data,
    _meta: { 'arium/run_id': randomUUID(), 'arium/trace_id': randomUUID(), 'arium/duration_ms': 0.05 },
  };
  return JSON.stringify({ jsonrpc: '2.0', id: '__ID__', result });
}

/** Speaks just enough Streamable HTTP for the SDK's client: a session, 202 for notifications, the canned answer. */
function bareServer(canned: string): HttpServer {
  const [before, after] = canned.split('"__ID__"') as [string, string];
  return createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'POST') {
      res.writeHead(req.method === 'GET' ? 405 : 200);
      res.end();
      return;
    }
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      const message = JSON.parse(body) as { id?: unknown; method: string; params?: { protocolVersion?: string } };
      if (message.id === undefined) {
        res.writeHead(202);
        res.end();
        return;
      }
      const json =
        message.method === 'initialize'
          ? JSON.stringify({
              jsonrpc: '2.0',
              id: message.id,
              result: { protocolVersion: message.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'bare', version: '1' } },
            })
          : `${before}${JSON.stringify(message.id)}${after}`;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), 'mcp-session-id': 'bare' });
      res.end(json);
    });
  });
}

/** The SDK's transport in JSON mode, a session per client, serving one tool that does nothing. */
function sdkServer(): { http: HttpServer; close: () => Promise<void> } {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const http = createServer((req, res) => {
    const id = req.headers['mcp-session-id'];
    const known = typeof id === 'string' ? sessions.get(id) : undefined;
    if (known) {
      void known.handleRequest(req, res);
      return;
    }
    const server = new Server({ name: 'noop', version: '1' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: [{ name: 'noop', inputSchema: { type: 'object' } }] }));
    server.setRequestHandler(CallToolRequestSchema, () => ({ content: [{ type: 'text', text: '{}' }] }));
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: true,
      onsessioninitialized: (sessionId) => {
        sessions.set(sessionId, transport);
      },
    });
    void server.connect(transport).then(() => transport.handleRequest(req, res));
  });
  return {
    http,
    close: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close()));
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
    },
  };
}
