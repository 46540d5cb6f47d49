import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Fastify from 'fastify';
import { createEngine } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, '..', '..');
const AUTOCANNON = join(ROOT, 'node_modules', 'autocannon', 'autocannon.js');

interface Load {
  requests_per_s: number;
  p50_ms: number;
  p99_ms: number;
  requests: number;
  errors: number;
  non_2xx: number;
}

/**
 * The gateway under load: a builtin call (`fs.read` of 1 KB) POSTed by autocannon from a second process
 * over 50 keep-alive connections for a fixed time, against a bare `node:http` server answering a fixed
 * JSON body of the same size, measured in the same run with the same client. Every call the gateway
 * answers must have its result event (none lost).
 */
export async function benchHttp(seconds = Number(process.env.ARIUM_BENCH_HTTP_SECONDS ?? 10)): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-http-'));
  mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
  const gateway = await createGateway({ workspace: dir, project: 'bench', engineOptions: { watch: false } });
  const body = JSON.stringify({ input: { path: '/data/a.txt' } });
  try {
    const address = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    const engine = gateway.engines().get('bench') ?? (await openFirst(address, body, gateway));
    engine.vfs.write('/data/a.txt', `${'x'.repeat(1023)}\n`);
    const sample = await (
      await fetch(`${address}/v1/tools/fs.read:run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    ).text();

    const bare = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
        res.end(sample);
      });
    });
    await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
    const bareUrl = `http://127.0.0.1:${(bare.address() as AddressInfo).port}/v1/tools/fs.read:run`;
    await load(bareUrl, body, 2); // warm-up
    const baseline = await load(bareUrl, body, seconds);
    await new Promise<void>((resolve) => bare.close(() => resolve()));

    // The floor of the design: Fastify alone, validating the same body against the same schema and
    // answering the fixed body, with no engine behind it.
    const floorApp = Fastify({ logger: false });
    floorApp.post(
      '/v1/tools/:id(^[^:/]+)::run',
      { schema: { body: { type: 'object', required: ['input'], additionalProperties: false, properties: { input: { type: 'object' } } } } },
      async (_request, reply) => reply.header('content-type', 'application/json; charset=utf-8').send(sample),
    );
    const floorAddress = await floorApp.listen({ host: '127.0.0.1', port: 0 });
    await load(`${floorAddress}/v1/tools/fs.read:run`, body, 2);
    const floor = await load(`${floorAddress}/v1/tools/fs.read:run`, body, seconds);
    await floorApp.close();

    // The same, with the engine call the design cannot do without: Fastify validating the body, then
    // engine.call and JSON.stringify of the result, nothing else (no envelope, events, cancellation).
    // Its own engine, with no event listener (the gateway's keeps events for /v1/events).
    mkdirSync(join(dir, 'floor', 'tools'), { recursive: true });
    const floorEngine = await createEngine({ workspace: dir, project: 'floor', watch: false, persist: false });
    floorEngine.vfs.write('/data/a.txt', `${'x'.repeat(1023)}\n`);
    const engineFloorApp = Fastify({ logger: false });
    engineFloorApp.post(
      '/v1/tools/:id(^[^:/]+)::run',
      { schema: { body: { type: 'object', required: ['input'], additionalProperties: false, properties: { input: { type: 'object' } } } } },
      async (request, reply) => {
        const result = await floorEngine.call((request.params as { id: string }).id, (request.body as { input: unknown }).input);
        return reply.header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(result));
      },
    );
    const engineFloorAddress = await engineFloorApp.listen({ host: '127.0.0.1', port: 0 });
    await load(`${engineFloorAddress}/v1/tools/fs.read:run`, body, 2);
    const engineFloor = await load(`${engineFloorAddress}/v1/tools/fs.read:run`, body, seconds);
    await engineFloorApp.close();
    await floorEngine.close();

    let results = 0;
    engine.events.on('result', () => {
      results++;
    });
    await load(`${address}/v1/tools/fs.read:run`, body, 2); // warm-up
    results = 0;
    const served = await load(`${address}/v1/tools/fs.read:run`, body, seconds);
    // The last answers may still be on their way when autocannon stops counting: wait for the events.
    await new Promise((r) => setTimeout(r, 200));
    return {
      seconds,
      connections: 50,
      response_bytes: Buffer.byteLength(sample),
      bare_node_http: baseline,
      fastify_floor: floor,
      fastify_engine_floor: engineFloor,
      gateway: served,
      ratio_to_bare: Math.round((served.requests_per_s / baseline.requests_per_s) * 1000) / 1000,
      floor_ratio_to_bare: Math.round((floor.requests_per_s / baseline.requests_per_s) * 1000) / 1000,
      engine_floor_ratio_to_bare: Math.round((engineFloor.requests_per_s / baseline.requests_per_s) * 1000) / 1000,
      ratio_to_floor: Math.round((served.requests_per_s / floor.requests_per_s) * 1000) / 1000,
      result_events: results,
      answered_2xx: served.requests - served.non_2xx - served.errors,
      targets: { requests_per_s: 5000, ratio_to_bare: 0.6 },
    };
  } finally {
    await gateway.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function openFirst(address: string, body: string, gateway: Awaited<ReturnType<typeof createGateway>>) {
  await fetch(`${address}/v1/tools/fs.list:run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"input":{}}' });
  void body;
  const engine = gateway.engines().get('bench');
  if (!engine) throw new Error('the gateway did not open the bench project');
  return engine;
}

async function load(url: string, body: string, seconds: number): Promise<Load> {
  const { stdout } = await run(
    process.execPath,
    [AUTOCANNON, '--json', '-c', '50', '-d', String(seconds), '-m', 'POST', '-H', 'content-type=application/json', '-b', body, url],
    { maxBuffer: 64 * 1024 * 1024 },
  );
  const r = JSON.parse(stdout) as {
    requests: { average: number; total: number };
    latency: { p50: number; p99: number };
    errors: number;
    non2xx: number;
  };
  return {
    requests_per_s: Math.round(r.requests.average),
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    requests: r.requests.total,
    errors: r.errors,
    non_2xx: r.non2xx,
  };
}
