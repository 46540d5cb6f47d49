// Two `arium serve` processes in front of one project kept in NATS JetStream: the one whose engine holds
// the project answers the other's requests over NATS (src/daemon/forward.ts). Real nats-server, real
// gateways (bin/arium.js on dist/), real HTTP, a real kill -9.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type JetStreamCluster, startJetStream } from './support/jetstream.js';

const ROOT = join(import.meta.dirname, '..');
const BIN = join(ROOT, 'bin', 'arium.js');
const SECRET = 'a-secret-the-gateways-share-0123456789abcdef';
const API_KEY = 'gateway-key-for-the-forwarding-tests';
const LEASE_MS = 1000;

interface Served {
  child: ChildProcess;
  address: string;
  exited: Promise<number | null>;
  output(): string;
}

async function serve(workspace: string): Promise<Served> {
  const child = spawn(process.execPath, ['--no-node-snapshot', BIN, '--workspace', workspace, '--project', 'p', 'serve', '--port', '0', '--json'], {
    env: { PATH: process.env.PATH ?? '', ARIUM_FORWARD_SECRET: SECRET, ARIUM_API_KEY: API_KEY },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (c: Buffer) => {
    output += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    output += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const deadline = Date.now() + 60_000;
  while (!/"address"/.test(output)) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`arium serve did not start: ${output}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  const { address } = JSON.parse(output.slice(output.indexOf('{'), output.indexOf('}', output.indexOf('"address"')) + 1)) as { address: string };
  return { child, address, exited, output: () => output };
}

interface Answer {
  status: number;
  body: { ok?: boolean; error?: { code: string; message: string; retryable: boolean }; output?: unknown; [k: string]: unknown };
}

async function ask(gateway: Served, path: string, body?: unknown): Promise<Answer> {
  const response = await fetch(`${gateway.address}/p/p${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Answer['body'] };
}

const write = (gateway: Served, path: string, content: string) => ask(gateway, '/v1/tools/fs.write:run', { input: { path, content } });

/** Asks until the answer is not a retryable UNAVAILABLE (a gateway taking the project over), within a bound. */
async function settled(request: () => Promise<Answer>, ms = 60_000): Promise<Answer> {
  const deadline = Date.now() + ms;
  for (;;) {
    const answer = await request();
    const retry = answer.status === 503 || (answer.body.error?.code === 'UNAVAILABLE' && answer.body.error.retryable);
    if (!retry || Date.now() > deadline) return answer;
    await new Promise((r) => setTimeout(r, 100));
  }
}

let cluster: JetStreamCluster;
beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist', 'src', 'index.js'))) throw new Error('dist/ is missing: run npm run build (npm test does) before this suite');
  cluster = await startJetStream(1);
});
afterAll(() => cluster?.remove());

// Two gateway processes, a nats-server and hundreds of requests on a machine that may be loaded.
describe('gateways in front of one project in JetStream', { timeout: 120_000 }, () => {
  const roots: string[] = [];
  const gateways: Served[] = [];
  let names = 0;
  let storeName = '';
  let workspaces: string[] = [];

  /** Two workspaces (two machines' copies of the project), each with its gateway; `a` opens the project first. */
  const setUp = async (warm = true): Promise<[Served, Served]> => {
    storeName = `gw-${process.pid}-${++names}`;
    const config = {
      store: { nats: { servers: cluster.urls }, name: storeName, lease_ms: LEASE_MS, forward: { secret_env: 'ARIUM_FORWARD_SECRET' } },
      // The profile of HTTP callers: fs.delete is not offered to them.
      surfaces: { http: { tools: ['fs.write', 'fs.read', 'fs.list', 'vfs.snapshot'] } },
      audit_log: true,
    };
    workspaces = [0, 1].map(() => {
      const root = mkdtempSync(join(tmpdir(), 'arium-gateways-'));
      roots.push(root);
      mkdirSync(join(root, 'p', 'tools'), { recursive: true });
      writeFileSync(join(root, 'p', 'arium.json'), JSON.stringify(config));
      return root;
    });
    const a = await serve(workspaces[0] as string);
    gateways.push(a);
    if (warm) expect((await ask(a, '/v1/tools')).status).toBe(200);
    const b = await serve(workspaces[1] as string);
    gateways.push(b);
    return [a, b];
  };
  afterEach(async () => {
    for (const g of gateways.splice(0)) {
      if (g.child.exitCode === null) {
        g.child.kill('SIGKILL');
        await g.exited;
      }
    }
    for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
  });

  it('serves 8 concurrent callers alternating gateways: every write acknowledged is there', async () => {
    const [a, b] = await setUp();
    // B does not open the project A holds: it forwards.
    const listed = await settled(() => ask(b, '/v1/tools'));
    expect(listed.status).toBe(200);
    expect((listed.body.tools as { id: string }[]).map((t) => t.id).sort()).toEqual(['fs.list', 'fs.read', 'fs.write', 'vfs.snapshot']);
    await Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let n = 1; n <= 50; n++) {
          const answer = await write((c + n) % 2 === 0 ? a : b, `/c${c}/${n}.txt`, `${c}:${n}`);
          expect(answer.status, JSON.stringify(answer.body)).toBe(200);
          expect(answer.body.ok).toBe(true);
        }
      }),
    );
    await Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let n = 1; n <= 50; n++) {
          const read = await ask(n % 2 === 0 ? b : a, `/v1/fs/read?path=${encodeURIComponent(`/c${c}/${n}.txt`)}`);
          expect(read.status).toBe(200);
          expect(read.body.text).toBe(`${c}:${n}`);
        }
      }),
    );
    // Snapshots through the gateway that does not hold the project, seen through the one that does.
    const snap = await ask(b, '/v1/snapshots', { label: 'after-burst' });
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    const snapshots = await ask(a, '/v1/snapshots');
    expect((snapshots.body.snapshots as { label: string | null }[]).map((s) => s.label)).toContain('after-burst');
    const listing = await ask(b, '/v1/fs/list?path=/c3&at=after-burst');
    expect((listing.body.entries as unknown[]).length).toBe(50);
  });

  it('lets the gateway that loses the race for the lease forward instead of failing', async () => {
    const [a, b] = await setUp(false);
    // Both see nobody holding the project and open it; one takes the lease, the other is refused it.
    const [first, second] = await Promise.all([write(a, '/a.txt', 'a'), write(b, '/b.txt', 'b')]);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    for (const gateway of [a, b]) {
      expect((await ask(gateway, '/v1/fs/read?path=/a.txt')).body.text).toBe('a');
      expect((await ask(gateway, '/v1/fs/read?path=/b.txt')).body.text).toBe('b');
    }
  });

  it('applies the profile and grants on the holder to forwarded calls', async () => {
    const [a, b] = await setUp();
    expect((await settled(() => write(b, '/kept.txt', 'kept'))).status).toBe(200);
    // fs.delete is not offered to HTTP callers: not through the holder, not through the other gateway.
    for (const gateway of [a, b]) {
      const deleted = await ask(gateway, '/v1/tools/fs.delete:run', { input: { path: '/kept.txt' } });
      expect(deleted.status).toBe(404);
      expect(deleted.body.error?.code).toBe('UNKNOWN_TOOL');
    }
    // A run narrowed to reading cannot write, forwarded or not.
    for (const gateway of [a, b]) {
      const narrowed = await ask(gateway, '/v1/tools/fs.write:run', { input: { path: '/kept.txt', content: 'x' }, grants: ['vfs.read'] });
      expect(narrowed.body.error?.code).toBe('DENIED');
    }
    expect((await ask(a, '/v1/fs/read?path=/kept.txt')).body.text).toBe('kept');
    // The forwarding gateway checks the caller's key before anything is forwarded.
    const unkeyed = await fetch(`${b.address}/p/p/v1/tools`);
    expect(unkeyed.status).toBe(401);
  });

  it('runs a forwarded call as the caller the forwarding gateway named, which a client cannot name itself', async () => {
    const [a, b] = await setUp();
    const run = (gateway: Served, traceId: string, extra: Record<string, string> = {}) =>
      fetch(`${gateway.address}/p/p/v1/tools/fs.write:run`, {
        method: 'POST',
        headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json', 'x-trace-id': traceId, ...extra },
        body: JSON.stringify({ input: { path: `/${traceId}.txt`, content: traceId } }),
      }).then((r) => r.status);
    expect(await settled(async () => ({ status: await run(b, 'via-b'), body: {} }))).toMatchObject({ status: 200 });
    // Headers naming the caller count on the holder only with its own process's token.
    const spoof = { 'x-arium-forwarded-caller': 'admin', 'x-arium-forward-token': 'a'.repeat(64) };
    expect(await run(a, 'spoof-a', spoof)).toBe(200);
    expect(await run(b, 'spoof-b', spoof)).toBe(200);
    const log = join(workspaces[0] as string, 'p', '.arium', 'audit.jsonl');
    const callers = async () => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const lines = existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : [];
        const invocations = lines
          .map((l) => JSON.parse(l) as { type: string; trace_id: string; caller: string })
          .filter((e) => e.type === 'ToolInvocationEvent');
        const found = new Map(invocations.map((e) => [e.trace_id, e.caller]));
        if (found.size >= 3 || Date.now() > deadline) return found;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    const found = await callers();
    expect(found.get('via-b')).toBe('http:127.0.0.1');
    expect(found.get('spoof-a')).toBe('http:127.0.0.1');
    expect(found.get('spoof-b')).toBe('http:127.0.0.1');
  });

  it('refuses a forged request on the bus, and a replayed one', async () => {
    const [a, b] = await setUp();
    expect((await settled(() => write(b, '/first.txt', 'one'))).status).toBe(200);
    const nc = await connect({ servers: cluster.urls });
    try {
      const subject = `arium.forward.${storeName}`;
      const meta = () => ({
        v: 1,
        method: 'POST',
        path: '/v1/tools/fs.write:run',
        headers: { 'content-type': 'application/json' },
        caller: 'forger',
        ip: '127.0.0.1',
        at: Date.now(),
        nonce: Math.random().toString(16).slice(2).padEnd(32, '0').slice(0, 32),
      });
      const message = (path: string) => Buffer.from(`${JSON.stringify(meta())}\n${JSON.stringify({ input: { path, content: 'forged' } })}`);
      // No signature, then one made with another secret.
      const unsigned = await nc.request(subject, message('/forged-1.txt'), { timeout: 10_000 });
      expect(unsigned.string()).toMatch(/not signed with the shared secret/);
      const wrong = natsHeaders();
      const forged = message('/forged-2.txt');
      wrong.set('Arium-Signature', createHmac('sha256', 'not-the-secret').update(forged).digest('hex'));
      expect((await nc.request(subject, forged, { timeout: 10_000, headers: wrong })).string()).toMatch(/not signed with the shared secret/);
      // A request captured on the bus and sent again.
      const captured = new Promise<{ data: Uint8Array; signature: string }>((resolve) => {
        const sub = nc.subscribe(subject, {
          callback: (_e, msg) => {
            sub.unsubscribe();
            resolve({ data: msg.data, signature: msg.headers?.get('Arium-Signature') ?? '' });
          },
        });
      });
      await nc.flush();
      expect((await write(b, '/replayed.txt', 'once')).status).toBe(200);
      const { data, signature } = await captured;
      const again = natsHeaders();
      again.set('Arium-Signature', signature);
      const replay = await nc.request(subject, data, { timeout: 10_000, headers: again });
      expect(replay.string()).toMatch(/already received once \(a replay\)/);
    } finally {
      await nc.close();
    }
    for (const path of ['/forged-1.txt', '/forged-2.txt']) {
      const read = await ask(a, `/v1/fs/read?path=${path}`);
      expect(read.body.error?.code).toBe('NOT_FOUND');
    }
  });

  it('refuses a request or an answer larger than a NATS message, saying so', async () => {
    const [a, b] = await setUp();
    expect((await settled(() => ask(b, '/v1/tools'))).status).toBe(200);
    const big = await write(b, '/big.txt', 'x'.repeat(1_050_000));
    expect(big.status).toBe(413);
    expect(big.body.error?.code).toBe('INPUT_TOO_LARGE');
    expect(big.body.error?.message).toMatch(/over the NATS server's max_payload \(1048576\), so this gateway cannot forward it/);
    // 900 KB of quotes: 1.8 MB once escaped in the JSON answer of a read.
    for (let i = 0; i < 3; i++) {
      expect((await ask(a, '/v1/tools/fs.write:run', { input: { path: '/quotes.txt', content: '"'.repeat(300_000), append: true } })).status).toBe(
        200,
      );
    }
    expect((await ask(a, '/v1/fs/read?path=/quotes.txt')).status).toBe(200);
    const read = await ask(b, '/v1/fs/read?path=/quotes.txt');
    expect(read.status).toBe(502);
    expect(read.body.error?.code).toBe('OUTPUT_LIMIT');
    expect(read.body.error?.message).toMatch(/cannot go back to the gateway that forwarded the request/);
  });

  it('takes over when the holder is killed (-9) mid-burst, losing no acknowledged write', async () => {
    const [a, b] = await setUp();
    expect((await settled(() => ask(b, '/v1/tools'))).status).toBe(200);
    const acked = new Map<string, string>();
    let killed = false;
    let retried = 0;
    const burst = Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let n = 1; n <= 40; n++) {
          const path = `/k${c}/${n}.txt`;
          for (;;) {
            // After the kill only B is there; A's connection is refused.
            const gateway = killed || (c + n) % 2 === 1 ? b : a;
            const answer = await write(gateway, path, `${c}:${n}`).catch(() => null);
            if (answer?.status === 200 && answer.body.ok) {
              acked.set(path, `${c}:${n}`);
              break;
            }
            // Refused connections (A dead), or UNAVAILABLE while B waits out A's lease: the same write again.
            if (answer && !(answer.status === 503 || answer.body.error?.retryable)) throw new Error(JSON.stringify(answer.body));
            retried++;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
      }),
    );
    while (acked.size < 100) await new Promise((r) => setTimeout(r, 20));
    const before = new Map(acked);
    a.child.kill('SIGKILL');
    killed = true;
    await a.exited;
    await burst;
    expect(retried).toBeGreaterThan(0);
    expect(acked.size).toBe(8 * 40);
    for (const [path, content] of [...before, ...acked]) {
      const read = await ask(b, `/v1/fs/read?path=${encodeURIComponent(path)}`);
      expect(read.body.text, path).toBe(content);
    }
  });
});
