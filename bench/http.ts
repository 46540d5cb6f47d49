import { execFile, spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import Fastify from 'fastify';
import { createEngine } from '../src/index.js';
import { EventLog } from '../src/surfaces/http/event-log.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { median } from './stats.js';

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, '..', '..');
const AUTOCANNON = join(ROOT, 'node_modules', 'autocannon', 'autocannon.js');
const CONTENT = `${'x'.repeat(1023)}\n`;
const BODY = JSON.stringify({ input: { path: '/data/a.txt' } });
const RUN_PATH = '/v1/tools/fs.read:run';
/** The body schema of the floors: the one the gateway's run route needs to accept this body. */
const FLOOR_BODY_SCHEMA = {
  type: 'object',
  required: ['input'],
  additionalProperties: false,
  properties: { input: { type: 'object' } },
} as const;

interface Load {
  requests_per_s: number;
  p50_ms: number;
  p99_ms: number;
  requests: number;
  errors: number;
  non_2xx: number;
  /** CPU time of this process (the servers) per request answered, microseconds: less swayed by the machine's load than a rate. */
  cpu_us_per_request: number;
}

/** One server under test: its URL, and what it runs around each measurement (a /v1/events reader). */
interface Side {
  name: string;
  url: string;
  around?: (measure: () => Promise<Load>) => Promise<Load>;
}

/**
 * The gateway under load: a builtin call (`fs.read` of 1 KB) POSTed by autocannon from a second process
 * over 50 keep-alive connections, against the floors of its design, all measured in the same run with the
 * same client, in rounds that alternate the sides (the machine's load changes from one second to the
 * next: only neighbours in time compare). The sides:
 *
 * - `bare_node_http`: `node:http` answering a fixed JSON body of the gateway's answer's size;
 * - `fastify_floor`: Fastify validating the same body against the same schema, answering that fixed body;
 * - `fastify_engine_floor`: the same, then `engine.call` of the same tool (an engine without listeners)
 *   and `JSON.stringify` of its result, nothing else: the least any gateway on this design does;
 * - `fastify_engine_log_floor`: the same, with the gateway's EventLog on its engine (no reader): each
 *   call's events built and the last 1,000 kept for resumption, which every gateway owes `/v1/events`;
 * - `gateway`: `createGateway` as `arium serve` runs it (host and origin checks, the per-project
 *   event log kept for `/v1/events` resumption, the profile, cancellation on disconnect, the envelope);
 * - `gateway_subscribed`: the same gateway with a `/v1/events` reader (curl, a third process) connected
 *   while it is measured: each call's events are also serialized and written to it. The reader must get
 *   every result event of every call answered, their ids without a hole;
 * - `base_gateway`, `base_gateway_subscribed` (with `--base <checkout>`): the gateway of another build,
 *   without and with a reader, for a before/after in one run.
 *
 * Flags: `--seconds` per measurement (default 5), `--rounds` (default 3), `--base <dir>`.
 */
