import { realpathSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TreeIndex } from '../runners/remote/tree.js';
import { checkProtocol, type ProtocolLog } from '../runners/shared/protocol.js';
import { DEFAULT_GRANTS, type Engine, type ToolResult } from '../src/index.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

let nats: NatsServer;
const workers = new Workers();
let project: TempProject;
let engine: Engine | null = null;

beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats.stop();
});
afterEach(async () => {
  await engine?.close();
  engine = null;
  await workers.closeAll();
  project?.remove();
});

const tools = {
  'echo.json': definition({ id: 'echo', entry: 'echo.js' }),
  'echo.js': 'export default async function run(input) { return { echoed: input, version: 1 }; }',
  'copy.json': definition({ id: 'copy', entry: 'copy.js', permissions: ['exec.js', 'vfs.read:/**', 'vfs.write:/out/**'] }),
  'copy.js': `export default async function run(input, ctx) {
    const text = await ctx.vfs.read(input.from);
    const bytes = await ctx.vfs.read(input.from, { encoding: 'bytes' });
    await ctx.vfs.write('/out/copy.txt', text.toUpperCase());
    await ctx.vfs.write('/out/raw.bin', bytes);
    if (input.fail) throw new Error('failed after writing');
    return { length: text.length, bytes: bytes.length, listed: (await ctx.vfs.list('/out')).entries.map((e) => e.name) };
  }`,
};

