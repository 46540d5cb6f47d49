import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createEngine } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';
import { median, percentile } from './stats.js';

const ROOT = join(import.meta.dirname, '..', '..');

/**
 * What MCP over stdio adds to a builtin call: the same 1 KB `fs.read`, one call after another, through
 * `engine.call` in this process and through the SDK's client to `arium mcp` (a second process, its
 * own engine on a twin project), in the same run. The difference of the medians is the surface's cost:
 * JSON-RPC framing both ways, the pipe, and the SDK's validation of messages on each side.
 */
export async function benchMcp(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-mcp-'));
  const content = `${'x'.repeat(1023)}\n`;
  for (const p of ['local', 'served']) mkdirSync(join(dir, p, 'tools'), { recursive: true });
  const engine = await createEngine({ workspace: dir, project: 'local', watch: false });
  const client = new Client({ name: 'bench', version: '1' });
  try {
    engine.vfs.write('/data/a.txt', content);
    const input = { path: '/data/a.txt' };
    const local = await latencies(2_000, 10_000, async () => {
      const r = await engine.call('fs.read', input);
      if (!r.ok) throw new Error(r.error.message);
    });

    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [join(ROOT, 'bin', 'arium.js'), '--workspace', dir, '--project', 'served', 'mcp', '--no-daemon'],
        stderr: 'ignore',
      }),
    );
    await client.callTool({ name: 'fs.write', arguments: { path: '/data/a.txt', content } });
    const served = await latencies(2_000, 10_000, async () => {
      const r = await client.callTool({ name: 'fs.read', arguments: input });
      if (r.isError) throw new Error(JSON.stringify(r.content));
    });
    const t0 = performance.now();
    const parallel = 4_000;
    await Promise.all(Array.from({ length: parallel }, () => client.callTool({ name: 'fs.read', arguments: input })));
    const parallelMs = performance.now() - t0;
    const http = await overHttp(dir, content, input);
    return {
      ...http,
      engine_call_median_ms: round(median(local)),
      mcp_stdio_call_median_ms: round(median(served)),
      mcp_added_median_ms: round(median(served) - median(local)),
      mcp_p99_ms: round(percentile(served, 0.99)),
      mcp_stdio_calls_per_s_4000_in_flight: Math.round((parallel / parallelMs) * 1000),
      target_added_ms: 0.3,
    };
  } finally {
    await client.close().catch(() => {});
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * MCP over Streamable HTTP: 8 sessions (SDK clients in this process) against the gateway's `/mcp`,
 * each making one call after another for 5 s.
 */
async function overHttp(dir: string, content: string, input: { path: string }): Promise<Record<string, unknown>> {
  mkdirSync(join(dir, 'web', 'tools'), { recursive: true });
  const gateway = await createGateway({ workspace: dir, project: 'web', engineOptions: { watch: false } });
  const clients: Client[] = [];
  try {
    const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    for (let i = 0; i < 8; i++) {
      const client = new Client({ name: `bench-${i}`, version: '1' });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
      clients.push(client);
    }
    await clients[0]?.callTool({ name: 'fs.write', arguments: { path: '/data/a.txt', content } });
    const session = async (client: Client, until: number): Promise<number[]> => {
      const times: number[] = [];
      while (performance.now() < until) {
        const t0 = performance.now();
        const r = await client.callTool({ name: 'fs.read', arguments: input });
        if (r.isError) throw new Error(JSON.stringify(r.content));
        times.push(performance.now() - t0);
      }
      return times;
    };
    await Promise.all(clients.map((c) => session(c, performance.now() + 1000))); // warm-up
    const t0 = performance.now();
    const all = (await Promise.all(clients.map((c) => session(c, t0 + 5000)))).flat();
    const elapsed = performance.now() - t0;
    return {
      mcp_http_sessions: 8,
      mcp_http_calls_per_s: Math.round((all.length / elapsed) * 1000),
      mcp_http_call_median_ms: round(median(all)),
      mcp_http_p99_ms: round(percentile(all, 0.99)),
    };
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => {})));
    await gateway.close();
  }
}

async function latencies(warm: number, timed: number, fn: () => Promise<void>): Promise<number[]> {
  for (let i = 0; i < warm; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < timed; i++) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out;
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
