import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type NatsProvider, natsProviderKind, parseNatsSettings } from '../src/providers/nats.js';
import type { ProviderCallContext, ProviderDeps, ProviderOutcome } from '../src/providers/provider.js';
import { type Satellite, SatelliteError, type SatelliteTool, satellite } from '../src/satellite/index.js';
import { encodeMessage } from '../src/satellite/wire.js';
import { type NatsServer, natsServerPath, startNats } from './support/nats.js';
import { pySatellite, type SatelliteProcess, tsSatellite } from './support/satellites.js';

const hasNats = natsServerPath() !== null || Boolean(process.env.CI);
/** The tools of fixtures/satellites/echo.mjs (echo, sleep), which `arium provide` and the process satellites serve too. */
let echoTools: { tools: SatelliteTool[]; version: string };
let nats: NatsServer;
let deploymentSeq = 0;
const started: Array<{ close(): Promise<void> }> = [];
const processes: SatelliteProcess[] = [];
const logged: string[] = [];

const deps: ProviderDeps = { projectDir: process.cwd(), secret: () => undefined, log: (level, message) => logged.push(`${level}: ${message}`) };

function ctx(extra: Partial<ProviderCallContext> = {}): ProviderCallContext {
  return { signal: new AbortController().signal, timeoutMs: 10_000, runId: 'run-1', traceId: 'trace-1', ...extra };
}

async function provider(deployment: string, extra: Record<string, unknown> = {}): Promise<NatsProvider> {
  const settings = natsProviderKind.parse({ servers: nats.url, deployment, heartbeat_timeout_ms: 1500, ...extra }, '/providers/sat/nats');
  const p = natsProviderKind.create('sat', settings, deps) as NatsProvider;
  started.push(p);
  await p.start();
  return p;
}

async function sat(deployment: string, node_id: string, options: { tools?: SatelliteTool[]; version?: string } = {}): Promise<Satellite> {
  const s = await satellite({
    servers: nats.url,
    deployment,
    node_id,
    tools: options.tools ?? echoTools.tools,
    version: options.version ?? echoTools.version,
    heartbeat_ms: 100,
  });
  started.push(s);
  return s;
}

