import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_SANDBOX_LIMITS,
  PROVIDER_UID_BASE,
  providerUid,
  SandboxRefusal,
  type SandboxSpec,
  sandboxAvailable,
  sandboxedServer,
} from '../src/providers/sandbox.js';

// A real stdio MCP server (fixtures/providers/attacker/server.mjs, on the MCP SDK) started through the
// provider sandbox's command line and driven by the SDK's client: each of its tools tries an escape
// (the network, a host file, a write outside its folder, a fork bomb, memory), and each attempt is run
// again with that one restriction lifted, so that every assertion is shown able to fail.

const host = await sandboxAvailable();
const why = host.problem ?? (host.root ? null : 'these tests give the server folder to the provider’s uid, which needs root');
if (why !== null && process.env.CI) throw new Error(`CI must test the provider sandbox, but ${why}`);
if (why) console.log(`providers.sandbox: skipped, ${why}`);

/** A uid no other test uses, to count the server's processes by. */
const LONE_UID = PROVIDER_UID_BASE + 65_000;

/** Pids of the processes running as `uid` now. */
function processesOf(uid: number): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const line = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, 'utf8'));
      if (line && Number(line[1]) === uid) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Waits until `done()` holds, for up to 10 s (a loaded machine reaps slowly), then fails. */
async function until(done: () => boolean): Promise<void> {
  for (let waited = 0; waited < 10_000; waited += 50) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('timed out waiting');
}

const SERVER = resolve('fixtures/providers/attacker/server.mjs');
/** Servers from the npm registry, as npm installs their programs (a `#!/usr/bin/env node` link in .bin). */
const FILESYSTEM = resolve('node_modules/.bin/mcp-server-filesystem');
const EVERYTHING = resolve('node_modules/.bin/mcp-server-everything');
if (!existsSync(FILESYSTEM) || !existsSync(EVERYTHING)) console.log('providers.sandbox: the npm servers’ tests skipped, they are not installed');
const NAME = 'attacker';

type Answer = Record<string, unknown> & { ok?: boolean; error?: string };

