import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it, vi } from 'vitest';
import { socketFetch } from '../src/daemon/socket-fetch.js';
import {
  connect,
  createEngine,
  type Engine,
  type EngineEvent,
  type ProjectCallOptions,
  type ProjectClient,
  type ProjectHandle,
  ProjectLockedError,
  type ToolResult,
} from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';

/**
 * A daemon holds project `d` of a temporary workspace: the built gateway on the daemon's Unix socket,
 * in a child process (fixtures/daemon/socket-gateway.mjs; `npm test` builds dist/ first). Clients
 * connect() to it from this process; an in-process engine on project `e`, a copy of `d`, gives what
 * the same requests must give.
 */
const ROOT = resolve(import.meta.dirname, '..');
const DIST = pathToFileURL(`${join(ROOT, 'dist')}/`).href;
const FIXTURE = join(ROOT, 'fixtures', 'daemon', 'socket-gateway.mjs');

let root: string;
let workspace: string;
let runtimeDir: string;
let daemon: ChildProcess;
let daemonOut = '';
let engine: Engine;
const clients: ProjectClient[] = [];
const savedRuntimeDir = process.env.XDG_RUNTIME_DIR;

function writeProject(name: string): void {
  const dir = join(workspace, name);
  mkdirSync(join(dir, 'tools'), { recursive: true });
  writeFileSync(
    join(dir, 'arium.json'),
    JSON.stringify({ policy: { max_attempts: 64 }, approvals: { rules: [{ tool: 'fs.delete' }] }, audit_log: true }),
  );
  writeFileSync(
    join(dir, 'tools', 'bump.json'),
    JSON.stringify({
      id: 'bump',
      description: 'adds one to /n.txt',
      runner: 'js-runner',
      entry: 'bump.js',
      schema: { type: 'object' },
      permissions: ['exec.js', 'vfs.read:/n.txt', 'vfs.write:/n.txt'],
    }),
  );
  writeFileSync(
    join(dir, 'tools', 'bump.js'),
    `export default async function run(input, ctx) {
      const n = Number(await ctx.vfs.read('/n.txt'));
      await ctx.vfs.write('/n.txt', String(n + 1));
      return { was: n };
    }`,
  );
  mkdirSync(join(dir, 'skills', 'count'), { recursive: true });
  writeFileSync(
    join(dir, 'skills', 'count', 'SKILL.md'),
    '---\nname: count\ndescription: Count with bump\ntools: [bump]\narguments:\n  - name: times\n    required: true\n---\nCall bump {{times}} times.\n',
  );
}

async function startDaemon(): Promise<ChildProcess> {
  daemonOut = '';
  const child = spawn(process.execPath, ['--no-node-snapshot', FIXTURE, DIST, workspace, 'd'], {
    env: { ...process.env, XDG_RUNTIME_DIR: runtimeDir },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  child.stdout?.on('data', (chunk: Buffer) => {
    daemonOut += chunk.toString();
  });
  await new Promise<void>((ready, fail) => {
    const onExit = (code: number | null) => fail(new Error(`the daemon exited (${code}) before it was ready`));
    child.once('exit', onExit);
    const wait = setInterval(() => {
      if (!daemonOut.includes('READY')) return;
      clearInterval(wait);
      child.off('exit', onExit);
      ready();
    }, 20);
  });
  return child;
}

async function stopDaemon(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once('exit', done));
  child.kill(signal);
  await exited;
}

async function client(name: string, start = false): Promise<ProjectClient> {
  const made = await connect({ workspace, project: 'd', name, start, env: { XDG_RUNTIME_DIR: runtimeDir } });
  clients.push(made);
  return made;
}

/** A result or event with what differs between any two runs (ids, times) replaced by placeholders. */
function stable(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stable);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, v]) => [
      key,
      ['run_id', 'trace_id', 'duration_ms', 'at', 'requested_at', 'expires_at', 'id'].includes(key) && v !== null
        ? `<${key}>`
        : // A backup snapshot's message names the snapshot it was taken for.
          typeof v === 'string' && key === 'message'
          ? v.replace(/\b[0-9a-f]{12}\b/g, '<id>')
          : stable(v),
    ]),
  );
}

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist', 'src', 'surfaces', 'http', 'gateway.js'))) {
    throw new Error('dist/ is missing: run npm run build (npm test does) before this suite');
  }
  root = mkdtempSync(join(tmpdir(), 'arium-connect-'));
  workspace = join(root, 'ws');
  runtimeDir = join(root, 'run');
  mkdirSync(runtimeDir, { mode: 0o700 });
  // createEngine looks for the daemon's record where this process's session keeps it.
  process.env.XDG_RUNTIME_DIR = runtimeDir;
  writeProject('d');
  writeProject('e');
  // Its HTTP profile may write only under /pub.
  mkdirSync(join(workspace, 'g', 'tools'), { recursive: true });
  writeFileSync(join(workspace, 'g', 'arium.json'), JSON.stringify({ surfaces: { http: { grants: ['vfs.read:/**', 'vfs.write:/pub/**'] } } }));
  mkdirSync(join(workspace, 'tcp', 'tools'), { recursive: true });
  daemon = await startDaemon();
  engine = await createEngine({ workspace, project: 'e', watch: false });
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await engine?.close();
  if (daemon) await stopDaemon(daemon, 'SIGTERM');
  if (savedRuntimeDir === undefined) delete process.env.XDG_RUNTIME_DIR;
  else process.env.XDG_RUNTIME_DIR = savedRuntimeDir;
  rmSync(root, { recursive: true, force: true });
});

