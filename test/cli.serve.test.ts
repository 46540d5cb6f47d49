import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/** `arium serve` as a user starts it: the real binary, its address file, its refusals, its shutdown. */

const BIN = join(import.meta.dirname, '..', 'bin', 'arium.js');
const projects: TempProject[] = [];
afterAll(() => {
  for (const p of projects) p.remove();
});

function start(args: string[], env: Record<string, string> = {}): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
  projects.push(project);
  const child = spawn(process.execPath, [BIN, '--workspace', project.workspace, '--project', project.project, 'serve', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
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
  return { child, output: () => output, exited };
}

async function waitFor(condition: () => boolean, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A GET to `address` naming `host` in the Host header (fetch cannot), answering the status and the error's message. */
function getAs(address: string, path: string, headers: Record<string, string>): Promise<{ status: number; message: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${address}${path}`, { headers, setHost: !('host' in headers) }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => {
        text += c.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, message: res.statusCode === 200 ? undefined : JSON.parse(text).error?.message }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('arium serve', () => {
  it('binds loopback on a free port, writes the address file, serves, and removes the file on Ctrl-C', async () => {
    const dir = projects.length;
    const server = start([]);
    const addrFile = join(projects[dir]?.workspace as string, '.arium', 'arium.addr');
    await waitFor(() => existsSync(addrFile));
    const address = readFileSync(addrFile, 'utf8').trim();
    expect(address).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${address}/v1/tools/demo.echo:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"input":{"a":1}}',
    });
    expect(await res.json()).toMatchObject({ ok: true, output: { a: 1 } });
    server.child.kill('SIGINT');
    expect(await server.exited).toBe(0);
    expect(existsSync(addrFile)).toBe(false);
  }, 30_000);

  it('writes the address to $XDG_RUNTIME_DIR/arium.addr when there is one, or where --addr-file says', async () => {
    const runtime = tempProject();
    projects.push(runtime);
    const server = start([], { XDG_RUNTIME_DIR: runtime.dir });
    await waitFor(() => existsSync(join(runtime.dir, 'arium.addr')));
    server.child.kill('SIGINT');
    await server.exited;
    const chosen = join(runtime.dir, 'chosen.addr');
    const other = start(['--addr-file', chosen]);
    await waitFor(() => existsSync(chosen));
    other.child.kill('SIGINT');
    await other.exited;
  }, 30_000);

  it('refuses a host other machines reach without ARIUM_API_KEY, saying how to fix it', async () => {
    const server = start(['--host', '0.0.0.0']);
    expect(await server.exited).toBe(2);
    expect(server.output()).toMatch(/Refusing to listen on 0\.0\.0\.0.*without an API key: set ARIUM_API_KEY/);
  }, 30_000);

  it('with ARIUM_API_KEY, binds that host and wants the key on every request; the key is never printed', async () => {
    const key = 'k-1234567890-secret';
    const server = start(['--host', '0.0.0.0', '--port', '0', '--json'], { ARIUM_API_KEY: key });
    await waitFor(() => server.output().includes('"address"'));
    const { address } = JSON.parse(server.output().slice(server.output().indexOf('{')));
    const port = new URL(address).port;
    const url = `http://127.0.0.1:${port}/v1/tools`;
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    server.child.kill('SIGINT');
    await server.exited;
    expect(server.output()).not.toContain(key);
  }, 30_000);

  it('answers only its own names and origins, and those --allow-host and --allow-origin add', async () => {
    const dir = projects.length;
    const server = start(['--allow-host', 'devbox.lan', '--allow-host', 'build.lan', '--allow-origin', 'http://localhost:5173']);
    const addrFile = join(projects[dir]?.workspace as string, '.arium', 'arium.addr');
    await waitFor(() => existsSync(addrFile));
    const address = readFileSync(addrFile, 'utf8').trim();
    const port = new URL(address).port;
    expect((await getAs(address, '/v1/tools', { host: `devbox.lan:${port}` })).status).toBe(200);
    expect((await getAs(address, '/v1/tools', { host: `build.lan:${port}` })).status).toBe(200);
    expect((await getAs(address, '/v1/tools', { origin: 'http://localhost:5173' })).status).toBe(200);
    const rebound = await getAs(address, '/v1/tools', { host: `evil.example:${port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.message).toContain('arium serve --allow-host evil.example');
    const crossSite = await getAs(address, '/healthz', { origin: 'http://evil.example' });
    expect(crossSite.status).toBe(403);
    expect(crossSite.message).toContain('arium serve --allow-origin http://evil.example');
    server.child.kill('SIGINT');
    expect(await server.exited).toBe(0);

    const bad = start(['--allow-host', 'devbox.lan:8080']);
    expect(await bad.exited).toBe(2);
    expect(bad.output()).toContain('"devbox.lan:8080" is not a host name to allow');
  }, 30_000);

  it('refuses a port out of range and arguments it does not take', async () => {
    const bad = start(['--port', '70000']);
    expect(await bad.exited).toBe(2);
    expect(bad.output()).toContain('--port needs a port from 0 to 65535');
  }, 30_000);
});
