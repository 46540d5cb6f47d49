import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureDaemon, findDaemon } from '../src/daemon/link.js';
import { socketFetch } from '../src/daemon/socket-fetch.js';
import { alive, cleanUpDaemons, daemonFixture, pause, readLog, runOverSocket, waitFor } from './support/daemon.js';

/** The daemon's life: started by racing clients, stopping when idle or when its workspace moves, replaced after a crash. */

afterEach(cleanUpDaemons);

const LINK = pathToFileURL(join(import.meta.dirname, '..', 'dist', 'src', 'daemon', 'link.js')).href;

/** ensureDaemon in a process of its own, as two clients (an MCP bridge, a CLI call) start at once. */
function ensureInChild(workspace: string, env: Record<string, string>): Promise<{ pid: number; socket: string; answered: boolean }> {
  const script = `
    import { ensureDaemon } from ${JSON.stringify(LINK)};
    import { socketFetch } from ${JSON.stringify(LINK.replace('link.js', 'socket-fetch.js'))};
    const link = await ensureDaemon(${JSON.stringify(workspace)});
    const health = await (await socketFetch(link.socket, { connection: 'close' })('/healthz')).json();
    process.stdout.write(JSON.stringify({ pid: link.pid, socket: link.socket, answered: health.daemon.pid === link.pid }));
  `;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`client exited ${code}: ${err}`))));
  });
}

/** The `arium daemon run` processes serving `workspace`. */
function daemonProcesses(workspace: string): number[] {
  const listing = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return listing
    .split('\n')
    .filter((line) => line.includes('daemon run') && line.includes(workspace))
    .map((line) => Number.parseInt(line.trim(), 10));
}

/**
 * One request to /p/p/mcp on a connection of its own, closed by this side once answered: the SDK answers
 * `Connection: keep-alive` even to a request that asked to close, so a pooled socket would stay open.
 */