/** Starts the attacker in the sandbox `spec` asks for; `as` runs the whole command line as that unprivileged uid (an engine that is not root). */
async function start(
  spec: Partial<SandboxSpec> = {},
  as?: number,
): Promise<{ client: Client; call(tool: string, args?: Record<string, unknown>): Promise<Answer>; close(): Promise<void> }> {
  const line = sandboxedServer(
    { name: NAME, command: process.execPath, args: [SERVER], ...spec },
    as === undefined ? host : { ...host, root: false },
  );
  const drop = [`--reuid=${as}`, `--regid=${as}`, '--clear-groups', '--', line.command];
  const transport = new StdioClientTransport({
    command: as === undefined ? line.command : (host.tools?.setpriv as string),
    args: as === undefined ? line.args : [...drop, ...line.args],
    env: line.env,
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const client = new Client({ name: 'sandbox-test', version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (error) {
    throw new Error(`the sandboxed server did not start: ${(error as Error).message}\n${stderr}`);
  }
  return {
    client,
    async call(tool, args = {}) {
      const result = await client.callTool({ name: tool, arguments: args });
      const content = result.content as Array<{ type: string; text: string }>;
      return JSON.parse(content[0]?.text ?? 'null') as Answer;
    },
    close: () => client.close(),
  };
}

describe.runIf(why === null)('a stdio MCP server in the provider sandbox', () => {
  let dir: string;
  let allowed: string;
  let outside: string;
  let web: Server;
  let url: string;
  const uid = providerUid(NAME);

  beforeAll(async () => {
    dir = mkdtempSync('/tmp/arium-provider-sandbox-');
    chmodSync(dir, 0o755);
    allowed = join(dir, 'allowed');
    outside = join(dir, 'outside');
    mkdirSync(allowed);
    mkdirSync(outside);
    // The declared folder belongs to the server's uid; the other is open to anyone on the host, so
    // only the sandbox can keep the server out of it.
    chownSync(allowed, uid, uid);
    chmodSync(outside, 0o777);
    writeFileSync(join(outside, 'secret.txt'), 'host secret\n', { mode: 0o644 });
    web = createServer((_req, res) => res.end('reached the host'));
    await new Promise<void>((done) => web.listen(0, '127.0.0.1', done));
    url = `http://127.0.0.1:${(web.address() as AddressInfo).port}/`;
  });
  afterAll(async () => {
    await new Promise((done) => web.close(done));
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs as the provider’s own unprivileged uid, with no supplementary groups', async () => {
    const server = await start();
    try {
      // Node lists the effective gid among the groups: none other is there.
      expect(await server.call('whoami')).toEqual({ uid, gid: uid, groups: [uid] });
    } finally {
      await server.close();
    }
  });

  it('cannot reach a server on the host’s loopback without net.fetch; can with it', async () => {
    const boxed = await start();
    const open = await start({ permissions: ['net.fetch'], hosts: ['*'] });
    try {
      const refused = await boxed.call('fetch_url', { url });
      expect(refused.ok).toBeUndefined();
      expect(refused.error).toBe('ECONNREFUSED');
      expect(await open.call('fetch_url', { url })).toEqual({ ok: true, status: 200, body: 'reached the host' });
    } finally {
      await Promise.all([boxed.close(), open.close()]);
    }
  });

  it('writes in its declared folder, not outside it; reads its declared paths, not the rest of the host', async () => {
    const server = await start({ write: [allowed] });
    try {
      // Concurrent calls, as a client would make them.
      const [inside, beside, shadow, secret] = await Promise.all([
        server.call('write_file', { path: join(allowed, 'out.txt'), text: 'allowed' }),
        server.call('write_file', { path: join(outside, 'planted.txt'), text: 'escaped' }),
        server.call('read_file', { path: '/etc/shadow' }),
        server.call('read_file', { path: join(outside, 'secret.txt') }),
      ]);
      expect(inside).toEqual({ ok: true });
      expect(readFileSync(join(allowed, 'out.txt'), 'utf8')).toBe('allowed');
      expect(beside.error).toBe('ENOENT');
      expect(existsSync(join(outside, 'planted.txt'))).toBe(false);
      expect(shadow.error).toBe('ENOENT');
      expect(secret.error).toBe('ENOENT');
      expect(await server.call('read_file', { path: join(allowed, 'out.txt') })).toEqual({ ok: true, text: 'allowed' });
      // Its own install folder is there, read-only.
      expect((await server.call('read_file', { path: SERVER })).ok).toBe(true);
      expect((await server.call('write_file', { path: SERVER, text: 'replaced' })).error).toBe('EROFS');
    } finally {
      await server.close();
    }
  });

  it('runs a #!/usr/bin/env node server installed in a folder of its own, which it can read but not change', async () => {
    // As npm installs one: a script run through env, its packages in a node_modules beside it (here a link).
    const pkg = join(dir, 'pkg');
    mkdirSync(pkg);
    chmodSync(pkg, 0o755);
    const serve = join(pkg, 'serve.mjs');
    writeFileSync(serve, `#!/usr/bin/env node\n${readFileSync(SERVER, 'utf8')}`, { mode: 0o755 });
    symlinkSync(resolve('node_modules'), join(pkg, 'node_modules'));
    const server = await start({ command: serve, args: [] });
    try {
      expect(await server.call('whoami')).toMatchObject({ uid });
      expect((await server.call('read_file', { path: serve })).ok).toBe(true);
      expect((await server.call('write_file', { path: serve, text: 'replaced' })).error).toBe('EROFS');
      expect((await server.call('write_file', { path: join(pkg, 'new.txt'), text: 'x' })).error).toBe('EROFS');
      // The engine's own checkout is not its install folder: not there.
      expect((await server.call('read_file', { path: SERVER })).error).toBe('ENOENT');
    } finally {
      await server.close();
    }
  });

  it.runIf(existsSync(FILESYSTEM))('runs @modelcontextprotocol/server-filesystem from npm, writing where it is declared', async () => {
    const data = join(dir, 'fsdata');
    mkdirSync(data);
    chownSync(data, uid, uid);
    const server = await start({ command: FILESYSTEM, args: [data], write: [data] });
    try {
      const { tools } = await server.client.listTools();
      expect(tools.map((tool) => tool.name)).toContain('write_file');
      const written = await server.client.callTool({ name: 'write_file', arguments: { path: join(data, 'note.txt'), content: 'from the server' } });
      expect(written.isError).toBeFalsy();
      expect(readFileSync(join(data, 'note.txt'), 'utf8')).toBe('from the server');
    } finally {
      await server.close();
    }
  });

  it.runIf(existsSync(EVERYTHING))('runs @modelcontextprotocol/server-everything from npm', async () => {
    const server = await start({ command: EVERYTHING, args: ['stdio'] });
    try {
      const echoed = await server.client.callTool({ name: 'echo', arguments: { message: 'contained' } });
      expect(JSON.stringify(echoed.content)).toContain('contained');
    } finally {
      await server.close();
    }
  });

  it('reads a declared folder but cannot write it', async () => {
    const server = await start({ read: [outside] });
    try {
      expect(await server.call('read_file', { path: join(outside, 'secret.txt') })).toEqual({ ok: true, text: 'host secret\n' });
      expect((await server.call('write_file', { path: join(outside, 'planted.txt'), text: 'x' })).error).toBe('EROFS');
      expect(existsSync(join(outside, 'planted.txt'))).toBe(false);
    } finally {
      await server.close();
    }
  });

  it('the same attempts succeed uncontained ("sandbox": false): the checks above can fail', async () => {
    const server = await start({ sandbox: false });
    try {
      expect(await server.call('write_file', { path: join(outside, 'planted.txt'), text: 'escaped' })).toEqual({ ok: true });
      expect((await server.call('read_file', { path: '/etc/shadow' })).ok).toBe(true);
      expect((await server.call('fetch_url', { url })).ok).toBe(true);
    } finally {
      rmSync(join(outside, 'planted.txt'), { force: true });
      await server.close();
    }
  });

  it('cannot make a user namespace of its own (seccomp), which uncontained it can', async () => {
    const boxed = await start();
    const open = await start({ sandbox: false });
    try {
      const refused = await boxed.call('unshare');
      expect(refused.status).not.toBe(0);
      expect(refused.stderr).toMatch(/Operation not permitted/);
      expect(await open.call('unshare')).toMatchObject({ status: 0, stdout: '0' });
    } finally {
      await Promise.all([boxed.close(), open.close()]);
    }
  });

  it('stops a fork bomb at its process limit, and survives it', async () => {
    const bounded = await start({ limits: { processes: 32 } });
    const loose = await start({ limits: { processes: 1000 } });
    try {
      const bomb = await bounded.call('fork', { count: 100 });
      expect(bomb.error).toBe('EAGAIN');
      expect(bomb.started).toBeLessThan(32);
      expect(await bounded.call('whoami')).toMatchObject({ uid });
      expect(await loose.call('fork', { count: 100 })).toEqual({ started: 100, error: null });
    } finally {
      await Promise.all([bounded.close(), loose.close()]);
    }
  });

  it('cannot take more memory than its limit', async () => {
    // The default limit: it must leave room for Node 24's start (about 600 MB reserved) and still hold.
    const limit = DEFAULT_SANDBOX_LIMITS.memory_mb;
    const bounded = await start();
    const loose = await start({ limits: { memory_mb: 2 * limit + 1024 } });
    try {
      const greedy = await bounded.call('allocate', { mb: 2 * limit });
      expect(greedy.error).toMatch(/allocation failed/i);
      expect(greedy.mb).toBeLessThan(limit);
      expect(await loose.call('allocate', { mb: 2 * limit })).toEqual({ ok: true, mb: 2 * limit });
    } finally {
      await Promise.all([bounded.close(), loose.close()]);
    }
  });

  it('from an engine that is not root: a user namespace, the same walls', async () => {
    const nobody = 65_534;
    const mine = join(dir, 'nobody');
    mkdirSync(mine);
    chownSync(mine, nobody, nobody);
    const server = await start({ write: [mine] }, nobody);
    try {
      expect(await server.call('whoami')).toMatchObject({ uid: nobody });
      expect((await server.call('fetch_url', { url })).error).toBe('ECONNREFUSED');
      expect(await server.call('write_file', { path: join(mine, 'out.txt'), text: 'mine' })).toEqual({ ok: true });
      expect(readFileSync(join(mine, 'out.txt'), 'utf8')).toBe('mine');
      expect((await server.call('write_file', { path: join(outside, 'planted.txt'), text: 'escaped' })).error).toBe('ENOENT');
      expect((await server.call('read_file', { path: join(outside, 'secret.txt') })).error).toBe('ENOENT');
      expect(existsSync(join(outside, 'planted.txt'))).toBe(false);
    } finally {
      await server.close();
    }
  });

  it('leaves no process of the server behind when it is closed, or when the engine dies', async () => {
    const closed = await start({ uid: LONE_UID });
    await closed.call('whoami');
    expect(processesOf(LONE_UID)).not.toEqual([]);
    await closed.close();
    await until(() => processesOf(LONE_UID).length === 0);

    // An engine killed outright: the server, even one that ignores its stdin closing, must not outlive it.
    const line = sandboxedServer({ name: NAME, command: process.execPath, args: [SERVER, '--linger'], uid: LONE_UID }, host);
    const engine = spawn(
      process.execPath,
      [
        '-e',
        'const c = require("node:child_process").spawn(process.argv[1], JSON.parse(process.argv[2]), { stdio: ["pipe", "pipe", "inherit"] }); setInterval(() => {}, 1000);',
        line.command,
        JSON.stringify(line.args),
      ],
      { env: line.env, stdio: 'ignore' },
    );
    await until(() => processesOf(LONE_UID).length > 0);
    engine.kill('SIGKILL');
    await until(() => processesOf(LONE_UID).length === 0);
  });
});

describe('provider sandbox settings that cannot be honoured', () => {
  const spec: SandboxSpec = { name: 'p', command: process.execPath, args: [SERVER] };
  const refusal = (s: SandboxSpec, h = host) => {
    try {
      sandboxedServer(s, h);
    } catch (error) {
      expect(error).toBeInstanceOf(SandboxRefusal);
      return error as SandboxRefusal;
    }
    throw new Error('not refused');
  };
  const working = {
    ...host,
    problem: null,
    fix: null,
    bwrap: '/usr/bin/bwrap',
    seccomp: true,
    tools: host.tools ?? { bash: '/bin/bash', base64: '/usr/bin/base64', prlimit: '/usr/bin/prlimit', setpriv: '/usr/bin/setpriv' },
  };

  it('refuses a host allowlist for net.fetch rather than pretending to enforce it', () => {
    const error = refusal({ ...spec, permissions: ['net.fetch'], hosts: ['api.github.com'] }, working);
    expect(error.reason).toBe('hosts-not-enforceable');
    expect(error.message).toContain('provider "p"');
    expect(error.message).toContain('api.github.com');
    expect(error.fix).toContain('"hosts": ["*"]');
    expect(refusal({ ...spec, hosts: ['api.github.com'] }, working).reason).toBe('hosts-without-net');
  });

  it('refuses to start a server uncontained when bubblewrap is missing, unless the provider says "sandbox": false', async () => {
    const missing = await sandboxAvailable('/nonexistent/bwrap');
    expect(missing.problem).toContain('not installed');
    expect(missing.summary).toContain('stdio servers cannot be sandboxed here');
    const error = refusal(spec, missing);
    expect(error.reason).toBe('no-sandbox');
    expect(error.message).toContain('will not start its stdio server uncontained');
    expect(error.fix).toContain('"sandbox": false');
    const line = sandboxedServer({ ...spec, sandbox: false, env: { A: '1' } }, missing);
    expect(line).toMatchObject({ command: process.execPath, args: [SERVER], env: { A: '1' }, describe: { sandboxed: false } });
  });

  it('refuses environment that would change how the sandbox’s own helpers load', () => {
    const error = refusal({ ...spec, env: { LD_PRELOAD: '/tmp/evil.so' } }, working);
    expect(error.reason).toBe('loader-env');
    expect(error.message).toContain('LD_PRELOAD');
    expect(refusal({ ...spec, env: { 'BASH_FUNC_printf%%': '() { id; }' } }, working).reason).toBe('loader-env');
    expect(refusal({ ...spec, env: { BASH_ENV: '/tmp/x' } }, working).reason).toBe('loader-env');
  });

  it('refuses relative, missing and whole-host paths, and unknown or bad limits, saying where', () => {
    expect(refusal({ ...spec, write: ['data'] }, working).message).toContain('"write"[0]');
    expect(refusal({ ...spec, read: ['/nonexistent/x'] }, working).reason).toBe('missing-path');
    expect(refusal({ ...spec, read: ['/'] }, working).reason).toBe('whole-host');
    expect(refusal({ ...spec, limits: { memory: 1 } as never }, working).message).toContain('unknown sandbox limit "memory"');
    expect(refusal({ ...spec, limits: { processes: 0 } }, working).reason).toBe('bad-limit');
    expect(refusal({ ...spec, command: 'no-such-server-program' }, working).reason).toBe('no-command');
  });

  it('passes secrets in the environment, never on the command line, and says how it contains the server', () => {
    const line = sandboxedServer({ ...spec, env: { TOKEN: 'hunter2' } }, working);
    expect(line.env.TOKEN).toBe('hunter2');
    expect(line.args.join(' ')).not.toContain('hunter2');
    expect(line.describe).toMatchObject({ sandboxed: true, network: 'none', writes: [], limits: DEFAULT_SANDBOX_LIMITS });
    expect(line.describe.summary).toContain('no network');
  });
});
