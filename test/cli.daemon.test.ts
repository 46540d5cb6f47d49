import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { daemonPaths } from '../src/daemon/paths.js';
import { socketFetch } from '../src/daemon/socket-fetch.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import type { Json } from './cli.helpers.js';

/**
 * The real `bin/arium.js`, in real processes, against a workspace's daemon: a gateway this suite serves
 * on the workspace's socket (as the daemon does), so the suite can look into its live engines. Every
 * command that works on a project's engine runs in the daemon, on the project its other clients use.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'arium.js');

let root: string;
let workspace: string;
let xdg: string;
let gateway: Gateway;
let server: Server;
let socket: string;

interface Run {
  code: number | null;
  out: string;
  err: string;
}

function arium(
  args: string[],
  options: { input?: string; env?: Record<string, string>; cwd?: string } = {},
): Promise<Run> & { kill(): void; readonly err: string } {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: options.cwd ?? root,
    env: { ...process.env, NO_COLOR: '1', XDG_RUNTIME_DIR: xdg, ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  child.stdin.end(options.input ?? '');
  const done = new Promise<Run>((resolve) => child.on('close', (code) => resolve({ code, out, err })));
  // While it runs: what it has written to stderr so far, and Ctrl-C.
  return Object.defineProperties(done, {
    kill: { value: () => child.kill('SIGINT') },
    err: { get: () => err },
  }) as Promise<Run> & { kill(): void; readonly err: string };
}

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const P = ['--project', 'p'];
const live = async (path: string) => String((await gateway.project('p')).vfs.read(path));

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist', 'src', 'daemon', 'thin-cli.js')))
    throw new Error('dist/ is missing: run npm run build (npm test does) before this suite');
  root = mkdtempSync(join(tmpdir(), 'arium-cli-daemon-'));
  workspace = join(root, 'workspace');
  xdg = join(root, 'run');
  mkdirSync(xdg, { mode: 0o700 });
  for (const project of ['p', 'q']) mkdirSync(join(workspace, project, 'tools'), { recursive: true });
  writeFileSync(
    join(workspace, 'p', 'arium.json'),
    JSON.stringify({ audit_log: true, approvals: { rules: [{ tool: 'fs.write', when: { path: { prefix: '/etc/' } } }], timeout_ms: 60_000 } }),
  );
  const paths = daemonPaths(workspace, { XDG_RUNTIME_DIR: xdg });
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  socket = paths.socket;
  gateway = await createGateway({ workspace, project: 'p', inspector: false });
  await gateway.app.ready();
  server = createServer((req, res) => gateway.app.routing(req, res));
  await new Promise<void>((resolve) => server.listen(socket, resolve));
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await gateway?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('the thin client', () => {
  it("imports Node's built-ins and the daemon's paths only, so it starts in the time Node takes", () => {
    const source = readFileSync(join(ROOT, 'src', 'daemon', 'thin-cli.ts'), 'utf8');
    const imported = [...source.matchAll(/^import\b[^;]*?from '([^']+)'/gms)].map((m) => m[1]);
    expect(imported.length).toBeGreaterThan(0);
    expect(imported.filter((name) => !name?.startsWith('node:') && name !== './paths.js')).toEqual([]);
    expect(source).not.toMatch(/import\(/);
  });
});

describe('the arium command through the workspace daemon', () => {
  it('writes with a call, in the live engine, with the caller cli in the audit log', async () => {
    const write = await arium(['call', 'fs.write', '{"path":"/notes.txt","content":"one\\n"}', ...P]);
    expect([write.code, write.err]).toEqual([0, '']);
    expect(write.out).toContain('ok fs.write');
    expect(await live('/notes.txt')).toBe('one\n');
    const stdin = await arium(['call', 'fs.read', '-', ...P, '--json'], { input: '{"path":"/notes.txt"}' });
    expect(JSON.parse(stdin.out)).toMatchObject({ ok: true, data: { content: 'one\n' } });

    const events = await arium(['events', '--json', '--limit', '50', ...P]);
    expect(events.code).toBe(0);
    const invocations = events.out
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
      .filter((event: Json) => event.type === 'ToolInvocationEvent');
    expect(invocations.map((event: Json) => [event.tool, event.caller])).toEqual([
      ['fs.write', 'cli'],
      ['fs.read', 'cli'],
    ]);
  });

  it('takes a snapshot, shows the diff, restores it, imports, exports and collects garbage in the live engine', async () => {
    await arium(['call', 'fs.write', '{"path":"/history.txt","content":"before\\n"}', ...P]);
    const snap = await arium(['snapshot', '--label', 'before', ...P]);
    expect([snap.code, snap.out]).toEqual([0, expect.stringMatching(/^snapshot \w+ \(before\)/)]);
    (await gateway.project('p')).vfs.write('/history.txt', 'after\n');

    const log = await arium(['log', ...P, '--json']);
    expect(JSON.parse(log.out).snapshots.map((s: Json) => s.label)).toContain('before');
    const diff = await arium(['diff', 'before', 'live', '--stat', ...P]);
    expect(diff.code).toBe(0);
    expect(diff.out).toContain('M /history.txt');

    const restore = await arium(['restore', 'before', ...P]);
    expect([restore.code, restore.out]).toEqual([0, expect.stringContaining('restored')]);
    expect(await live('/history.txt')).toBe('before\n');

    const host = join(root, 'host');
    mkdirSync(join(host, 'sub'), { recursive: true });
    writeFileSync(join(host, 'sub', 'a.txt'), 'imported\n');
    // A relative host folder is the client's: resolved against its working folder, not the daemon's.
    const imported = await arium(['import', 'host', '/in', ...P]);
    expect([imported.code, imported.out]).toEqual([0, expect.stringContaining('imported 1 files')]);
    expect(await live('/in/sub/a.txt')).toBe('imported\n');
    const exported = await arium(['export', '/in', 'out', ...P]);
    expect(exported.code).toBe(0);
    expect(readFileSync(join(root, 'out', 'sub', 'a.txt'), 'utf8')).toBe('imported\n');

    const gc = await arium(['gc', ...P]);
    expect([gc.code, gc.out]).toEqual([0, expect.stringMatching(/^gc: kept \d+ objects/)]);
  });

  it('lets a call wait for approval in the daemon, answered by arium approve from another process', async () => {
    const call = arium(['call', 'fs.write', '{"path":"/etc/motd","content":"hello\\n"}', ...P, '--json']);
    await until(() => /waits for approval \(run [\w-]+/.test(call.err), 'the call says it waits');
    const runId = /waits for approval \(run ([\w-]+)/.exec(call.err)?.[1] as string;
    expect(call.err).toContain(`arium approve ${runId} --project p`);

    const listed = await arium(['approvals', ...P, '--json']);
    expect(JSON.parse(listed.out).approvals.map((a: Json) => [a.run_id, a.tool])).toEqual([[runId, 'fs.write']]);
    const approved = await arium(['approve', runId, '--by', 'ops', ...P]);
    expect([approved.code, approved.out]).toEqual([0, `approved fs.write run ${runId} (by ops)\n`]);
    const result = await call;
    expect(result.code).toBe(0);
    expect(JSON.parse(result.out)).toMatchObject({ ok: true, meta: { run_id: runId } });
    expect(await live('/etc/motd')).toBe('hello\n');

    const again = await arium(['deny', runId, ...P]);
    expect([again.code, again.err]).toEqual([1, expect.stringContaining('ALREADY_RESOLVED')]);
  });

  it('cancels a waiting call in the daemon when its client is stopped (Ctrl-C)', async () => {
    const call = arium(['call', 'fs.write', '{"path":"/etc/issue","content":"x"}', ...P]);
    await until(() => call.err.includes('waits for approval'), 'the call waits');
    const engine = await gateway.project('p');
    expect(engine.approvals().map((a) => a.tool)).toEqual(['fs.write']);
    call.kill();
    await call;
    await until(() => engine.approvals().length === 0 && gateway.cliCommands() === 0, 'the call is cancelled in the daemon', 10_000);
    expect(engine.vfs.exists('/etc/issue')).toBe(false);
  });

  it('prints what the command prints in-process, byte for byte', async () => {
    const Q = ['--project', 'q', '--json'];
    // q is not open in the daemon yet, so the in-process runs can take its lock first.
    const seed = await arium(['call', 'fs.write', '{"path":"/r.txt","content":"same\\n"}', ...Q, '--no-daemon']);
    expect(seed.code).toBe(0);
    const here = {
      tools: await arium(['tools', ...Q, '--no-daemon']),
      call: await arium(['call', 'fs.read', '{"path":"/r.txt"}', ...Q, '--no-daemon']),
    };
    const there = { tools: await arium(['tools', ...Q]), call: await arium(['call', 'fs.read', '{"path":"/r.txt"}', ...Q]) };
    expect(gateway.engines().has('q')).toBe(true);
    expect(there.tools).toEqual(here.tools);
    // A call's own run id, trace id and timings differ from run to run; nothing else may.
    const steady = (run: Run) => run.out.replace(/"(run_id|trace_id)": "[^"]*"/g, '"$1": "…"').replace(/"(\w*_ms)": [\d.]+/g, '"$1": 0');
    expect([there.call.code, there.call.err, steady(there.call)]).toEqual([here.call.code, here.call.err, steady(here.call)]);
  });

  it('loses no increment of 32 concurrent read-modify-write calls', { timeout: 180_000 }, async () => {
    await gateway.project('p').then((engine) => engine.vfs.write('/counter.txt', '0\n'));
    const script = 'n=$(cat /counter.txt); echo $((n + 1)) > /counter.txt';
    const input = JSON.stringify({ script });
    const results: Run[] = [];
    // Eight processes at a time: 32 Node starts at once only measure the machine's scheduler.
    const queue = Array.from({ length: 32 }, (_, i) => i);
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (queue.shift() !== undefined) results.push(await arium(['call', 'shell.run', input, ...P, '--json']));
      }),
    );
    expect(results.map((r) => [r.code, JSON.parse(r.out).ok])).toEqual(Array.from({ length: 32 }, () => [0, true]));
    expect(await live('/counter.txt')).toBe('32\n');
  });

  it('stops arium events --follow in the daemon when its client goes away', async () => {
    expect(gateway.cliCommands()).toBe(0);
    const follow = arium(['events', '--follow', '--limit', '0', ...P]);
    await until(() => follow.err.includes('following'), 'events --follow runs');
    expect(gateway.cliCommands()).toBe(1);
    await arium(['call', 'fs.list', '{"path":"/"}', ...P]);
    follow.kill();
    await follow;
    await until(() => gateway.cliCommands() === 0, 'the command in the daemon ends', 10_000);
  });

  it('narrows calls to --grant, and refuses a grant the daemon does not hold', async () => {
    const narrowed = await arium(['call', 'fs.read', '{"path":"/notes.txt"}', '--grant', 'vfs.read:/docs/**', ...P, '--json']);
    expect([narrowed.code, JSON.parse(narrowed.out).error?.code]).toEqual([1, 'DENIED']);
    const wider = await arium(['call', 'fs.read', '{"path":"/notes.txt"}', '--grant', 'vfs.read', '--grant', 'net.fetch', ...P]);
    expect([wider.code, wider.err]).toEqual([3, expect.stringContaining('--grant net.fetch goes beyond what the daemon')]);
  });

  it('serves /v1/cli over the socket only: over TCP it is 403', async () => {
    const body = JSON.stringify({
      argv: ['call', 'fs.write', '{"path":"/tcp.txt","content":"x"}', ...P],
      cwd: root,
      env: {},
      stdout_tty: false,
      stderr_tty: false,
    });
    const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body };
    const address = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    const tcp = await fetch(`${address}/v1/cli`, init);
    expect(tcp.status).toBe(403);
    expect(await tcp.json()).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    await expect(live('/tcp.txt')).rejects.toThrow();
    // A gateway that checks a key refuses it over TCP with the right key too.
    const keyed = await createGateway({ workspace, project: 'q', apiKey: 'the-key', inspector: false });
    try {
      const at = await keyed.app.listen({ host: '127.0.0.1', port: 0 });
      const withKey = await fetch(`${at}/v1/cli`, { ...init, headers: { ...init.headers, authorization: 'Bearer the-key' } });
      expect(withKey.status).toBe(403);
    } finally {
      await keyed.close();
    }
    // The same request over the socket runs.
    const local = await socketFetch(socket)('/v1/cli', init);
    expect(local.status).toBe(200);
    expect((await local.text()).trim().split('\n').at(-1)).toBe('{"exit":0}');
  });

  it('refuses the commands that run in the calling process', async () => {
    const local = await socketFetch(socket)('/v1/cli', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ argv: ['serve', '--port', '0'], cwd: root, env: {}, stdout_tty: false, stderr_tty: false }),
    });
    expect(local.status).toBe(400);
    expect((await local.json()).error.message).toContain('arium serve runs in the calling process');
  });

  it('says the daemon holds the project when told not to go through it', async () => {
    const run = await arium(['call', 'fs.read', '{"path":"/notes.txt"}', ...P, '--no-daemon']);
    expect(run.code).toBe(3);
    expect(run.err).toContain(`is held by the workspace's daemon (pid ${process.pid}), which answers on ${socket}`);
    const byEnv = await arium(['log', ...P], { env: { ARIUM_NO_DAEMON: '1' } });
    expect([byEnv.code, byEnv.err]).toEqual([3, expect.stringContaining("held by the workspace's daemon")]);
    // A command the daemon never runs still reads the project, as it did beside any holder.
    const doctor = await arium(['doctor', ...P]);
    expect(doctor.err).toContain(`project "p" is held by the workspace's daemon (pid ${process.pid}): showing what it has made durable, read-only`);
  });

  it('runs in-process, saying so, when the process on the socket does not answer', async () => {
    const stuck = join(root, 'stuck');
    mkdirSync(join(stuck, 's', 'tools'), { recursive: true });
    const { socket: held } = daemonPaths(stuck, { XDG_RUNTIME_DIR: xdg });
    // Accepts connections and never answers: a stopped or stuck daemon.
    const mute = spawn(process.execPath, ['-e', `require('net').createServer(() => {}).listen(${JSON.stringify(held)}, () => console.log('ready'))`]);
    try {
      await new Promise((resolve) => mute.stdout.once('data', resolve));
      const run = await arium(['call', 'fs.write', '{"path":"/y.txt","content":"y"}', '--workspace', 'stuck', '--project', 's']);
      expect(run.code).toBe(0);
      expect(run.err).toBe(`arium: the daemon on ${held} did not answer within 5 s; running the command here\n`);
      expect(run.out).toContain('ok fs.write');
    } finally {
      mute.kill();
    }
  });

  it('runs in-process when the socket file is left by a dead daemon', async () => {
    const dead = join(root, 'dead');
    mkdirSync(join(dead, 'd', 'tools'), { recursive: true });
    const { socket: left } = daemonPaths(dead, { XDG_RUNTIME_DIR: xdg });
    // A listener killed outright leaves its socket file: connecting to it is refused.
    const killed = spawn(process.execPath, [
      '-e',
      `require('net').createServer().listen(${JSON.stringify(left)}, () => process.kill(process.pid, 'SIGKILL'))`,
    ]);
    await new Promise((resolve) => killed.on('close', resolve));
    expect(existsSync(left)).toBe(true);
    // Its input on stdin still reaches the command run here.
    const run = await arium(['call', 'fs.write', '-', '--workspace', 'dead', '--project', 'd'], { input: '{"path":"/x.txt","content":"here\\n"}' });
    expect([run.code, run.err]).toEqual([0, '']);
    const read = await arium(['call', 'fs.read', '{"path":"/x.txt"}', '--workspace', 'dead', '--project', 'd', '--json']);
    expect(JSON.parse(read.out)).toMatchObject({ ok: true, data: { content: 'here\n' } });
  });
});