describe('remote calls', () => {
  it('get the secrets they were granted in their input, and what they hand back is scrubbed on the engine as a local call’s', async () => {
    const secret = 'ghp_remote_secret_value_0123456789';
    project = tempProject(
      {
        'sign.json': definition({ id: 'sign', entry: 'sign.js', permissions: ['exec.js', 'secret.read:token', 'vfs.write:/out/**'] }),
        'sign.js': `export default async function run(input, ctx) {
          ctx.log('info', 'token is ' + input.token);
          await ctx.vfs.write('/out/token.txt', input.token);
          if (input.fail) throw new Error('bad token ' + input.token);
          return { token: input.token, length: input.token.length };
        }`,
      },
      'arium-remote-',
    );
    const worker = await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url, {}, { secrets: { token: secret }, grants: [...DEFAULT_GRANTS, 'secret.read:token'] });
    const seen: string[] = [];
    engine.events.on('event', (event) => seen.push(JSON.stringify(event)));
    const ok = await engine.call('sign', { token: { $secret: 'token' } });
    expect(ok).toMatchObject({ ok: true, data: { token: '[secret:token]', length: secret.length }, meta: { worker: { id: worker.id } } });
    expect(JSON.stringify(ok.meta)).not.toContain(secret);
    const failed = await engine.call('sign', { token: { $secret: 'token' }, fail: true });
    expect(failed).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR' } });
    expect(JSON.stringify(failed)).not.toContain(secret);
    expect(JSON.stringify(failed)).toContain('bad token [secret:token]');
    // The file keeps the value (the tool wrote it); the diff and the events do not show it.
    expect(engine.vfs.read('/out/token.txt').toString()).toBe(secret);
    expect(seen.length).toBeGreaterThan(3);
    expect(seen.join('\n')).not.toContain(secret);
  });

  it('run on a worker, read and write the engine’s VFS through its checks, and commit only on success', async () => {
    project = tempProject(tools, 'arium-remote-');
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    engine.vfs.write('/in/a.txt', 'hello');
    const echoed = await engine.call('echo', { x: 1 });
    expect(echoed).toMatchObject({ ok: true, data: { echoed: { x: 1 }, version: 1 } });
    expect(echoed.meta).toMatchObject({ worker: { id: expect.any(String) } });

    const failed = await engine.call('copy', { from: '/in/a.txt', fail: true });
    expect(failed).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR' } });
    // The stack names the tool's file as on the engine's machine, not by the worker's cache folder.
    expect((failed as { error: { stack: string } }).error.stack).toMatch(/tools\/copy\.js:\d+/);
    expect(engine.vfs.exists('/out/copy.txt')).toBe(false);

    const copied = await engine.call('copy', { from: '/in/a.txt' });
    expect(copied).toMatchObject({ ok: true, data: { length: 5, bytes: 5, listed: ['copy.txt', 'raw.bin'] } });
    expect(engine.vfs.read('/out/copy.txt').toString()).toBe('HELLO');
    expect(engine.vfs.read('/out/raw.bin').toString()).toBe('hello');
  });

  it('are balanced across two workers, concurrent callers included', async () => {
    project = tempProject(tools, 'arium-remote-');
    const a = await workers.start(nats.url);
    const b = await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    const active = engine;
    const results = await Promise.all(Array.from({ length: 24 }, (_, i) => active.call('echo', { i })));
    const by = new Map<string, number>();
    for (const r of results) {
      expect(r.ok ? 'ok' : JSON.stringify(r.error)).toBe('ok');
      const id = (r.meta as unknown as { worker: { id: string } }).worker.id;
      by.set(id, (by.get(id) ?? 0) + 1);
    }
    expect([...by.keys()].sort()).toEqual([a.id, b.id].sort());
  });

  it('commit concurrent read-modify-writes one after another, as local calls do', async () => {
    project = tempProject(
      {
        'bump.json': definition({ id: 'bump', entry: 'bump.js', permissions: ['exec.js', 'vfs.read:/n.txt', 'vfs.write:/n.txt'] }),
        'bump.js': `export default async function run(input, ctx) {
          const n = Number(await ctx.vfs.read('/n.txt'));
          await ctx.vfs.write('/n.txt', String(n + 1));
          return { was: n };
        }`,
      },
      'arium-remote-',
    );
    await workers.start(nats.url);
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url, {}, { policy: { max_attempts: 20 } });
    engine.vfs.write('/n.txt', '0');
    const active = engine;
    const results = await Promise.all(Array.from({ length: 12 }, () => active.call('bump', {})));
    expect(results.filter((r) => !r.ok).map((r) => (r.ok ? null : r.error.code))).toEqual([]);
    expect(engine.vfs.read('/n.txt').toString()).toBe('12');
    expect(results.map((r) => (r.ok ? (r.data as { was: number }).was : -1)).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
  });

  it('cannot read what the caller was not granted: DENIED comes back and nothing is written', async () => {
    project = tempProject(tools, 'arium-remote-');
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    engine.vfs.write('/secret/key.txt', 'k');
    const denials: unknown[] = [];
    engine.events.on('security', (e) => denials.push(e));
    const r = await engine.call('copy', { from: '/secret/key.txt' }, { grants: ['exec.js', 'vfs.read:/in/**', 'vfs.write:/out/**'] });
    expect(r).toMatchObject({ ok: false, error: { code: 'DENIED', stage: 'permission' } });
    expect(engine.vfs.exists('/out/copy.txt')).toBe(false);
    expect(denials).toEqual([expect.objectContaining({ permission: 'vfs.read', operation: 'read /secret/key.txt' })]);
  });

  it('run a tool edited on the engine’s machine in its new version on the next call', async () => {
    project = tempProject(tools, 'arium-remote-');
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    expect(await engine.call('echo', {})).toMatchObject({ ok: true, data: { version: 1 } });
    project.write('echo.js', 'export default async function run(input) { return { echoed: input, version: 2 }; }');
    expect(await engine.call('echo', {})).toMatchObject({ ok: true, data: { version: 2 } });
  });

  it('run a tool defined in YAML, whose definition travels in the tools folder with its code', async () => {
    project = tempProject(
      {
        'shout.yaml': 'id: shout\ndescription: a YAML tool\nrunner: js-runner\nentry: shout.js\npermissions: [exec.js]\nschema: {type: object}\n',
        'shout.js': 'export default async function run() { return { said: "yes" }; }',
      },
      'arium-remote-',
    );
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    const result = await engine.call('shout', {});
    expect(result).toMatchObject({ ok: true, data: { said: 'yes' } });
    expect(result.meta.worker).toBeDefined();
    expect(new TreeIndex().tree(realpathSync(project.tools)).entries.map(([path]) => path)).toEqual(['shout.js', 'shout.yaml']);
  });

  it('show the worker in status, in the result and error events, and on the events subject when asked', async () => {
    project = tempProject(tools, 'arium-remote-');
    const worker = await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url, { events: true });
    const { connect } = await import('@nats-io/transport-node');
    const observer = await connect({ servers: nats.url });
    const published: string[] = [];
    observer.subscribe('arium.test.events', {
      callback: (_e, m) => {
        published.push(JSON.parse(m.string()).event.type);
      },
    });
    await observer.flush();
    const seen: Array<{ type: string; worker?: { id: string } }> = [];
    engine.events.on('result', (e) => seen.push(e));
    engine.events.on('error', (e) => seen.push(e));
    await engine.call('echo', {});
    await engine.call('copy', { from: '/nowhere.txt' });
    expect(seen.map((e) => [e.type, e.worker?.id])).toEqual([
      ['ToolResultEvent', worker.id],
      ['ToolErrorEvent', worker.id],
    ]);
    const live = engine;
    const status = await engine.status();
    expect(status.remote).toMatchObject({ connected: true, deployment: 'test', in_flight: 0 });
    // A worker's load is as of its last heartbeat: one sent while the calls ran may be the last heard yet.
    await expect.poll(async () => (await live.status()).remote?.workers[0]?.in_flight, { timeout: 2000, interval: 50 }).toBe(0);
    expect((await live.status()).remote?.workers).toEqual([
      expect.objectContaining({ id: worker.id, runners: ['js-runner', 'py-runner', 'wasm-runner'], capacity: 4, in_flight: 0 }),
    ]);
    // How it isolates calls, from its runners' status: what an operator checks before sending it tools.
    await expect
      .poll(async () => (await live.status()).remote?.workers[0]?.sandboxes, { timeout: 5000, interval: 50 })
      .toMatchObject({
        'js-runner': { available: true, isolation: expect.stringMatching(/^isolated-vm/) },
        'py-runner': { available: true, isolation: expect.stringMatching(/^(bubblewrap|unshare|rlimits)$/) },
      });
    expect(status.runners['js-runner']).toMatchObject({ available: true, remote: { workers: 1, capacity: 4 } });
    await observer.flush();
    for (let i = 0; i < 100 && published.length < 4; i++) await new Promise((r) => setTimeout(r, 20));
    expect(published).toEqual(['ToolInvocationEvent', 'ToolResultEvent', 'ToolInvocationEvent', 'ToolErrorEvent']);
    await observer.close();
  });

  it('exchange only messages the protocol description admits', async () => {
    project = tempProject(tools, 'arium-remote-');
    const log = checkProtocol(true) as ProtocolLog;
    try {
      await workers.start(nats.url);
      engine = await remoteEngine(project, nats.url);
      engine.vfs.write('/in/a.txt', 'hello');
      expect(await engine.call('copy', { from: '/in/a.txt' })).toMatchObject({ ok: true });
      expect(await engine.call('copy', { from: '/in/a.txt', fail: true })).toMatchObject({ ok: false });
      expect(await engine.call('copy', { from: '/in/a.txt' }, { grants: ['exec.js', 'vfs.read:/none/**'] })).toMatchObject({
        ok: false,
        error: { code: 'DENIED' },
      });
    } finally {
      checkProtocol(false);
    }
    expect(log.violations).toEqual([]);
    for (const kind of ['call', 'tree', 'blob', 'vfs']) expect(log.seen[`remote.toWorker ${kind}`]).toBeGreaterThan(0);
    for (const kind of ['tree', 'blob', 'vfs', 'done', 'hb']) expect(log.seen[`remote.fromWorker ${kind}`]).toBeGreaterThan(0);
  });

  it('move files, inputs and outputs larger than one NATS message, in parts', async () => {
    project = tempProject(
      {
        'big.json': definition({
          id: 'big',
          entry: 'big.js',
          permissions: ['exec.js', 'vfs.read:/in/**', 'vfs.write:/out/**'],
          limits: { output_bytes: 4 * 1024 * 1024 },
        }),
        'big.js': `export default async function run(input, ctx) {
          const bytes = await ctx.vfs.read('/in/big.bin', { encoding: 'bytes' });
          await ctx.vfs.write('/out/big.bin', bytes);
          return { read: bytes.length, input: input.s.length, echo: input.s + input.s };
        }`,
      },
      'arium-remote-',
    );
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url);
    const big = Buffer.alloc(3 * 1024 * 1024);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) % 251;
    engine.vfs.write('/in/big.bin', big);
    // Just under the input limit (1 MiB of JSON): with the definition, the call message is over max_payload.
    const s = 'ab'.repeat(523_500);
    const log = checkProtocol(true) as ProtocolLog;
    let r: ToolResult;
    try {
      r = await engine.call('big', { s });
    } finally {
      checkProtocol(false);
    }
    expect(log.violations).toEqual([]);
    // The input, the read's answer (engine → worker), the write's request and the output (worker → engine) all went in parts.
    expect(log.seen['remote.toWorker parts']).toBeGreaterThan(0);
    expect(log.seen['remote.fromWorker part']).toBeGreaterThan(4);
    expect(log.seen['remote.fromWorker put']).toBeGreaterThan(4);
    expect(log.seen['remote.fromWorker large']).toBeGreaterThanOrEqual(2);
    expect(r.ok ? { read: (r.data as { read: number }).read, input: (r.data as { input: number }).input } : r.error).toEqual({
      read: big.length,
      input: s.length,
    });
    expect((r as { data: { echo: string } }).data.echo).toBe(s + s);
    expect(engine.vfs.read('/out/big.bin').equals(big)).toBe(true);
  });

  it('fail UNAVAILABLE at once when no worker runs the runner', async () => {
    project = tempProject(tools, 'arium-remote-');
    engine = await remoteEngine(project, nats.url);
    const r = await engine.call('echo', {});
    expect(r).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', stage: 'transport', retryable: true, details: { reason: 'no-workers' } } });
  });
});