function once(socket: string, method: string, fields: Record<string, string>): Promise<{ status: number; text: string; session: string }> {
  const { body, ...headers } = fields;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath: socket,
        method,
        path: '/p/p/mcp',
        agent: false,
        headers: { host: 'localhost', accept: 'application/json, text/event-stream', ...headers },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => {
          text += chunk.toString();
        });
        res.on('end', () => {
          res.socket?.destroy();
          resolve({ status: res.statusCode ?? 0, text, session: String(res.headers['mcp-session-id']) });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('the engine daemon', () => {
  it('ends with one daemon when three clients start it at once, all linked to it', async () => {
    const fixture = daemonFixture();
    const clients = await Promise.all([1, 2, 3].map(() => ensureInChild(fixture.project.workspace, fixture.env)));
    const pids = new Set(clients.map((c) => c.pid));
    expect(pids.size).toBe(1);
    expect(clients.every((c) => c.answered && c.socket === fixture.paths.socket)).toBe(true);
    const [pid] = [...pids] as [number];
    // The daemons that lost the race exit on their own, saying who holds the workspace.
    await waitFor(() => daemonProcesses(fixture.project.workspace).length === 1, 30_000, 'one daemon process');
    expect(daemonProcesses(fixture.project.workspace)).toEqual([pid]);
    expect(JSON.parse(readFileSync(fixture.paths.record, 'utf8'))).toMatchObject({ pid, socket: fixture.paths.socket, protocol: 1 });
    const record = JSON.parse(readFileSync(fixture.paths.record, 'utf8'));
    expect(record.http).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const losers = readLog(fixture).match(/already serves/g)?.length ?? 0;
    const started = readLog(fixture).match(/arium daemon: pid \d+ serves/g)?.length ?? 0;
    expect(started).toBe(1);
    expect(losers).toBeLessThanOrEqual(2);
  }, 60_000);

  it('stops when idle, removing its socket, record and lock, and says why in its log', async () => {
    const fixture = daemonFixture();
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env, idleMs: 500 });
    expect(existsSync(fixture.paths.socket)).toBe(true);
    await waitFor(() => !alive(link.pid), 30_000, 'the idle daemon to exit');
    expect(existsSync(fixture.paths.socket)).toBe(false);
    expect(existsSync(fixture.paths.record)).toBe(false);
    expect(existsSync(fixture.paths.lock)).toBe(false);
    expect(readLog(fixture)).toMatch(/stopping \(idle for 0\.5 s/);
    expect(await findDaemon(fixture.project.workspace, fixture.env)).toBeNull();
  }, 60_000);

  it('does not stop while an SSE stream is open, and stops once it closes', async () => {
    const fixture = daemonFixture();
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env, idleMs: 500 });
    const stream = new AbortController();
    const response = await socketFetch(link.socket)('/p/p/v1/events', { signal: stream.signal });
    expect(response.status).toBe(200);
    const reader = response.body?.getReader();
    // Several idle periods pass with only the stream open.
    await pause(3_000);
    expect(alive(link.pid)).toBe(true);
    expect(existsSync(fixture.paths.socket)).toBe(true);
    stream.abort();
    await reader?.cancel().catch(() => {});
    await waitFor(() => !alive(link.pid), 30_000, 'the daemon to exit once the stream closed');
    expect(readLog(fixture)).toMatch(/idle for 0\.5 s/);
  }, 60_000);

  it('does not stop while a call is in flight (one waiting for approval), and stops after it ends', async () => {
    const fixture = daemonFixture();
    writeFileSync(join(fixture.project.dir, 'arium.json'), JSON.stringify({ approvals: { rules: [{ tool: 'fs.write' }] } }));
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env, idleMs: 500 });
    const call = runOverSocket(fixture, 'fs.write', { path: '/approved.txt', content: 'yes' });
    const fetchLocal = socketFetch(link.socket, { connection: 'close' });
    let waiting: Array<{ run_id: string }> = [];
    await waitFor(async () => {
      waiting = ((await (await fetchLocal('/p/p/v1/approvals')).json()) as { approvals: Array<{ run_id: string }> }).approvals;
      return waiting.length === 1;
    });
    await pause(3_000);
    expect(alive(link.pid)).toBe(true);
    const answer = await fetchLocal(`/p/p/v1/approvals/${waiting[0]?.run_id}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ decision: 'approve', by: 'test' }),
    });
    expect(answer.status).toBe(200);
    expect(await call).toMatchObject({ ok: true, output: { path: '/approved.txt' } });
    await waitFor(() => !alive(link.pid), 30_000, 'the daemon to exit after the call');
  }, 60_000);

  it('does not stop while an MCP session is open, though no connection is, and stops once it is closed', async () => {
    const fixture = daemonFixture();
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env, idleMs: 500 });
    const initialize = await once(link.socket, 'POST', {
      'content-type': 'application/json',
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'idle-test', version: '1' } },
      }),
    });
    expect(initialize.status).toBe(200);
    expect(initialize.text).toContain('"protocolVersion"');
    await pause(3_000);
    expect(alive(link.pid)).toBe(true);
    expect((await once(link.socket, 'DELETE', { 'mcp-session-id': initialize.session })).status).toBe(200);
    await waitFor(() => !alive(link.pid), 30_000, 'the daemon to exit once the session closed');
  }, 60_000);

  it('after kill -9: no daemon is found, the stale socket goes, a new one starts and has every acknowledged write', async () => {
    const fixture = daemonFixture();
    const first = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
    expect(await runOverSocket(fixture, 'fs.write', { path: '/durable.txt', content: 'kept' })).toMatchObject({ ok: true });
    process.kill(first.pid, 'SIGKILL');
    await waitFor(() => !alive(first.pid), 10_000, 'the daemon to die');
    expect(existsSync(fixture.paths.socket)).toBe(true);
    expect(await findDaemon(fixture.project.workspace, fixture.env)).toBeNull();
    // Its lock's owner is dead: the socket it left is removed.
    expect(existsSync(fixture.paths.socket)).toBe(false);
    const second = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
    expect(second.pid).not.toBe(first.pid);
    expect(await runOverSocket(fixture, 'fs.read', { path: '/durable.txt' })).toMatchObject({ ok: true, output: { content: 'kept' } });
  }, 60_000);

  it('leaves a dead socket alone while a live process holds the daemon lock (a daemon starting)', async () => {
    const fixture = daemonFixture();
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
    process.kill(link.pid, 'SIGKILL');
    await waitFor(() => !alive(link.pid), 10_000, 'the daemon to die');
    // This process now "holds" the lock, as a daemon that has taken it and not yet bound the socket.
    writeFileSync(fixture.paths.lock, JSON.stringify({ pid: process.pid, host: hostname(), at: new Date().toISOString() }));
    expect(await findDaemon(fixture.project.workspace, fixture.env)).toBeNull();
    expect(existsSync(fixture.paths.socket)).toBe(true);
    writeFileSync(fixture.paths.lock, JSON.stringify({ pid: link.pid, host: hostname(), at: new Date().toISOString() }));
    expect(await findDaemon(fixture.project.workspace, fixture.env)).toBeNull();
    expect(existsSync(fixture.paths.socket)).toBe(false);
  }, 60_000);

  it('stops when its workspace is moved, saying so in its log', async () => {
    const fixture = daemonFixture();
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
    renameSync(fixture.project.workspace, `${fixture.project.workspace}-moved`);
    try {
      await waitFor(() => !alive(link.pid), 30_000, 'the daemon to stop');
      expect(readLog(fixture)).toContain(`the workspace ${fixture.project.workspace} was moved or removed`);
      expect(existsSync(fixture.paths.socket)).toBe(false);
      expect(existsSync(fixture.paths.record)).toBe(false);
    } finally {
      renameSync(`${fixture.project.workspace}-moved`, fixture.project.workspace);
    }
  }, 60_000);
});
