import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine, type Engine, JetStreamStore } from '../src/index.js';
import { freePort, natsServerPath } from './nats-server.js';
import { median, percentile } from './stats.js';

/**
 * A durable `fs.write` of 1 KB through `engine.call` on the file store (one journal fdatasync per
 * call) beside the same call on a JetStream store with one replica (one publish acknowledged by a
 * nats-server with `-js` on loopback per call): latency of one caller, and throughput of 8 concurrent
 * callers. Rounds of each in turn, so that a busy moment of the machine falls on both alike.
 */
const ROUNDS = 5;
const SEQUENTIAL = 100;
const CONCURRENT = 400;

async function startServer(dir: string): Promise<{ url: string; child: ChildProcess }> {
  const binary = natsServerPath();
  if (!binary) throw new Error('nats-server is not installed (apt-get install nats-server)');
  const port = await freePort();
  const child = spawn(binary, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(dir, 'js')], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 500));
  return { url: `nats://127.0.0.1:${port}`, child };
}

async function sequential(engine: Engine, into: number[]): Promise<void> {
  const content = `${'x'.repeat(1023)}\n`;
  for (let i = 0; i < SEQUENTIAL; i++) {
    const t0 = performance.now();
    const r = await engine.call('fs.write', { path: '/w.txt', content });
    into.push(performance.now() - t0);
    if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
  }
}

/** Calls per second of 8 callers writing their own files at once. */
async function concurrent(engine: Engine): Promise<number> {
  const content = `${'y'.repeat(1023)}\n`;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 8 }, async (_, c) => {
      for (let i = 0; i < CONCURRENT / 8; i++) {
        const r = await engine.call('fs.write', { path: `/c${c}.txt`, content });
        if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
      }
    }),
  );
  return CONCURRENT / ((performance.now() - t0) / 1000);
}

export async function benchStoreJetStream(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-jetstream-'));
  mkdirSync(join(dir, 'file', 'tools'), { recursive: true });
  mkdirSync(join(dir, 'js', 'tools'), { recursive: true });
  const server = await startServer(dir);
  const file = await createEngine({ workspace: dir, project: 'file', watch: false });
  const js = await createEngine({
    workspace: dir,
    project: 'js',
    watch: false,
    store: new JetStreamStore({ servers: [server.url], name: 'bench', replicas: 1 }),
  });
  try {
    await sequential(file, []);
    await sequential(js, []);
    const latency = { file: [] as number[], js: [] as number[] };
    const rate = { file: [] as number[], js: [] as number[] };
    for (let round = 0; round < ROUNDS; round++) {
      await sequential(file, latency.file);
      await sequential(js, latency.js);
      rate.file.push(await concurrent(file));
      rate.js.push(await concurrent(js));
    }
    const summary = (values: number[]) => ({ p50_ms: +median(values).toFixed(3), p99_ms: +percentile(values, 0.99).toFixed(3) });
    return {
      file_write: summary(latency.file),
      jetstream_r1_write: summary(latency.js),
      file_calls_per_s_8_callers: Math.round(median(rate.file)),
      jetstream_r1_calls_per_s_8_callers: Math.round(median(rate.js)),
    };
  } finally {
    await file.close();
    await js.close();
    server.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}
