import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { createEngine, type Engine } from '../src/index.js';
import { exportTools } from '../src/surfaces/export.js';
import type { SurfaceProfile } from '../src/surfaces/mcp/profile.js';
import { createMcpServer } from '../src/surfaces/mcp/server.js';
import { median, percentile } from './stats.js';

/**
 * Tool discovery over a project of generated tools (each with a description and three typed
 * properties, as a real integration's tools have): what a client loads with `discovery: "search"`
 * against the full list (MCP tools/list and the OpenAI export, in bytes of JSON), and how long one
 * `tools.search` takes through `engine.call` over 500 and 5,000 tools (p50, p99; the first search of a
 * registry version builds the index, and is timed apart).
 */
const TOPICS = ['invoice', 'weather', 'calendar', 'email', 'repo', 'ticket', 'payment', 'sensor', 'order', 'user'];
const VERBS = ['list', 'get', 'create', 'update', 'delete', 'archive', 'export', 'sync'];
const QUERIES = ['weather forecast', 'create invoice', 'sync calendar events', 'delete user', 'gen123', 'ticket_status', 'export orders csv'];

export function project(dir: string, n: number): void {
  const tools = join(dir, 'tools');
  mkdirSync(tools, { recursive: true });
  writeFileSync(join(tools, 'tool.js'), 'export default async function run(input) { return input; }\n');
  for (let i = 0; i < n; i++) {
    const topic = TOPICS[i % TOPICS.length] as string;
    const verb = VERBS[Math.floor(i / TOPICS.length) % VERBS.length] as string;
    const id = `gen${i}.${topic}-${verb}`;
    writeFileSync(
      join(tools, `${id}.json`),
      JSON.stringify({
        id,
        name: `${verb} ${topic}`,
        description: `${verb[0]?.toUpperCase()}${verb.slice(1)}s a ${topic} in the ${topic} service (instance ${i}); returns the ${topic} record.`,
        runner: 'js-runner',
        entry: 'tool.js',
        permissions: ['exec.js'],
        schema: {
          type: 'object',
          required: [`${topic}_id`],
          properties: {
            [`${topic}_id`]: { type: 'string', description: `The ${topic} id` },
            [`${topic}_status`]: { enum: ['open', 'closed', 'pending'], description: `Only ${topic}s in this state` },
            limit: { type: 'integer', minimum: 1, maximum: 100, description: 'At most this many records' },
          },
        },
      }),
    );
  }
}

async function listBytes(engine: Engine, profile: SurfaceProfile): Promise<number> {
  const { server, detach } = createMcpServer(engine, { profile });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(clientSide);
  const listed = await client.listTools();
  detach();
  await client.close();
  return Buffer.byteLength(JSON.stringify(listed.tools));
}

async function searchLatency(engine: Engine, calls: number): Promise<Record<string, number>> {
  const first0 = performance.now();
  await engine.call('tools.search', { query: 'warm up' });
  const firstMs = performance.now() - first0;
  const times: number[] = [];
  for (let i = 0; i < calls; i++) {
    const query = QUERIES[i % QUERIES.length] as string;
    const t0 = performance.now();
    const result = await engine.call('tools.search', { query, limit: 5 });
    times.push(performance.now() - t0);
    if (!result.ok) throw new Error(result.error.message);
  }
  return { first_search_ms: round(firstMs), p50_ms: round(median(times)), p99_ms: round(percentile(times, 0.99)), calls };
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;

export async function benchDiscovery(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const n of [500, 5000]) {
    const dir = mkdtempSync(join(tmpdir(), 'arium-bench-discovery-'));
    project(join(dir, 'p'), n);
    const engine = await createEngine({
      workspace: dir,
      project: 'p',
      watch: false,
      persist: false,
      warmUp: false,
      registryLimits: { max_tools: 10_000 },
    });
    try {
      const entry: Record<string, unknown> = { tools: engine.tools().length };
      if (n === 500) {
        const all = await listBytes(engine, {});
        const search = await listBytes(engine, { discovery: 'search' });
        const tools = engine.tools();
        entry.mcp_tools_list_bytes = { all, search, ratio: Math.round((all / search) * 10) / 10 };
        entry.openai_export_bytes = {
          all: Buffer.byteLength(JSON.stringify(exportTools(tools, 'openai').tools)),
          search: Buffer.byteLength(JSON.stringify(exportTools(tools, 'openai', { discovery: 'search' }).tools)),
        };
      }
      entry.search = await searchLatency(engine, 2_000);
      out[String(n)] = entry;
    } finally {
      await engine.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return out;
}
