import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureDaemon, findDaemon } from '../src/daemon/link.js';
import { alive, arium, cleanUpDaemons, daemonFixture, readLog, waitFor } from './support/daemon.js';

/** `arium daemon start|status|stop|run`, `arium serve` beside a daemon, and what a failed start says. */

afterEach(cleanUpDaemons);

describe('arium daemon', () => {
  it('starts one daemon, shows it, starts no second, and stops it (waiting until it has gone)', async () => {
    const fixture = daemonFixture();
    const started = await arium(fixture, ['daemon', 'start', '--json']);
    expect(started.code).toBe(0);
    const link = JSON.parse(started.stdout);
    expect(link).toMatchObject({ running: true, socket: fixture.paths.socket, log: fixture.paths.log, workspace: fixture.paths.workspace });
    const status = JSON.parse((await arium(fixture, ['daemon', 'status', '--json'])).stdout);
    expect(status).toMatchObject({ running: true, pid: link.pid, started_at: expect.any(String) });
    const again = await arium(fixture, ['daemon', 'start']);
    expect(again.stdout).toContain(`pid      ${link.pid}`);
    // A daemon started by hand beside it loses to it, says so and exits 0.
    const second = await arium(fixture, ['daemon', 'run']);
    expect(second.code).toBe(0);
    expect(second.stderr).toContain(`Another Arium daemon (pid ${link.pid}) already serves ${fixture.paths.workspace}`);
    // arium serve in the foreground is refused, naming the daemon.
    const serve = await arium(fixture, ['serve']);
    expect(serve.code).toBe(3);
    expect(serve.stderr).toContain(`(pid ${link.pid}) already serves`);
    const stopped = await arium(fixture, ['daemon', 'stop']);
    expect(stopped).toMatchObject({ code: 0, stdout: `stopped the daemon of ${fixture.paths.workspace} (pid ${link.pid})\n` });
    expect(alive(link.pid)).toBe(false);
    expect(existsSync(fixture.paths.socket)).toBe(false);
    expect(JSON.parse((await arium(fixture, ['daemon', 'status', '--json'])).stdout)).toMatchObject({ running: false });
    expect((await arium(fixture, ['daemon', 'stop'])).stdout).toContain('no daemon runs for');
  }, 60_000);

  it('refuses an unknown action, naming the ones there are', async () => {
    const fixture = daemonFixture();
    const wrong = await arium(fixture, ['daemon', 'begin']);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('Unknown action "begin": use one of run, start, status, stop');
    const idle = await arium(fixture, ['daemon', 'start', '--idle', 'soon']);
    expect(idle.code).toBe(2);
    expect(idle.stderr).toContain('Option --idle needs a number of seconds, 0 for never (got "soon")');
  }, 30_000);

  it('doctor names the daemon: running with its pid, socket and log, or not running', async () => {
    const fixture = daemonFixture();
    const before = JSON.parse((await arium(fixture, ['--project', 'p', 'doctor', '--json'])).stdout);
    expect(before.checks.find((c: { name: string }) => c.name === 'daemon')).toMatchObject({
      ok: true,
      detail: expect.stringMatching(/^not running/),
    });
    const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
    const after = JSON.parse((await arium(fixture, ['--project', 'p', 'doctor', '--json'])).stdout);
    expect(after.checks.find((c: { name: string }) => c.name === 'daemon')).toMatchObject({
      ok: true,
      detail: expect.stringContaining(`running, pid ${link.pid}`),
    });
  }, 90_000);
});

describe('a start that fails', () => {
  it('says so for a workspace that does not exist, making nothing', async () => {
    const fixture = daemonFixture();
    const missing = join(fixture.project.workspace, 'nowhere');
    await expect(ensureDaemon(missing, { env: fixture.env })).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: expect.stringContaining(`The workspace ${missing} is not a folder`),
    });
    expect(existsSync(missing)).toBe(false);
  });

  it('quotes the log when no daemon answers in time (here: the lock is held by a process that never serves)', async () => {
    const fixture = daemonFixture();
    mkdirSync(fixture.paths.dir, { mode: 0o700 });
    writeFileSync(fixture.paths.lock, JSON.stringify({ pid: process.pid, host: hostname(), at: new Date().toISOString() }));
    try {
      await expect(ensureDaemon(fixture.project.workspace, { env: fixture.env, timeoutMs: 3_000 })).rejects.toMatchObject({
        code: 'UNAVAILABLE',
        message: expect.stringMatching(new RegExp(`No daemon answered on .* within 3000 ms[^]*already serves ${fixture.paths.workspace}`)),
      });
    } finally {
      rmSync(fixture.paths.lock);
    }
  }, 30_000);

  it('starts another daemon when the one that held the lock stops meanwhile (stopping when idle as a client comes)', async () => {
    const fixture = daemonFixture();
    mkdirSync(fixture.paths.dir, { mode: 0o700 });
    // This process holds the lock as a daemon does while it stops: the one started loses to it and exits 0.
    writeFileSync(fixture.paths.lock, JSON.stringify({ pid: process.pid, host: hostname(), at: new Date().toISOString() }));
    const linking = ensureDaemon(fixture.project.workspace, { env: fixture.env });
    await waitFor(() => readLog(fixture).includes('already serves'), 30_000, 'the started daemon to lose the lock');
    rmSync(fixture.paths.lock);
    const link = await linking;
    expect(alive(link.pid)).toBe(true);
    expect(readLog(fixture).match(/arium daemon: pid \d+ serves/g)).toHaveLength(1);
  }, 60_000);

  it('refuses something other than a socket at the socket path, on the client and in the daemon', async () => {
    const fixture = daemonFixture();
    mkdirSync(fixture.paths.dir, { mode: 0o700 });
    mkdirSync(fixture.paths.socket);
    await expect(findDaemon(fixture.project.workspace, fixture.env)).rejects.toMatchObject({
      code: 'DENIED',
      message: expect.stringContaining('not a socket'),
    });
    const run = await arium(fixture, ['daemon', 'run']);
    expect(run.code).toBe(3);
    expect(run.stderr).toContain(`${fixture.paths.socket} holds something else (not a socket): remove it`);
    expect(existsSync(fixture.paths.socket)).toBe(true);
  }, 30_000);
});
