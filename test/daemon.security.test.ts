import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ariumVersion, ensureDaemon, findDaemon } from '../src/daemon/link.js';
import { socketFetch } from '../src/daemon/socket-fetch.js';
import { arium, BIN, cleanUpDaemons, type DaemonFixture, daemonFixture, runOverSocket, waitFor } from './support/daemon.js';

/** Who may reach the daemon: only its own user, over a private socket; a daemon of another build is refused by name. */

const NOBODY = 65534;
const hasSetpriv = spawnSync('setpriv', ['--version']).status === 0;
const isRoot = process.getuid?.() === 0;

const servers: Server[] = [];
const foreground: ChildProcess[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
  for (const child of foreground.splice(0)) child.kill('SIGKILL');
  cleanUpDaemons();
});

/** What connecting to `socket` as uid 65534 gives: `connected`, or the error's code. */
function connectAsNobody(socket: string): string {
  const script = `require('node:net').connect(${JSON.stringify(socket)}).on('connect', () => { console.log('connected'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); });`;
  return execFileSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', process.execPath, '-e', script], {
    encoding: 'utf8',
  }).trim();
}

/** A fake daemon of another build on the fixture's socket: it answers /healthz with `protocol`. */
async function otherBuild(fixture: DaemonFixture, protocol: number): Promise<void> {
  mkdirSync(fixture.paths.dir, { recursive: true, mode: 0o700 });
  const server = createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ ok: true, daemon: { pid: process.pid, version: '9.9.9', protocol, workspace: fixture.paths.workspace } }));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(fixture.paths.socket, resolve));
}

/** `arium serve` in the foreground, until its record is written. */
async function serve(fixture: DaemonFixture, env: Record<string, string> = {}): Promise<{ http: string; pid: number }> {
  const child = spawn(process.execPath, ['--no-node-snapshot', BIN, '--workspace', fixture.project.workspace, '--project', 'p', 'serve'], {
    env: { ...fixture.env, ...env },
    stdio: 'ignore',
  });
  foreground.push(child);
  await waitFor(() => existsSync(fixture.paths.record), 30_000, 'the record');
  return JSON.parse(readFileSync(fixture.paths.record, 'utf8'));
}

/** The `caller` of each ToolInvocationEvent the project's event log holds, read over the socket. */
async function callers(fixture: DaemonFixture, count: number): Promise<string[]> {
  const stop = new AbortController();
  const response = await socketFetch(fixture.paths.socket)('/p/p/v1/events', { headers: { 'last-event-id': '0' }, signal: stop.signal });
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  let text = '';
  const found = () => [...text.matchAll(/event: ToolInvocationEvent\ndata: (.*)\n/g)].map((m) => JSON.parse(m[1] as string).caller as string);
  while (found().length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
  }
  stop.abort();
  return found();
}