describe('connect(): a project the daemon holds, from another process', () => {
  it('Engine and the client are both ProjectHandles', async () => {
    expectTypeOf<Engine>().toMatchTypeOf<ProjectHandle>();
    expectTypeOf<ProjectClient>().toMatchTypeOf<ProjectHandle>();
    const a = await client('types');
    const handles: ProjectHandle[] = [engine, a];
    for (const handle of handles) {
      expect(handle.project).toMatch(/^[de]$/);
      expect((await handle.tools()).map((t) => t.id)).toContain('bump');
      expect(await handle.tool('fs.read')).toMatchObject({ id: 'fs.read', runner: 'builtin' });
      expect(await handle.tool('no.such')).toBeUndefined();
    }
  });

  it.each<[string, string | { capability: string }, unknown, ProjectCallOptions?]>([
    ['a write', 'fs.write', { path: '/same.txt', content: 'hello' }],
    ['a read', 'fs.read', { path: '/same.txt' }],
    ['a JS tool', 'bump', {}],
    ['input its schema refuses', 'fs.read', { path: 42 }],
    ['a missing file', 'fs.read', { path: '/none.txt' }],
    ['a permission it lacks', 'fs.write', { path: '/same.txt', content: 'no' }, { grants: ['vfs.read:/**'] }],
    ['an unknown tool', 'fs.reed', {}],
    ['an unknown capability', { capability: 'nothing' }, {}],
    ['a bad trace id', 'fs.read', { path: '/same.txt' }, { trace_id: 'not a trace id' }],
  ])('gives what engine.call gives for %s', async (_name, id, input, options) => {
    const a = await client('agent-a');
    if (id === 'bump') {
      await a.call('fs.write', { path: '/n.txt', content: '0' });
      await engine.call('fs.write', { path: '/n.txt', content: '0' });
    }
    const [remote, local] = await Promise.all([a.call(id, input, options), engine.call(id, input, options)]);
    if (_name === 'a bad trace id') {
      // The gateway checks the trace id with its schema before the engine does: same code and stage.
      expect(remote).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT', stage: 'validation', type: 'ToolError' } });
      expect(local).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT', stage: 'validation', type: 'ToolError' } });
      return;
    }
    expect(stable(remote)).toEqual(stable(local));
  });

  it('delivers the call events of a connected client, naming it as the caller', async () => {
    const a = await client('agent-events');
    const seen: EngineEvent[] = [];
    const results: EngineEvent[] = [];
    const listener = (event: EngineEvent) => seen.push(event);
    a.events.on('event', listener);
    a.events.on('result', (event) => results.push(event));
    const local: EngineEvent[] = [];
    engine.events.on('event', (event) => local.push(event));
    const r = await a.call('fs.write', { path: '/ev.txt', content: 'x' });
    await engine.call('fs.write', { path: '/ev.txt', content: 'x' }, { caller: 'connect:agent-events' });
    expect(r.ok).toBe(true);
    await vi.waitFor(() =>
      expect(seen.filter((e) => e.run_id === r.meta.run_id).map((e) => e.type)).toEqual(['ToolInvocationEvent', 'ToolResultEvent']),
    );
    const mine = seen.filter((e) => e.run_id === r.meta.run_id);
    expect(mine[0]).toMatchObject({ caller: 'connect:agent-events', tool: 'fs.write' });
    expect(results.map((e) => e.run_id)).toContain(r.meta.run_id);
    // The same objects the engine's bus gives its listeners.
    expect(stable(mine)).toEqual(stable(local.slice(-2)));
    a.events.off('event', listener);
    expect(a.events.listenerCount('event')).toBe(0);
  });

  it('lists and reads skills as the engine does', async () => {
    const a = await client('skills');
    expect(await a.skills()).toEqual(engine.skills());
    expect((await a.skills()).map((s) => s.name)).toEqual(['count']);
    expect(await a.skill('count')).toEqual(engine.skill('count'));
    expect((await a.skill('count'))?.body).toContain('Call bump {{times}} times.');
    expect(await a.skill('no-such-skill')).toBeUndefined();
  });

  it('snapshots, diffs and restores as the engine does', async () => {
    const roundTrip = async (p: ProjectHandle) => {
      await p.call('fs.write', { path: '/doc.txt', content: 'one\n' });
      const snapshot = await p.snapshot({ label: 'before', message: 'first' });
      await p.call('fs.write', { path: '/doc.txt', content: 'two\n' });
      const diff = await p.diff('before', 'live', { path: '/doc.txt' });
      const stat = await p.diff('before', 'live', { stat_only: true });
      const restored = await p.restore('before');
      const read = await p.call('fs.read', { path: '/doc.txt' });
      const log = (await p.snapshots()).map((s) => s.label);
      return { snapshot, diff, stat, restored, read, log };
    };
    const a = await client('agent-history');
    const remote = await roundTrip(a);
    const local = await roundTrip(engine);
    expect(remote.read).toMatchObject({ ok: true, data: { content: 'one\n' } });
    expect(remote.diff.files).toEqual([expect.objectContaining({ path: '/doc.txt', status: 'modified' })]);
    expect(remote.log).toContain('before');
    expect(stable(remote)).toEqual(stable(local));
    // An unknown snapshot is thrown as the engine throws it.
    await expect(a.restore('no-such-label')).rejects.toMatchObject({ name: 'ToolFailure', code: 'NOT_FOUND' });
    expect(() => engine.restore('no-such-label')).toThrow(expect.objectContaining({ code: 'NOT_FOUND' }));
  });

  it('shows a waiting call to another client, which approves or denies it', async () => {
    const a = await client('agent-asks');
    const b = await client('person');
    await a.call('fs.write', { path: '/del-1.txt', content: 'x' });
    await a.call('fs.write', { path: '/del-2.txt', content: 'x' });
    const approved = a.call('fs.delete', { path: '/del-1.txt' });
    const pendingFor = async (path: string) => {
      let found: Awaited<ReturnType<ProjectClient['approvals']>>[number] | undefined;
      await vi.waitFor(async () => {
        found = (await b.approvals()).find((p) => (p.input as { path: string }).path === path);
        expect(found).toBeDefined();
      });
      return found as NonNullable<typeof found>;
    };
    const first = await pendingFor('/del-1.txt');
    expect(first).toMatchObject({ tool: 'fs.delete', caller: 'connect:agent-asks' });
    const decision = await b.approve(first.run_id, { by: 'tester' });
    expect(decision).toMatchObject({ run_id: first.run_id, outcome: 'approved', by: 'tester' });
    expect(await approved).toMatchObject({ ok: true, meta: { run_id: first.run_id } });
    await expect(b.approve(first.run_id, { by: 'tester' })).rejects.toMatchObject({ name: 'ToolFailure', code: 'ALREADY_RESOLVED' });

    const denied = a.call('fs.delete', { path: '/del-2.txt' });
    const second = await pendingFor('/del-2.txt');
    expect(await b.deny(second.run_id, { by: 'tester', reason: 'keep it' })).toMatchObject({ outcome: 'denied', reason: 'keep it' });
    expect(await denied).toMatchObject({ ok: false, error: { code: 'APPROVAL_DENIED' } });
    expect(await a.call('fs.read', { path: '/del-2.txt' })).toMatchObject({ ok: true });
    // Approved beforehand by the caller, as engine.call's `approval` option does.
    expect(await a.call('fs.delete', { path: '/del-2.txt' }, { approval: { by: 'tester' } })).toMatchObject({ ok: true });
  });

  it('loses no update of 32 concurrent read-modify-writes from two clients and the daemon itself', async () => {
    const a = await client('rmw-a');
    const b = await client('rmw-b');
    await a.call('fs.write', { path: '/n.txt', content: '0' });
    daemonOut = daemonOut.replace(/BUMPED[^\n]*\n/g, '');
    daemon.stdin?.write('bump 8\n');
    const remote = await Promise.all([
      ...Array.from({ length: 12 }, () => a.call<{ was: number }>('bump', {})),
      ...Array.from({ length: 12 }, () => b.call<{ was: number }>('bump', {})),
    ]);
    await vi.waitFor(() => expect(daemonOut).toMatch(/BUMPED .*\n/), { timeout: 60_000 });
    const inDaemon = JSON.parse(/BUMPED (.*)\n/.exec(daemonOut)?.[1] as string) as ToolResult<{ was: number }>[];
    const all = [...remote, ...inDaemon];
    expect(all.filter((r) => !r.ok)).toEqual([]);
    expect(all.map((r) => (r.ok ? r.data.was : -1)).sort((x, y) => x - y)).toEqual(Array.from({ length: 32 }, (_, i) => i));
    expect(await a.call('fs.read', { path: '/n.txt' })).toMatchObject({ ok: true, data: { content: '32' } });
  }, 120_000);

  it('cancels the call in the daemon when its signal aborts', async () => {
    const a = await client('agent-abort');
    const watcher = await client('watcher');
    const seen: EngineEvent[] = [];
    watcher.events.on('event', (event) => seen.push(event));
    await watcher.events.listenerCount('event');
    await a.call('fs.write', { path: '/keep.txt', content: 'x' });
    const controller = new AbortController();
    const call = a.call('fs.delete', { path: '/keep.txt' }, { signal: controller.signal, trace_id: 'abort-me' });
    await vi.waitFor(async () => expect((await watcher.approvals()).some((p) => p.trace_id === 'abort-me')).toBe(true));
    controller.abort();
    expect(await call).toMatchObject({
      ok: false,
      error: { code: 'CANCELLED', stage: 'execution', retryable: false },
      meta: { trace_id: 'abort-me' },
    });
    // The daemon ended the wait because the request closed: nothing waits, nothing was deleted.
    await vi.waitFor(() =>
      expect(seen.find((e) => e.trace_id === 'abort-me' && e.type === 'ToolErrorEvent')).toMatchObject({ error: { code: 'CANCELLED' } }),
    );
    expect(seen.find((e) => e.trace_id === 'abort-me' && e.type === 'ApprovalResolved')).toMatchObject({ outcome: 'cancelled' });
    expect((await watcher.approvals()).some((p) => p.trace_id === 'abort-me')).toBe(false);
    expect(await a.call('fs.read', { path: '/keep.txt' })).toMatchObject({ ok: true });
  });

  it('tells createEngine on the held project to connect() instead', async () => {
    const failure = await createEngine({ workspace, project: 'd', watch: false }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(ProjectLockedError);
    expect((failure as ProjectLockedError).holder).toBe(daemon.pid);
    expect((failure as Error).message).toBe(
      `The workspace's Arium daemon (pid ${daemon.pid}) holds project "d"; use connect({ workspace, project }) to share it from this process, or the CLI and MCP, which go through the daemon`,
    );
  });

  it('answers UNAVAILABLE when the daemon stops during a call, and finds the next daemon', async () => {
    const a = await client('agent-survivor', true);
    const seen: EngineEvent[] = [];
    a.events.on('event', (event) => seen.push(event));
    await a.call('fs.write', { path: '/gone.txt', content: 'x' });
    const call = a.call('fs.delete', { path: '/gone.txt' }, { trace_id: 'lost-answer' });
    await vi.waitFor(async () => expect((await a.approvals()).some((p) => p.trace_id === 'lost-answer')).toBe(true));
    const pid = daemon.pid;
    await stopDaemon(daemon, 'SIGKILL');
    const lost = await call;
    expect(lost).toMatchObject({ ok: false, error: { type: 'ToolError', code: 'UNAVAILABLE', stage: 'transport', retryable: true } });
    expect(lost.ok ? '' : lost.error.message).toBe(
      `The Arium engine (daemon pid ${pid}) stopped before it answered: whether the call committed is unknown (if it ran, its trace_id lost-answer is in the events and the audit log)`,
    );
    // No daemon now: the next call starts one (`arium daemon run`), and the delete never ran.
    const again = await a.call('fs.read', { path: '/gone.txt' });
    expect(again).toMatchObject({ ok: true, data: { content: 'x' } });
    const started = a.daemon?.pid;
    expect(started).toBeTypeOf('number');
    expect(started).not.toBe(pid);
    // The event stream found the new daemon too, and started from its first event.
    await vi.waitFor(() => expect(seen.some((e) => e.run_id === again.meta.run_id && e.type === 'ToolResultEvent')).toBe(true), {
      timeout: 10_000,
    });
    // The suites after this one use the test's own daemon again.
    await a.close();
    process.kill(started as number, 'SIGTERM');
    await vi.waitFor(
      () => {
        expect(() => process.kill(started as number, 0)).toThrow();
      },
      { timeout: 15_000, interval: 50 },
    );
    daemon = await startDaemon();
  }, 60_000);
});

describe('what a client over the socket may ask for', () => {
  it('narrows the grants it asks for within the surface profile, never past it', async () => {
    const g = await connect({ workspace, project: 'g', name: 'narrow', start: false, env: { XDG_RUNTIME_DIR: runtimeDir } });
    clients.push(g);
    const wide = ['vfs.read:/**', 'vfs.write:/**'];
    expect(await g.call('fs.write', { path: '/pub/a.txt', content: 'x' }, { grants: ['vfs.read:/**', 'vfs.write:/pub/**'] })).toMatchObject({
      ok: true,
    });
    expect(await g.call('fs.write', { path: '/secret.txt', content: 'x' }, { grants: wide })).toMatchObject({
      ok: false,
      error: { code: 'DENIED', stage: 'permission' },
    });
    expect(await g.call('fs.write', { path: '/secret.txt', content: 'x' })).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    expect(await g.call('fs.read', { path: '/pub/a.txt' }, { grants: ['vfs.read:/**', 'not a grant'] })).toMatchObject({
      ok: false,
      error: { code: 'INVALID_INPUT', stage: 'validation', details: { option: 'grants' } },
    });
  });

  it('names its caller over the socket only: over TCP the header is ignored', async () => {
    const gateway = await createGateway({ workspace, project: 'tcp', inspector: false, engineOptions: { watch: false } });
    const socket = join(runtimeDir, 'other.sock');
    const servers: Server[] = [];
    try {
      await gateway.app.ready();
      const listen = (bind: (server: Server, done: () => void) => void) =>
        new Promise<Server>((done) => {
          const server = createServer((req, res) => gateway.app.routing(req, res));
          servers.push(server);
          bind(server, () => done(server));
        });
      const tcp = await listen((server, done) => server.listen(0, '127.0.0.1', done));
      await listen((server, done) => server.listen(socket, done));
      const callers: Array<string | null> = [];
      const run = async (fetcher: typeof fetch, base: string, client: string, status = 200) => {
        const response = await fetcher(`${base}/p/tcp/v1/tools/fs.list:run`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-arium-client': client },
          body: JSON.stringify({ input: { path: '/' } }),
        });
        expect(response.status).toBe(status);
      };
      const engineOf = async () => {
        const opened = gateway.engines().get('tcp');
        if (!opened) throw new Error('not open');
        return opened;
      };
      await run(fetch, `http://127.0.0.1:${(tcp.address() as AddressInfo).port}`, 'cli');
      (await engineOf()).events.on('invocation', (event) => callers.push(event.caller));
      await run(fetch, `http://127.0.0.1:${(tcp.address() as AddressInfo).port}`, 'cli');
      await run(socketFetch(socket), 'http://localhost', 'connect:named');
      // A name the header cannot carry is refused, not run under another name.
      await run(socketFetch(socket), 'http://localhost', 'no spaces allowed', 400);
      expect(callers).toEqual(['http:127.0.0.1', 'connect:named']);
    } finally {
      for (const server of servers) server.closeAllConnections();
      await Promise.all(servers.map((server) => new Promise((done) => server.close(done))));
      await gateway.close();
    }
  });
});

