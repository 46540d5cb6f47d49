import { Agent, request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { median, percentile } from './stats.js';

/**
 * The clients of bench/mcp-http.ts, in a process of their own (as an MCP client is): for each target,
 * SDK clients that call one tool back to back, each waiting for its answer before the next call.
 */

export interface Target {
  /** An MCP endpoint over Streamable HTTP, or `stdio` with the command that serves it. */
  url?: string;
  stdio?: { command: string; args: string[] };
  tool: string;
  input: Record<string, unknown>;
  /** Ask for progress: the gateway then answers as a stream. */
  progress?: boolean;
  /** Clients to open (the stdio server serves one; its callers share it). */
  clients: number;
  /**
   * Instead of the SDK's client, `node:http` with a keep-alive agent POSTing the JSON-RPC request as
   * text and checking the answer's id: the server's cost without the SDK client's.
   */
  raw?: boolean;
}

export type ToChild =
  | { type: 'setup'; targets: Record<string, Target> }
  | { type: 'run'; name: string; callers: number; ms: number }
  | { type: 'stop' };

export interface RunFigures {
  calls: number;
  per_s: number;
  p50_ms: number;
  p99_ms: number;
}

/** Calls the target's tool once on one session; throws on an error result or an answer to another id. */
type Caller = () => Promise<void>;

const clients = new Map<string, Caller[]>();
const closers: Array<() => Promise<unknown>> = [];

async function setup(all: Record<string, Target>): Promise<void> {
  for (const [name, target] of Object.entries(all)) {
    const opened: Caller[] = [];
    for (let i = 0; i < target.clients; i++) opened.push(target.raw ? await rawSession(target) : await sdkSession(target, `bench-${name}-${i}`));
    clients.set(name, opened);
  }
}

async function sdkSession(target: Target, name: string): Promise<Caller> {
  const client = new Client({ name, version: '1' });
  await client.connect(
    target.stdio ? new StdioClientTransport({ ...target.stdio, stderr: 'ignore' }) : new StreamableHTTPClientTransport(new URL(target.url as string)),
  );
  closers.push(() => client.close());
  const options = target.progress ? { onprogress: () => {} } : undefined;
  const params = { name: target.tool, arguments: target.input };
  return async () => {
    const result = await client.callTool(params, undefined, options);
    if (result.isError) throw new Error(JSON.stringify(result.content));
  };
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

function post(url: URL, headers: Record<string, string>, body: string): Promise<{ status: number; session?: string; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', agent, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, session: res.headers['mcp-session-id'] as string | undefined, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function rawSession(target: Target): Promise<Caller> {
  const url = new URL(target.url as string);
  const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  const init = await post(
    url,
    base,
    JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    }),
  );
  const headers = { ...base, 'mcp-session-id': init.session ?? '', 'mcp-protocol-version': '2025-11-25' };
  await post(url, headers, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  let id = 0;
  return async () => {
    const mine = ++id;
    const params = { name: target.tool, arguments: target.input, ...(target.progress ? { _meta: { progressToken: mine } } : {}) };
    const answer = await post(url, headers, JSON.stringify({ jsonrpc: '2.0', id: mine, method: 'tools/call', params }));
    // An SSE answer carries its message on the last data line.
    const json = answer.text.startsWith('{')
      ? answer.text
      : (answer.text
          .match(/^data: (\{.*)$/gm)
          ?.pop()
          ?.slice(6) ?? '');
    const message = JSON.parse(json) as { id: unknown; result?: { isError?: boolean } };
    if (message.id !== mine || !message.result || message.result.isError) throw new Error(`answer ${json.slice(0, 200)} to request ${mine}`);
  };
}

async function run(name: string, callers: number, ms: number): Promise<RunFigures> {
  const opened = clients.get(name) as Caller[];
  const times: number[] = [];
  const t0 = performance.now();
  const until = t0 + ms;
  await Promise.all(
    Array.from({ length: callers }, async (_, i) => {
      const call = opened[i % opened.length] as Caller;
      while (performance.now() < until) {
        const start = performance.now();
        await call();
        times.push(performance.now() - start);
      }
    }),
  );
  const elapsed = performance.now() - t0;
  return {
    calls: times.length,
    per_s: Math.round((times.length / elapsed) * 1000),
    p50_ms: Math.round(median(times) * 1000) / 1000,
    p99_ms: Math.round(percentile(times, 0.99) * 1000) / 1000,
  };
}

process.on('message', (message: ToChild) => {
  const reply = (value: unknown) => process.send?.(value);
  if (message.type === 'setup') {
    setup(message.targets).then(
      () => reply({ ok: true }),
      (error: Error) => reply({ ok: false, error: error.message }),
    );
  } else if (message.type === 'run') {
    run(message.name, message.callers, message.ms).then(
      (figures) => reply({ ok: true, figures }),
      (error: Error) => reply({ ok: false, error: error.message }),
    );
  } else {
    void Promise.all(closers.map((close) => close().catch(() => {}))).then(() => process.exit(0));
  }
});
