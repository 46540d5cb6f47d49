import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { createEngine } from '../src/index.js';
import { median, percentile } from './stats.js';

const ROOT = join(import.meta.dirname, '..', '..');
const SERVER = join(ROOT, 'fixtures', 'providers', 'mcp-server.mjs');

/**
 * What a provider adds to a call of an MCP server's tool over stdio: the same `echo` of the test
 * server (fixtures/providers/mcp-server.mjs), one call after another, through `engine.call` (the
 * provider's tool: lookup, validation, the permission gate, the slot, the provider runner, scrubbing,
 * events) and through the SDK's `Client` straight to a second process of the same server, in the same
 * run. The two are timed in alternating rounds, so that drift in the machine's load falls on both; the
 * difference of the medians is the engine's cost per call.
 */
export async function benchProvidersMcp(flags: ReadonlyMap<string, string>): Promise<Record<string, unknown>> {
  const rounds = Number(flags.get('rounds') ?? 10);
  const perRound = Number(flags.get('calls') ?? 1000);
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-providers-'));
  const dir = join(workspace, 'p');
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'arium.json'),
    JSON.stringify({
      providers: { local: { mcp: { command: process.execPath, args: [SERVER] }, permissions: ['net.fetch'], start: 'eager' } },
      grants: ['vfs.read', 'net.fetch'],
    }),
  );
  const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false });
  const client = new Client({ name: 'bench', version: '1' });
  try {
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER], stderr: 'ignore' }));
    const input = { text: 'hello' };
    const viaEngine = async () => {
      const r = await engine.call<{ content: Array<{ text?: string }> }>('local.echo', input);
      if (!r.ok || r.data.content[0]?.text !== 'hello') throw new Error(r.ok ? JSON.stringify(r.data) : r.error.message);
    };
    const direct = async () => {
      const r = await client.callTool({ name: 'echo', arguments: input });
      if (r.isError || (r.content as Array<{ text?: string }>)[0]?.text !== 'hello') throw new Error(JSON.stringify(r.content));
    };
    await timed(perRound, viaEngine);
    await timed(perRound, direct);
    const engineTimes: number[] = [];
    const directTimes: number[] = [];
    for (let r = 0; r < rounds; r++) {
      engineTimes.push(...(await timed(perRound, viaEngine)));
      directTimes.push(...(await timed(perRound, direct)));
    }
    return {
      calls_each: rounds * perRound,
      direct_sdk_call_median_ms: round(median(directTimes)),
      provider_call_median_ms: round(median(engineTimes)),
      provider_added_median_ms: round(median(engineTimes) - median(directTimes)),
      direct_mean_ms: round(mean(directTimes)),
      provider_mean_ms: round(mean(engineTimes)),
      direct_p99_ms: round(percentile(directTimes, 0.99)),
      provider_p99_ms: round(percentile(engineTimes, 0.99)),
      target_added_ms: 0.5,
    };
  } finally {
    await client.close().catch(() => {});
    await engine.close();
    rmSync(workspace, { recursive: true, force: true });
  }
}

async function timed(n: number, fn: () => Promise<void>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out;
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
const mean = (values: readonly number[]) => values.reduce((a, b) => a + b, 0) / values.length;