export async function benchHttp(flags: ReadonlyMap<string, string> = new Map()): Promise<Record<string, unknown>> {
  const seconds = Number(flags.get('seconds') ?? process.env.ARIUM_BENCH_HTTP_SECONDS ?? 5);
  const rounds = Number(flags.get('rounds') ?? 3);
  const base = flags.get('base');
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-http-'));
  for (const project of ['bench', 'floor', 'logged', 'base']) mkdirSync(join(dir, project, 'tools'), { recursive: true });
  const closers: Array<() => Promise<unknown>> = [];
  try {
    const gateway = await createGateway({ workspace: dir, project: 'bench', engineOptions: { watch: false } });
    closers.push(() => gateway.close());
    const address = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    (await gateway.project('bench')).vfs.write('/data/a.txt', CONTENT);
    const sample = await (
      await fetch(`${address}${RUN_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: BODY })
    ).text();

    const bare = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
        res.end(sample);
      });
    });
    closers.push(() => closeServer(bare));
    await new Promise<void>((done) => bare.listen(0, '127.0.0.1', done));

    const floorApp = Fastify({ logger: false });
    floorApp.post('/v1/tools/:id(^[^:/]+)::run', { schema: { body: FLOOR_BODY_SCHEMA } }, async (_request, reply) =>
      reply.header('content-type', 'application/json; charset=utf-8').send(sample),
    );
    closers.push(() => floorApp.close());

    const floorEngine = await createEngine({ workspace: dir, project: 'floor', watch: false, persist: false });
    closers.push(() => floorEngine.close());
    floorEngine.vfs.write('/data/a.txt', CONTENT);
    const engineFloorApp = Fastify({ logger: false });
    engineFloorApp.post('/v1/tools/:id(^[^:/]+)::run', { schema: { body: FLOOR_BODY_SCHEMA } }, async (request, reply) => {
      const result = await floorEngine.call((request.params as { id: string }).id, (request.body as { input: unknown }).input);
      return reply.header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(result));
    });
    closers.push(() => engineFloorApp.close());

    // The same with the one thing the gateway must do per call that this floor does not: build each
    // call's events and keep the last 1,000 for /v1/events resumption (the gateway's EventLog, no reader).
    const loggedEngine = await createEngine({ workspace: dir, project: 'logged', watch: false, persist: false });
    closers.push(() => loggedEngine.close());
    loggedEngine.vfs.write('/data/a.txt', CONTENT);
    const log = new EventLog(loggedEngine, 1000);
    closers.push(async () => log.detach());
    const loggedApp = Fastify({ logger: false });
    loggedApp.post('/v1/tools/:id(^[^:/]+)::run', { schema: { body: FLOOR_BODY_SCHEMA } }, async (request, reply) => {
      const result = await loggedEngine.call((request.params as { id: string }).id, (request.body as { input: unknown }).input);
      return reply.header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(result));
    });
    closers.push(() => loggedApp.close());

    const subscriber = { result_events: 0, answered_2xx: 0, id_holes: 0, streams: 0 };
    const subscribed = (at: string) => async (measure: () => Promise<Load>) => {
      const read = await readEvents(`${at}/v1/events`, join(dir, `events-${subscriber.streams++}.txt`));
      const load = await measure();
      // The calls in flight when the client stopped counting finish too: wait for their events.
      await new Promise((r) => setTimeout(r, 300));
      const seen = await read.stop();
      subscriber.result_events += seen.results;
      subscriber.id_holes += seen.holes;
      subscriber.answered_2xx += load.requests - load.non_2xx - load.errors;
      return load;
    };
    const sides: Side[] = [
      { name: 'bare_node_http', url: `http://127.0.0.1:${(bare.address() as AddressInfo).port}${RUN_PATH}` },
      { name: 'fastify_floor', url: `${await floorApp.listen({ host: '127.0.0.1', port: 0 })}${RUN_PATH}` },
      { name: 'fastify_engine_floor', url: `${await engineFloorApp.listen({ host: '127.0.0.1', port: 0 })}${RUN_PATH}` },
      { name: 'gateway', url: `${address}${RUN_PATH}` },
      { name: 'fastify_engine_log_floor', url: `${await loggedApp.listen({ host: '127.0.0.1', port: 0 })}${RUN_PATH}` },
      { name: 'gateway_subscribed', url: `${address}${RUN_PATH}`, around: subscribed(address) },
    ];
    if (base) {
      const module = (await import(join(resolve(base), 'dist', 'src', 'surfaces', 'http', 'gateway.js'))) as { createGateway: typeof createGateway };
      const old: Gateway = await module.createGateway({ workspace: dir, project: 'base', engineOptions: { watch: false } });
      closers.push(() => old.close());
      const oldAddress = await old.app.listen({ host: '127.0.0.1', port: 0 });
      (await old.project('base')).vfs.write('/data/a.txt', CONTENT);
      sides.push({ name: 'base_gateway', url: `${oldAddress}${RUN_PATH}` });
      sides.push({ name: 'base_gateway_subscribed', url: `${oldAddress}${RUN_PATH}`, around: subscribed(oldAddress) });
    }

    const measured = new Map<string, Load[]>(sides.map((side) => [side.name, []]));
    for (let round = 0; round < rounds; round++) {
      // Each round starts at a different side, so none is always measured first or last.
      for (let i = 0; i < sides.length; i++) {
        const side = sides[(i + round) % sides.length] as Side;
        await load(side.url, 1); // warm-up
        const measure = () => load(side.url, seconds);
        measured.get(side.name)?.push(await (side.around ? side.around(measure) : measure()));
      }
    }

    const perSecond = (name: string) => (measured.get(name) ?? []).map((l) => l.requests_per_s);
    /** The median over rounds of `a`'s rate over `b`'s in the same round. */
    const ratio = (a: string, b: string) => Math.round(median(perSecond(a).map((value, i) => value / (perSecond(b)[i] as number))) * 1000) / 1000;
    const cpu = (name: string) => (measured.get(name) ?? []).map((l) => l.cpu_us_per_request);
    /** The median over rounds of the CPU time per request of `a` over `b`'s in the same round. */
    const cpuRatio = (a: string, b: string) => Math.round(median(cpu(a).map((value, i) => value / (cpu(b)[i] as number))) * 1000) / 1000;
    const summary = Object.fromEntries(
      sides.map(({ name }) => {
        const loads = measured.get(name) ?? [];
        return [
          name,
          {
            requests_per_s: median(perSecond(name)),
            cpu_us_per_request: median(loads.map((l) => l.cpu_us_per_request)),
            p50_ms: median(loads.map((l) => l.p50_ms)),
            p99_ms: median(loads.map((l) => l.p99_ms)),
            errors: loads.reduce((n, l) => n + l.errors, 0),
            non_2xx: loads.reduce((n, l) => n + l.non_2xx, 0),
            rounds: perSecond(name),
            cpu_rounds: loads.map((l) => l.cpu_us_per_request),
          },
        ];
      }),
    );
    return {
      seconds,
      rounds,
      connections: 50,
      response_bytes: Buffer.byteLength(sample),
      ...summary,
      ratios: {
        gateway_to_engine_floor: ratio('gateway', 'fastify_engine_floor'),
        gateway_to_bare: ratio('gateway', 'bare_node_http'),
        gateway_to_engine_log_floor: ratio('gateway', 'fastify_engine_log_floor'),
        engine_log_floor_to_engine_floor: ratio('fastify_engine_log_floor', 'fastify_engine_floor'),
        subscribed_to_engine_floor: ratio('gateway_subscribed', 'fastify_engine_floor'),
        engine_floor_to_bare: ratio('fastify_engine_floor', 'bare_node_http'),
        floor_to_bare: ratio('fastify_floor', 'bare_node_http'),
        ...(base
          ? {
              base_to_engine_floor: ratio('base_gateway', 'fastify_engine_floor'),
              base_to_bare: ratio('base_gateway', 'bare_node_http'),
              base_subscribed_to_engine_floor: ratio('base_gateway_subscribed', 'fastify_engine_floor'),
            }
          : {}),
      },
      cpu_per_request: {
        gateway_over_engine_floor: cpuRatio('gateway', 'fastify_engine_floor'),
        gateway_over_engine_log_floor: cpuRatio('gateway', 'fastify_engine_log_floor'),
        engine_log_floor_over_engine_floor: cpuRatio('fastify_engine_log_floor', 'fastify_engine_floor'),
        subscribed_over_engine_floor: cpuRatio('gateway_subscribed', 'fastify_engine_floor'),
        engine_floor_over_floor: cpuRatio('fastify_engine_floor', 'fastify_floor'),
        ...(base
          ? {
              base_over_engine_floor: cpuRatio('base_gateway', 'fastify_engine_floor'),
              base_subscribed_over_engine_floor: cpuRatio('base_gateway_subscribed', 'fastify_engine_floor'),
            }
          : {}),
      },
      events_subscriber: { ...subscriber, none_lost: subscriber.result_events >= subscriber.answered_2xx && subscriber.id_holes === 0 },
      targets: { requests_per_s: 5000, gateway_to_engine_floor: 0.8 },
    };
  } finally {
    for (const close of closers.reverse()) await close().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((done) => server.close(() => done()));
}

/**
 * A `/v1/events` reader in its own process (curl), writing the stream to `file`; `stop` ends it and counts
 * the result events it got and the holes in their ids (an event the stream skipped).
 */
async function readEvents(url: string, file: string): Promise<{ stop(): Promise<{ results: number; holes: number }> }> {
  const fd = openSync(file, 'w');
  const curl = spawn('curl', ['-sN', url], { stdio: ['ignore', fd, 'ignore'] });
  closeSync(fd);
  // The stream is open once its first comment arrived.
  for (let i = 0; i < 100 && readFileSync(file, 'utf8').length === 0; i++) await new Promise((r) => setTimeout(r, 20));
  return {
    stop: async () => {
      const exited = new Promise((done) => curl.once('exit', done));
      curl.kill();
      await exited;
      let results = 0;
      let holes = 0;
      let last: number | null = null;
      for (const block of readFileSync(file, 'utf8').split('\n\n')) {
        const id = /^id: (\d+)$/m.exec(block);
        if (!id) continue;
        const n = Number(id[1]);
        if (last !== null && n !== last + 1) holes++;
        last = n;
        if (/^event: ToolResultEvent$/m.test(block)) results++;
      }
      return { results, holes };
    },
  };
}

async function load(url: string, seconds: number): Promise<Load> {
  const cpu = process.cpuUsage();
  const { stdout } = await run(
    process.execPath,
    [AUTOCANNON, '--json', '-c', '50', '-d', String(seconds), '-m', 'POST', '-H', 'content-type=application/json', '-b', BODY, url],
    { maxBuffer: 64 * 1024 * 1024 },
  );
  const r = JSON.parse(stdout) as {
    requests: { average: number; total: number };
    latency: { p50: number; p99: number };
    errors: number;
    non2xx: number;
  };
  const used = process.cpuUsage(cpu);
  return {
    cpu_us_per_request: Math.round(((used.user + used.system) / Math.max(1, r.requests.total)) * 10) / 10,
    requests_per_s: Math.round(r.requests.average),
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    requests: r.requests.total,
    errors: r.errors,
    non_2xx: r.non2xx,
  };
}