describe('arium/client', () => {
  it("loads none of the engine: only the daemon's thin modules and the leaf modules of errors and events", () => {
    // The built modules' own imports, type imports gone: what importing arium/client really runs.
    const seen = new Set<string>();
    const packages = new Set<string>();
    const queue = [join(ROOT, 'dist', 'src', 'client.js')];
    for (let file = queue.pop(); file !== undefined; file = queue.pop()) {
      if (seen.has(file)) continue;
      seen.add(file);
      for (const [, from, bare] of readFileSync(file, 'utf8').matchAll(
        /(?:import|export)[^'"]*?from\s*['"]([^'"]+)['"]|import\s*['"]([^'"]+)['"]/g,
      )) {
        const specifier = (from ?? bare) as string;
        if (specifier.startsWith('.')) queue.push(resolve(dirname(file), specifier));
        else packages.add(specifier);
      }
    }
    expect([...seen].map((file) => relative(join(ROOT, 'dist', 'src'), file)).sort()).toEqual(
      [
        'client.js',
        'daemon/connect.js',
        'daemon/event-stream.js',
        'daemon/link.js',
        'daemon/paths.js',
        'daemon/socket-fetch.js',
        'daemon/wire.js',
        'errors.js',
        'events.js',
      ].sort(),
    );
    expect([...packages].every((name) => name.startsWith('node:'))).toBe(true);
    const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, { import: string }> };
    expect(manifest.exports['./client']?.import).toBe('./dist/src/client.js');
  });
});