describe('the daemon socket', () => {
  it.skipIf(!isRoot)(
    'refuses a daemon folder owned by another user (DENIED, naming it), on the client and in the daemon',
    async () => {
      const fixture = daemonFixture();
      mkdirSync(fixture.paths.dir, { mode: 0o700 });
      chownSync(fixture.paths.dir, NOBODY, NOBODY);
      await expect(findDaemon(fixture.project.workspace, fixture.env)).rejects.toMatchObject({
        code: 'DENIED',
        message: expect.stringContaining(`${fixture.paths.dir} belongs to uid ${NOBODY}`),
      });
      await expect(ensureDaemon(fixture.project.workspace, { env: fixture.env })).rejects.toMatchObject({ code: 'DENIED' });
      const run = await arium(fixture, ['daemon', 'run']);
      expect(run.code).toBe(3);
      expect(run.stderr).toContain(`${fixture.paths.dir} belongs to uid ${NOBODY}`);
      expect(existsSync(fixture.paths.socket)).toBe(false);
    },
    30_000,
  );

  it('refuses a daemon folder others may enter, saying to chmod it', async () => {
    const fixture = daemonFixture();
    mkdirSync(fixture.paths.dir, { mode: 0o700 });
    chmodSync(fixture.paths.dir, 0o755);
    await expect(findDaemon(fixture.project.workspace, fixture.env)).rejects.toMatchObject({
      code: 'DENIED',
      message: expect.stringContaining(`chmod 700 ${fixture.paths.dir}`),
    });
    const run = await arium(fixture, ['daemon', 'run']);
    expect(run.code).toBe(3);
    expect(run.stderr).toContain('lets other users in (mode 755)');
  }, 30_000);

  it.skipIf(!isRoot)(
    'refuses a socket owned by another user (not its daemon)',
    async () => {
      const fixture = daemonFixture();
      await otherBuild(fixture, 1);
      chownSync(fixture.paths.socket, NOBODY, NOBODY);
      await expect(findDaemon(fixture.project.workspace, fixture.env)).rejects.toMatchObject({
        code: 'DENIED',
        message: expect.stringContaining(`${fixture.paths.socket} belongs to uid ${NOBODY}`),
      });
    },
    30_000,
  );

  // Root ignores file modes, so the other user is a real one: uid 65534, by setpriv.
  it.skipIf(!isRoot || !hasSetpriv)(
    'keeps another local user out: folder 0700 and socket 0600 each refuse a connect (EACCES)',
    async () => {
      const fixture = daemonFixture();
      const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
      // The runtime folder is passable, as /run/user/<uid> would not be: only the daemon's own modes stand.
      chmodSync(dirname(fixture.paths.dir), 0o711);
      expect(connectAsNobody(link.socket)).toBe('EACCES');
      // Even with its folder opened by mistake, the socket itself refuses.
      chmodSync(fixture.paths.dir, 0o711);
      expect(connectAsNobody(link.socket)).toBe('EACCES');
      chmodSync(fixture.paths.dir, 0o700);
      // The daemon's own user still gets in.
      expect((await runOverSocket(fixture, 'fs.list', { path: '/' })).ok).toBe(true);
    },
    30_000,
  );

  it('names both versions, the pid and `arium daemon stop` for a daemon of another protocol (its record or its answer)', async () => {
    const fixture = daemonFixture();
    await otherBuild(fixture, 99);
    // The answer alone.
    await expect(findDaemon(fixture.project.workspace, fixture.env)).rejects.toMatchObject({
      code: 'VERSION',
      message: expect.stringMatching(
        new RegExp(
          `\\(pid ${process.pid}\\) is Arium 9\\.9\\.9 speaking protocol 99; this client is Arium ${ariumVersion()} speaking protocol 1.*arium daemon stop`,
        ),
      ),
    });
    // The record alone: a daemon of another build may not even answer /healthz as this one expects.
    writeFileSync(fixture.paths.record, JSON.stringify({ pid: process.pid, version: '0.0.1', protocol: 0, socket: fixture.paths.socket }));
    await expect(ensureDaemon(fixture.project.workspace, { env: fixture.env })).rejects.toMatchObject({
      code: 'VERSION',
      message: expect.stringContaining('is Arium 0.0.1 speaking protocol 0'),
    });
  }, 30_000);

  it('asks no API key over the socket while HTTP still needs it, and tells its pid over the socket only', async () => {
    const fixture = daemonFixture();
    const key = 'k-daemon-socket-secret';
    const record = await serve(fixture, { ARIUM_API_KEY: key });
    expect((await fetch(`${record.http}/v1/tools`)).status).toBe(401);
    expect((await fetch(`${record.http}/v1/tools`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    const local = socketFetch(fixture.paths.socket, { connection: 'close' });
    expect((await local('/v1/tools')).status).toBe(200);
    expect(await (await local('/healthz')).json()).toMatchObject({ daemon: { pid: record.pid, protocol: 1, workspace: fixture.paths.workspace } });
    expect(await (await fetch(`${record.http}/healthz`)).json()).not.toHaveProperty('daemon');
  }, 30_000);

  it('lets no TCP request skip the API key by resetting its connection (it then has no peer address either)', async () => {
    const fixture = daemonFixture();
    writeFileSync(join(fixture.project.dir, 'arium.json'), JSON.stringify({ approvals: { rules: [{ tool: 'fs.write' }] } }));
    const record = await serve(fixture, { ARIUM_API_KEY: 'k-reset-secret' });
    const call = runOverSocket(fixture, 'fs.write', { path: '/approved.txt', content: 'by whom?' });
    const local = socketFetch(fixture.paths.socket, { connection: 'close' });
    let runId = '';
    await waitFor(async () => {
      runId = ((await (await local('/p/p/v1/approvals')).json()) as { approvals: Array<{ run_id: string }> }).approvals[0]?.run_id ?? '';
      return runId !== '';
    });
    // The answer a person would give, sent without the key by a client that resets the connection at once.
    const body = JSON.stringify({ decision: 'approve', by: 'intruder' });
    const { port } = new URL(record.http);
    for (let i = 0; i < 20; i++) {
      await new Promise<void>((resolve) => {
        const socket = connect(Number(port), '127.0.0.1', () => {
          socket.write(
            `POST /p/p/v1/approvals/${runId} HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
          );
          socket.resetAndDestroy();
          setTimeout(resolve, 20);
        });
      });
    }
    const waiting = (await (await local('/p/p/v1/approvals')).json()) as { approvals: Array<{ run_id: string }> };
    expect(waiting.approvals.map((a) => a.run_id)).toEqual([runId]);
    const denied = await local(`/p/p/v1/approvals/${runId}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ decision: 'deny', by: 'test' }),
    });
    expect(denied.status).toBe(200);
    expect(await call).toMatchObject({ ok: false, error: { code: 'APPROVAL_DENIED', details: { by: 'test' } } });
  }, 30_000);

  it('names a socket client by X-Arium-Client (else local), refuses a bad name, and keeps http:<ip> over TCP', async () => {
    const fixture = daemonFixture();
    const record = await serve(fixture);
    expect(await runOverSocket(fixture, 'fs.list', { path: '/' }, { 'x-arium-client': 'connect:my-agent' })).toMatchObject({ ok: true });
    expect(await runOverSocket(fixture, 'fs.list', { path: '/' })).toMatchObject({ ok: true });
    const bad = await runOverSocket(fixture, 'fs.list', { path: '/' }, { 'x-arium-client': 'me and you' });
    expect(bad).toMatchObject({ status: 400, ok: false, error: { code: 'INVALID_INPUT', message: expect.stringContaining('X-Arium-Client') } });
    // Over TCP a client's word about itself is not taken.
    const overTcp = await fetch(`${record.http}/p/p/v1/tools/fs.list:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-arium-client': 'cli' },
      body: JSON.stringify({ input: { path: '/' } }),
    });
    expect(overTcp.status).toBe(200);
    // The routes that run builtins for the inspector name their caller the same way.
    const snapshot = await socketFetch(fixture.paths.socket, { connection: 'close', 'x-arium-client': 'cli' })('/p/p/v1/snapshots', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(snapshot.status).toBe(201);
    expect(await callers(fixture, 4)).toEqual(['connect:my-agent', 'local', 'http:127.0.0.1', 'cli']);
  }, 30_000);
});
