import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { daemonPaths } from '../src/daemon/paths.js';
import { median } from './stats.js';

const ROOT = join(import.meta.dirname, '..', '..');
const BIN = join(ROOT, 'bin', 'arium.js');

/**
 * What an MCP client waits for when it starts `arium mcp`: from the spawn to the answer of `initialize`
 * (the SDK Client's connect), and to the answer of its first `tools/call` (a 3-byte fs.read). Through
 * the bridge with the workspace's daemon already running, through the bridge when it must start the
 * daemon first, and the in-process server (`--no-daemon`) for comparison; `node -e 0` is the floor.
 */
export async function benchDaemonStart(flags: ReadonlyMap<string, string>): Promise<Record<string, unknown>> {
  const runs = Number(flags.get('runs') ?? 15);
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-start-'));
  const runtime = mkdtempSync(join(tmpdir(), 'arium-bench-run-'));
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  const env = { PATH: process.env.PATH ?? '', XDG_RUNTIME_DIR: runtime };
  try {
    const floor: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      spawnSync(process.execPath, ['-e', '0']);
      floor.push(performance.now() - t0);
    }
    // The first start makes the daemon (and writes the file the calls read).
    const cold = await start(['mcp'], workspace, env, true);
    const bridged = [];
    for (let i = 0; i < runs; i++) bridged.push(await start(['mcp'], workspace, env));
    stopDaemon(workspace, env);
    const inProcess = [];
    for (let i = 0; i < runs; i++) inProcess.push(await start(['mcp', '--no-daemon'], workspace, env));
    const figures = (values: number[]) => ({
      min: round(Math.min(...values)),
      median: round(median(values)),
      max: round(Math.max(...values)),
    });
    return {
      runs,
      node_e0_ms: figures(floor),
      bridge_initialize_ms: figures(bridged.map((r) => r.initialize)),
      bridge_first_call_ms: figures(bridged.map((r) => r.call)),
      bridge_starting_daemon_initialize_ms: round(cold.initialize),
      bridge_starting_daemon_first_call_ms: round(cold.call),
      no_daemon_initialize_ms: figures(inProcess.map((r) => r.initialize)),
      no_daemon_first_call_ms: figures(inProcess.map((r) => r.call)),
      target_bridge_initialize_ms: 150,
    };
  } finally {
    stopDaemon(workspace, env);
    rmSync(workspace, { recursive: true, force: true });
    rmSync(runtime, { recursive: true, force: true });
  }
}

/** Spawns `arium <args>` as an MCP client does; times its initialize and first call from the spawn. */
async function start(args: string[], workspace: string, env: Record<string, string>, write = false): Promise<{ initialize: number; call: number }> {
  const client = new Client({ name: 'bench', version: '1' });
  const t0 = performance.now();
  await client.connect(
    new StdioClientTransport({ command: process.execPath, args: [BIN, '--workspace', workspace, '--project', 'p', ...args], env, stderr: 'ignore' }),
  );
  const initialize = performance.now() - t0;
  if (write) await client.callTool({ name: 'fs.write', arguments: { path: '/a.txt', content: 'abc' } });
  const result = await client.callTool({ name: 'fs.read', arguments: { path: '/a.txt' } });
  const call = performance.now() - t0;
  if (result.isError) throw new Error(JSON.stringify(result.content));
  await client.close();
  return { initialize, call };
}

function stopDaemon(workspace: string, env: Record<string, string>): void {
  const record = daemonPaths(workspace, env).record;
  try {
    const { pid } = JSON.parse(readFileSync(record, 'utf8')) as { pid: number };
    process.kill(pid, 'SIGTERM');
    // The in-process server needs the project's lock, which the daemon holds until it has exited.
    for (const until = Date.now() + 15_000; Date.now() < until; ) {
      process.kill(pid, 0);
      spawnSync('sleep', ['0.05']);
    }
  } catch {}
}

const round = (ms: number) => Math.round(ms * 10) / 10;