async function until<T>(what: string, probe: () => T | undefined | null | false, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const names = (p: NatsProvider) =>
  p
    .tools()
    .map((t) => t.name)
    .join(',');
const ok = (outcome: ProviderOutcome) => {
  if (!outcome.ok) throw new Error(`${outcome.code}: ${outcome.message}`);
  return outcome.data as Record<string, unknown>;
};
const satellitesOf = (p: NatsProvider) => (p.status().details?.satellites ?? []) as Array<Record<string, unknown>>;
const inFlight = (p: NatsProvider) => p.status().details?.in_flight as number;
const nextDeployment = () => `t${process.pid}-${++deploymentSeq}`;

beforeAll(async () => {
  echoTools = (await import(['..', 'fixtures', 'satellites', 'echo.mjs'].join('/'))) as typeof echoTools;
  if (hasNats) nats = await startNats();
});
afterEach(async () => {
  await Promise.allSettled(started.splice(0).map((s) => s.close()));
  await Promise.allSettled(processes.splice(0).map((p) => p.kill()));
});
afterAll(async () => {
  await nats?.stop();
});

describe('nats provider settings', () => {
  it.each([
    [[], /must be an object/],
    [{ servers: [] }, /servers must be a NATS URL or a non-empty list/],
    [{ servers: 'nats://127.0.0.1:4222', deployment: 'a.b' }, /deployment must be 1 to 64 letters/],
    [{ servers: 'nats://127.0.0.1:4222', heartbeat_timeout_ms: 10 }, /heartbeat_timeout_ms must be a whole number of ms from 50/],
    [{ servers: 'nats://127.0.0.1:4222', port: 1 }, /unknown key "port"/],
    [{ credentials: { user: 'a' } }, /credentials and tls go with servers/],
    [{ servers: 'nats://127.0.0.1:4222', credentials: { pass: 'x' } }, /credentials: unknown key "pass"/],
  ])('refuses %j with a clear error', (raw, message) => {
    expect(() => parseNatsSettings(raw, '/providers/sat/nats')).toThrow(message);
  });

  it('refuses a server other machines reach without credentials, when it starts', async () => {
    const p = natsProviderKind.create('sat', parseNatsSettings({ servers: 'nats://10.1.2.3:4222' }, '/p'), deps);
    await expect(p.start()).rejects.toThrow(/refusing to use the NATS server at 10\.1\.2\.3.*without credentials/);
    expect(p.status()).toMatchObject({ state: 'failed', error: expect.stringMatching(/without credentials/) });
  });
});

describe.skipIf(!hasNats)('nats provider with satellites on a real nats-server', () => {
  it('offers the tools of live satellites, lists them in status, and withdraws them when they leave', async () => {
    const deployment = nextDeployment();
    const a = await sat(deployment, 'node-a');
    const p = await provider(deployment);
    // The ping at start makes a satellite already running known before start() returns.
    expect(names(p)).toBe('echo,sleep');
    expect(p.tools()[0]).toMatchObject({ name: 'echo', description: 'Returns its input and the node that ran it', inputSchema: { type: 'object' } });
    let changes = 0;
    p.onToolsChanged(() => changes++);
    await sat(deployment, 'node-b', { tools: [{ name: 'extra', inputSchema: { type: 'object' }, handler: () => 1 }] });
    await until('the tool of node-b', () => names(p) === 'echo,extra,sleep');
    expect(changes).toBe(1);
    const satellites = satellitesOf(p);
    expect(satellites.map((s) => [s.node_id, s.tools, s.version, s.sdk])).toEqual([
      ['node-a', ['echo', 'sleep'], '1.0.0', 'ts'],
      ['node-b', ['extra'], '1.0.0', 'ts'],
    ]);
    expect(satellites[0]).toMatchObject({ capacity: 16, in_flight: 0, last_heartbeat: expect.any(String) });
    // A satellite that closes says it is leaving: its tools go at once, not after the timeout.
    await a.close();
    await until('node-a gone', () => names(p) === 'extra');
    expect(changes).toBe(2);
    // Repeated heartbeats of an unchanged satellite are not changes.
    await new Promise((r) => setTimeout(r, 300));
    expect(changes).toBe(2);
  });

  it("shares the NATS server of the project's remote section when it names no servers", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'arium-nats-remote-'));
    try {
      writeFileSync(join(dir, 'arium.json'), JSON.stringify({ remote: { nats: nats.url, deployment: 'shared', runners: ['js-runner'] } }));
      await sat('shared', 'node-s');
      await sat('own', 'node-o', { tools: [{ name: 'mine', inputSchema: { type: 'object' }, handler: () => 1 }] });
      const shared = natsProviderKind.create('sat', natsProviderKind.parse({}, '/p'), { ...deps, projectDir: dir }) as NatsProvider;
      const own = natsProviderKind.create('sat', natsProviderKind.parse({ deployment: 'own' }, '/p'), { ...deps, projectDir: dir }) as NatsProvider;
      started.push(shared, own);
      await Promise.all([shared.start(), own.start()]);
      expect([names(shared), names(own)]).toEqual(['echo,sleep', 'mine']);
      expect(shared.status().details).toMatchObject({ deployment: 'shared' });
      const none = natsProviderKind.create('sat', natsProviderKind.parse({}, '/p'), { ...deps, projectDir: tmpdir() });
      await expect(none.start()).rejects.toThrow(/no servers given, and arium.json cannot be read/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('balances calls across satellites offering the same tool through its queue group, with concurrent callers', async () => {
    const deployment = nextDeployment();
    await sat(deployment, 'node-a');
    await sat(deployment, 'node-b');
    const p = await provider(deployment);
    await until('both nodes', () => satellitesOf(p).length === 2);
    const outcomes = await Promise.all(Array.from({ length: 40 }, (_, i) => p.call('echo', { text: `n${i}` }, ctx())));
    const data = outcomes.map(ok);
    expect(data.map((d) => d.text)).toEqual(Array.from({ length: 40 }, (_, i) => `n${i}`));
    expect(new Set(data.map((d) => d.node))).toEqual(new Set(['node-a', 'node-b']));
  });

  it('targets a node by id, and says why when that node cannot take the call', async () => {
    const deployment = nextDeployment();
    await sat(deployment, 'node-a');
    await sat(deployment, 'node-b', {
      tools: [{ name: 'other', inputSchema: { type: 'object' }, handler: (input, c) => ({ keys: Object.keys(input), node: c.node_id }) }],
    });
    const p = await provider(deployment);
    await until('both nodes', () => satellitesOf(p).length === 2);
    for (let i = 0; i < 5; i++) expect(ok(await p.call('echo', {}, ctx({ nodeId: 'node-a' }))).node).toBe('node-a');
    // The listed schema offers node_id beside the tool's own fields; it routes, and the satellite never sees it.
    expect(p.tools().find((t) => t.name === 'other')?.inputSchema).toMatchObject({ properties: { node_id: { type: 'string' } } });
    expect(ok(await p.call('other', { a: 1, node_id: 'node-b' }, ctx()))).toEqual({ keys: ['a'], node: 'node-b' });
    expect(await p.call('other', { node_id: 'node-a' }, ctx())).toMatchObject({ ok: false, code: 'INVALID_INPUT' });
    const gone = await p.call('echo', {}, ctx({ nodeId: 'node-z' }));
    expect(gone).toMatchObject({ ok: false, code: 'UNAVAILABLE', retryable: true, details: { node_id: 'node-z', nodes: ['node-a'] } });
    expect(gone.ok === false && gone.message).toMatch(/node-z.*is not live/);
    const wrong = await p.call('echo', {}, ctx({ nodeId: 'node-b' }));
    expect(wrong).toMatchObject({ ok: false, code: 'INVALID_INPUT', details: { node_id: 'node-b', nodes: ['node-a'] } });
    expect(wrong.ok === false && wrong.message).toMatch(/node-b" does not offer echo; nodes that do: node-a/);
  });

  it('fails AMBIGUOUS when live nodes offer one tool in different versions, unless the call names one or only one is left', async () => {
    const deployment = nextDeployment();
    const v1 = await sat(deployment, 'node-v1', { version: '1.0.0' });
    await sat(deployment, 'node-v2', { version: '2.0.0' });
    const p = await provider(deployment);
    await until('both nodes', () => satellitesOf(p).length === 2);
    const ambiguous = await p.call('echo', {}, ctx());
    expect(ambiguous).toMatchObject({
      ok: false,
      code: 'AMBIGUOUS',
      retryable: false,
      details: {
        candidates: [
          { version: '1.0.0', nodes: ['node-v1'] },
          { version: '2.0.0', nodes: ['node-v2'] },
        ],
      },
    });
    expect(ambiguous.ok === false && ambiguous.message).toMatch(
      /2 satellites offer echo in 2 different definitions or versions.*name the node with node_id/,
    );
    expect(p.tools()[0]?.annotations).toMatchObject({ satellite: { variants: 2 } });
    expect(ok(await p.call('echo', {}, ctx({ nodeId: 'node-v2' }))).node).toBe('node-v2');
    // The sole eligible node is chosen without node_id.
    await v1.close();
    await until('node-v1 gone', () => satellitesOf(p).length === 1);
    expect(ok(await p.call('echo', {}, ctx())).node).toBe('node-v2');
  });

  it('ends a call UNAVAILABLE and retryable when its satellite is killed mid-call, and withdraws its tools', async () => {
    const deployment = nextDeployment();
    const doomed = await tsSatellite(nats.url, deployment, 'node-doomed');
    processes.push(doomed);
    const p = await provider(deployment);
    expect(names(p)).toBe('echo,sleep');
    const changed = new Promise<void>((resolve) => p.onToolsChanged(() => resolve()));
    const logs: string[] = [];
    const call = p.call('sleep', { ms: 30_000 }, ctx({ timeoutMs: 60_000, onLog: (l) => logs.push(l.message) }));
    await until('the call running', () => logs.length > 0 && inFlight(p) === 1);
    await doomed.kill();
    const outcome = await call;
    expect(outcome).toMatchObject({ ok: false, code: 'UNAVAILABLE', retryable: true, details: { node_id: 'node-doomed' } });
    expect(outcome.ok === false && outcome.message).toMatch(/node-doomed (went away|stopped answering) while it ran sleep.*may be retried/);
    expect(logs).toEqual(['sleeping 30000 ms']);
    await changed;
    expect(p.tools()).toEqual([]);
    expect(await p.call('echo', {}, ctx())).toMatchObject({ ok: false, code: 'UNAVAILABLE', retryable: true });
  });

  it('lets the calls of a killed satellite be retried on the one left', async () => {
    const deployment = nextDeployment();
    const doomed = await tsSatellite(nats.url, deployment, 'node-1');
    const kept = await tsSatellite(nats.url, deployment, 'node-2');
    processes.push(doomed, kept);
    const p = await provider(deployment);
    await until('both nodes', () => satellitesOf(p).length === 2);
    const calls = Array.from({ length: 6 }, () => p.call('sleep', { ms: 1500 }, ctx()));
    await until('the calls taken by the satellites', () => satellitesOf(p).reduce((n, x) => n + (x.in_flight as number), 0) === 6);
    await doomed.kill();
    const outcomes = await Promise.all(calls);
    const failed = outcomes.filter((o) => !o.ok);
    expect(failed.length).toBeGreaterThan(0);
    for (const o of failed) expect(o).toMatchObject({ code: 'UNAVAILABLE', retryable: true, details: { node_id: 'node-1' } });
    for (const o of outcomes.filter((o) => o.ok)) expect((o as { data: { node: string } }).data.node).toBe('node-2');
    // Retried, they reach the node that is left.
    const retried = await Promise.all(failed.map(() => p.call('sleep', { ms: 10 }, ctx())));
    for (const o of retried) expect(ok(o).node).toBe('node-2');
  });

  it('serves the tools of a Python satellite, with its logs and its own error codes', async () => {
    const deployment = nextDeployment();
    const py = await pySatellite(nats.url, deployment, 'node-py');
    processes.push(py);
    const p = await provider(deployment);
    await until('the python tools', () => names(p) === 'pyecho,pyfail,pysleep');
    expect(satellitesOf(p)).toMatchObject([{ node_id: 'node-py', sdk: 'python', version: 'py-1' }]);
    const logs: string[] = [];
    const outcomes = await Promise.all(
      Array.from({ length: 8 }, (_, i) => p.call('pyecho', { text: `x${i}` }, ctx({ onLog: (l) => logs.push(l.message) }))),
    );
    expect(outcomes.map((o) => ok(o).text)).toEqual(Array.from({ length: 8 }, (_, i) => `x${i}`));
    expect(ok(outcomes[0] as ProviderOutcome)).toEqual({ text: 'x0', node: 'node-py', lang: 'python' });
    expect(logs).toHaveLength(8);
    expect(await p.call('pyfail', {}, ctx())).toMatchObject({
      ok: false,
      code: 'INVALID_INPUT',
      message: 'pyfail always refuses its input',
      details: { why: 'on purpose' },
    });
    expect(ok(await p.call('pysleep', { ms: 300 }, ctx()))).toEqual({ slept: 300, node: 'node-py' });
  });

  it('runs a Python satellite script until SIGTERM, when it leaves at once and exits cleanly', async () => {
    const deployment = nextDeployment();
    const script = new URL('../fixtures/satellites/py_tools.py', import.meta.url).pathname;
    const child = spawn('python3', [script, nats.url, deployment, 'node-run'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, PYTHONPATH: new URL('../sdk/python', import.meta.url).pathname },
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const p = await provider(deployment, { heartbeat_timeout_ms: 60_000, accept_ms: 10_000 });
    await until('the python tools', () => names(p) === 'pyecho,pyfail,pysleep');
    const running = p.call('pysleep', { ms: 1000 }, ctx());
    // Taken by the satellite (its heartbeat counts it), not only sent.
    await until('the call running on the satellite', () => satellitesOf(p)[0]?.in_flight === 1);
    child.kill('SIGTERM');
    // It finishes the call it has, says it is leaving (its tools go long before the 60 s timeout), and exits 0.
    expect(ok(await running)).toEqual({ slept: 1000, node: 'node-run' });
    await until('the tools withdrawn', () => names(p) === '');
    expect(await exited).toBe(0);
  });

  it('ends a call UNAVAILABLE and retryable when a Python satellite is killed mid-call', async () => {
    const deployment = nextDeployment();
    const py = await pySatellite(nats.url, deployment, 'node-py');
    processes.push(py);
    const p = await provider(deployment);
    await until('the python tools', () => names(p) === 'pyecho,pyfail,pysleep');
    const call = p.call('pysleep', { ms: 30_000 }, ctx({ timeoutMs: 60_000 }));
    await until('the call taken by the satellite', () => satellitesOf(p)[0]?.in_flight === 1);
    await py.kill();
    expect(await call).toMatchObject({ ok: false, code: 'UNAVAILABLE', retryable: true, details: { node_id: 'node-py' } });
  });

  it("reports a handler's failure as TOOL_ERROR, never as a code of the gate", async () => {
    const deployment = nextDeployment();
    await sat(deployment, 'node-a', {
      tools: [
        {
          name: 'boom',
          inputSchema: { type: 'object' },
          handler: () => {
            throw new Error('it broke');
          },
        },
        {
          name: 'claims',
          inputSchema: { type: 'object' },
          handler: () => {
            throw new SatelliteError('DENIED', 'pretends the gate refused');
          },
        },
        { name: 'circular', inputSchema: { type: 'object' }, handler: () => 10n },
      ],
    });
    const p = await provider(deployment);
    expect(await p.call('boom', {}, ctx())).toMatchObject({ ok: false, code: 'TOOL_ERROR', message: 'it broke', retryable: false });
    expect(await p.call('claims', {}, ctx())).toMatchObject({ ok: false, code: 'TOOL_ERROR', message: 'pretends the gate refused' });
    expect(await p.call('circular', {}, ctx())).toMatchObject({ ok: false, code: 'INVALID_OUTPUT', message: expect.stringMatching(/not JSON/) });
  });

  it('cancels the call on the satellite when the caller aborts, and times out a call past its budget', async () => {
    const deployment = nextDeployment();
    let aborted = 0;
    await sat(deployment, 'node-a', {
      tools: [
        {
          name: 'wait',
          inputSchema: { type: 'object' },
          handler: (_input, c) =>
            new Promise((_resolve, reject) =>
              c.signal.addEventListener('abort', () => {
                aborted++;
                reject(new Error('stopped'));
              }),
            ),
        },
      ],
    });
    const p = await provider(deployment);
    const controller = new AbortController();
    const call = p.call('wait', {}, ctx({ signal: controller.signal }));
    await until('the call running', () => satellitesOf(p)[0]?.in_flight === 1);
    controller.abort();
    expect(await call).toMatchObject({ ok: false, code: 'CANCELLED' });
    await until('the handler aborted', () => aborted === 1);
    expect(await p.call('wait', {}, ctx({ timeoutMs: 300 }))).toMatchObject({ ok: false, code: 'TIMEOUT', retryable: true });
    await until('the handler aborted again', () => aborted === 2);
  });

  it('answers BUSY past a satellite’s capacity and queue', async () => {
    const deployment = nextDeployment();
    const s = await satellite({
      servers: nats.url,
      deployment,
      node_id: 'small',
      capacity: 1,
      queue: 0,
      heartbeat_ms: 100,
      tools: [{ name: 'slow', inputSchema: { type: 'object' }, handler: () => new Promise((r) => setTimeout(() => r('done'), 500)) }],
    });
    started.push(s);
    const p = await provider(deployment);
    const [first, second] = await Promise.all([p.call('slow', {}, ctx()), p.call('slow', {}, ctx())]);
    expect([first, second].filter((o) => o.ok)).toHaveLength(1);
    expect([first, second].find((o) => !o.ok)).toMatchObject({
      code: 'BUSY',
      retryable: true,
      message: expect.stringMatching(/runs 1 calls and has 0 waiting/),
    });
  });

  it('drops hostile or oversized heartbeats, and keeps no prototype keys from a satellite', async () => {
    const deployment = nextDeployment();
    const p = await provider(deployment);
    const nc = await (await import('@nats-io/transport-node')).connect({ servers: nats.url });
    try {
      const hb = (tools: unknown, node_id = 'forger') => ({
        t: 'hb',
        v: 1,
        node_id,
        version: '1',
        capacity: 1,
        in_flight: 0,
        interval_ms: 100,
        tools,
      });
      nc.publish(`arium.${deployment}.sat.hb`, encodeMessage(hb(Array.from({ length: 300 }, (_, i) => ({ name: `t${i}`, inputSchema: {} })))));
      nc.publish(`arium.${deployment}.sat.hb`, encodeMessage(hb([{ name: 'a.b', inputSchema: {} }], 'dots')));
      nc.publish(
        `arium.${deployment}.sat.hb`,
        new TextEncoder().encode(
          JSON.stringify(hb([{ name: 'ok', inputSchema: { type: 'object' } }], 'proto')).replace(
            '"type":"object"',
            '"type":"object","__proto__":{"polluted":true}',
          ),
        ),
      );
      await nc.flush();
      await until('the one good heartbeat', () => names(p) === 'ok');
      expect(Object.hasOwn(p.tools()[0]?.inputSchema ?? {}, '__proto__')).toBe(false);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect(logged.join('\n')).toMatch(/ignoring the heartbeats of satellite forger: it announces 300 tools, past the limit of 256/);
      expect(logged.join('\n')).toMatch(/ignoring the heartbeats of satellite dots: tools\[0\]\.name must be 1 to 64/);
      // Without further heartbeats the forged satellite is forgotten after the provider's timeout.
      await until('the forged satellite forgotten', () => names(p) === '', 5000);
    } finally {
      await nc.close();
    }
  });

  it("takes a raw satellite's answers as untrusted: no gate codes, no prototype keys", async () => {
    const deployment = nextDeployment();
    const nc = await (await import('@nats-io/transport-node')).connect({ servers: nats.url });
    try {
      // A satellite written without the SDK: it claims DENIED for one tool and answers the other with a __proto__ key.
      nc.subscribe(`arium.${deployment}.sat.node.raw.*`, {
        callback: (_error, msg) => {
          const tool = msg.subject.split('.').at(-1);
          msg.respond(encodeMessage({ t: 'accept', node_id: 'raw' }));
          const done =
            tool === 'claims'
              ? JSON.stringify({ t: 'done', ok: false, error: { code: 'DENIED', message: 'the gate said no' } })
              : '{"t":"done","ok":true,"data":{"a":1,"__proto__":{"polluted":true}}}';
          msg.respond(new TextEncoder().encode(done));
        },
      });
      const tools = [
        { name: 'claims', inputSchema: { type: 'object' } },
        { name: 'proto', inputSchema: { type: 'object' } },
      ];
      const beat = () =>
        nc.publish(
          `arium.${deployment}.sat.hb`,
          encodeMessage({ t: 'hb', v: 1, node_id: 'raw', version: '1', capacity: 1, in_flight: 0, interval_ms: 100, tools }),
        );
      const timer = setInterval(beat, 100);
      try {
        beat();
        const p = await provider(deployment);
        await until('the raw satellite', () => names(p) === 'claims,proto');
        expect(await p.call('claims', {}, ctx())).toMatchObject({ ok: false, code: 'TOOL_ERROR', message: 'the gate said no', retryable: false });
        const data = ok(await p.call('proto', {}, ctx()));
        expect(data).toEqual({ a: 1 });
        expect(Object.hasOwn(data, '__proto__')).toBe(false);
      } finally {
        clearInterval(timer);
      }
    } finally {
      await nc.close();
    }
  });

  it('refuses a call too large for the server, and says how large', async () => {
    const deployment = nextDeployment();
    await sat(deployment, 'node-a');
    const p = await provider(deployment);
    const outcome = await p.call('echo', { text: 'x'.repeat(2 * 1024 * 1024) }, ctx());
    expect(outcome).toMatchObject({
      ok: false,
      code: 'INPUT_TOO_LARGE',
      message: expect.stringMatching(/past the NATS server's max_payload of 1048576/),
    });
  });
});

describe.skipIf(!hasNats)('nats provider across a restart of the NATS server', () => {
  it('fails calls UNAVAILABLE while the server is gone, and offers the tools again when it is back', async () => {
    const own = await startNats();
    try {
      const deployment = nextDeployment();
      const s = await satellite({ servers: own.url, deployment, node_id: 'node-r', heartbeat_ms: 100, tools: echoTools.tools });
      started.push(s);
      const settings = natsProviderKind.parse({ servers: own.url, deployment, heartbeat_timeout_ms: 400 }, '/providers/sat/nats');
      const p = natsProviderKind.create('sat', settings, deps) as NatsProvider;
      started.push(p);
      await p.start();
      expect(names(p)).toBe('echo,sleep');
      await own.stop();
      await until('the provider restarting', () => p.status().state === 'restarting');
      expect(await p.call('echo', {}, ctx())).toMatchObject({ ok: false, code: 'UNAVAILABLE', retryable: true });
      await until('the tools withdrawn', () => names(p) === '');
      await own.start();
      await until('the provider ready again', () => p.status().state === 'ready');
      await until('the tools back', () => names(p) === 'echo,sleep');
      expect(ok(await p.call('echo', { text: 'back' }, ctx()))).toEqual({ text: 'back', node: 'node-r' });
      expect(p.status().restarts).toBe(1);
    } finally {
      await Promise.allSettled(started.splice(0).map((x) => x.close()));
      await own.stop();
    }
  });
});

describe.skipIf(!hasNats)('nats provider in an engine', () => {
  it('serves a satellite tool through the engine', async () => {
    const { tempProject, openEngine } = await import('./support/project.js');
    const deployment = nextDeployment();
    await sat(deployment, 'node-a');
    const project = tempProject();
    writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ providers: { sat: { nats: { servers: nats.url, deployment }, tools: ['*'] } } }));
    const engine = await openEngine(project);
    try {
      const result = await engine.call('sat.echo', { text: 'through the gate' });
      expect(result, JSON.stringify(result)).toMatchObject({ ok: true, data: { text: 'through the gate', node: 'node-a' } });
    } finally {
      await engine.close();
      project.remove();
    }
  });
});
