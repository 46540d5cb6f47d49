import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine.js';
import type { Progress } from '../src/result.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { waitFor } from './support/daemon.js';
import { nextEvent, openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * The MCP provider kind against a real MCP server (fixtures/providers/mcp-server.mjs, written with the
 * SDK) over stdio and over Streamable HTTP: what the upstream does is seen from the engine's side
 * (results, events, status) and from the server's (files it writes when it is cancelled or starts).
 */

const SERVER = new URL('../fixtures/providers/mcp-server.mjs', import.meta.url).pathname;
const API = 'sk_live_7Hq2-provider-env-value';
const AUTH = 'Bearer hdr_Zx81-provider-header-value';
const GRANTS = ['vfs.read', 'vfs.write', 'net.fetch'];

let marks: string;
const started = () => readdirSync(marks).filter((f) => f.startsWith('started-'));
const text = (data: unknown) => ((data as { content: Array<{ text: string }> }).content[0] as { text: string }).text;

function projectWith(config: Record<string, unknown>): TempProject {
  const p = tempProject();
  writeFileSync(join(p.dir, 'arium.json'), JSON.stringify(config));
  return p;
}

beforeAll(() => {
  marks = mkdtempSync(join(tmpdir(), 'arium-mcp-marks-'));
  // The server runs sandboxed, as a uid of its own when the tests run as root: it writes its marks here.
  chmodSync(marks, 0o777);
});
afterAll(() => rmSync(marks, { recursive: true, force: true }));

describe('an MCP server over stdio', () => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = projectWith({
      grants: GRANTS,
      providers: {
        local: {
          mcp: {
            command: process.execPath,
            args: [SERVER],
            env: { API_TOKEN: { $secret: 'api' }, MARKS: marks },
            sandbox: { read: [], write: [marks] },
          },
          permissions: ['net.fetch'],
          start: 'eager',
        },
      },
    });
    engine = await openEngine(project, { secrets: { api: API }, approvals: { rules: [{ tool: 'local.echo', when: { text: { prefix: 'ask' } } }] } });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
    project?.remove();
  });

  it('lists the server tools under the provider, with their schemas', () => {
    const ids = engine
      .tools()
      .filter((t) => t.source === 'provider:local')
      .map((t) => t.id);
    expect(ids).toEqual(['local.echo', 'local.fail', 'local.grow', 'local.read_env', 'local.slow', 'local.sum']);
    expect(engine.tool('local.sum')?.output_schema).toMatchObject({ required: ['sum'] });
    expect(engine.problems().filter((p) => p.file === 'provider:local')).toEqual([]);
  });

  it('calls a tool; structured output comes back as data checked against the output schema', async () => {
    const echoed = await engine.call('local.echo', { text: 'hi' });
    expect(echoed.ok && text(echoed.data)).toBe('hi');
    expect(await engine.call('local.sum', { a: 2, b: 3 })).toMatchObject({ ok: true, data: { sum: 5 } });
  });

  it('many callers at once each get their own answer', async () => {
    const texts = Array.from({ length: 40 }, (_, i) => `caller ${i}`);
    const results = await Promise.all(texts.map((t) => engine.call('local.echo', { text: t })));
    expect(results.map((r) => (r.ok ? text(r.data) : r.error.code))).toEqual(texts);
  });

  it('denies a caller without the provider permission; the server is never called', async () => {
    const result = await engine.call('local.echo', { text: 'x' }, { grants: ['vfs.read'] });
    expect(result).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  });

  it('holds a call an approvals rule matches until a person approves it', async () => {
    const asked = nextEvent(engine, 'approval');
    const waiting = engine.call('local.echo', { text: 'ask first' });
    const pending = await asked;
    engine.approve(pending.run_id, { by: 'tester' });
    const result = await waiting;
    expect(result.ok && text(result.data)).toBe('ask first');
  });

  it("puts a secret into the server's environment and scrubs it from what the server returns", async () => {
    const result = await engine.call('local.read_env', { name: 'API_TOKEN' });
    expect(result.ok && text(result.data)).toBe('[secret:api]');
    expect(JSON.stringify(result)).not.toContain(API);
  });

  it("a tool's own failure is TOOL_ERROR with the server's message", async () => {
    expect(await engine.call('local.fail', {})).toMatchObject({
      ok: false,
      error: { code: 'TOOL_ERROR', message: 'the tool failed on purpose', retryable: false },
    });
  });

  it('passes progress and log lines through to the caller', async () => {
    const progress: Progress[] = [];
    const lines: string[] = [];
    const result = await engine.call('local.slow', { ms: 200 }, { onProgress: (p) => progress.push(p), onLog: (line) => lines.push(line.message) });
    expect(result.ok).toBe(true);
    expect(progress.length).toBeGreaterThan(1);
    expect(progress[0]).toMatchObject({ progress: 1, message: 'step 1' });
    expect(lines).toContain('slow step 1');
    expect(result.meta.logs?.some((l) => l.message === 'slow step 1')).toBe(true);
  });

  it("cancels the server's work when the caller cancels (notifications/cancelled)", async () => {
    const controller = new AbortController();
    const running = engine.call('local.slow', { ms: 20_000, n: 7 }, { signal: controller.signal });
    await new Promise((r) => setTimeout(r, 150));
    controller.abort();
    expect(await running).toMatchObject({ ok: false, error: { code: 'CANCELLED' } });
    await waitFor(() => existsSync(join(marks, 'cancelled-7')), 10_000, 'the server to see the cancellation');
  });

  it('a timed-out call is cancelled on the server too', async () => {
    const result = await engine.call('local.slow', { ms: 20_000, n: 8 }, { timeout_ms: 300 });
    expect(result).toMatchObject({ ok: false, error: { code: 'TIMEOUT', retryable: true } });
    await waitFor(() => existsSync(join(marks, 'cancelled-8')), 10_000, 'the server to see the cancellation');
  });

  it('upstream list_changed updates the registry live', async () => {
    const changed = nextEvent(engine, 'registry', (e) => e.added.includes('local.extra'), 10_000);
    expect((await engine.call('local.grow', {})).ok).toBe(true);
    await changed;
    const result = await engine.call('local.extra', {});
    expect(result.ok && text(result.data)).toBe('extra ran');
  });

  it('a server killed mid-call: the call ends UNAVAILABLE retryable, the next call runs on a new server', async () => {
    const before = await engine.status();
    const pid = before.providers?.[0]?.details?.pid as number;
    expect(pid).toBeGreaterThan(0);
    const starts = started().length;
    const running = [1, 2, 3].map(() => engine.call('local.slow', { ms: 20_000 }));
    await new Promise((r) => setTimeout(r, 150));
    process.kill(pid, 'SIGKILL');
    for (const result of await Promise.all(running)) {
      expect(result).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true } });
      expect(result.ok || result.error.message).toMatch(/stopped during the call/);
    }
    const next = await engine.call('local.echo', { text: 'again' });
    expect(next.ok && text(next.data)).toBe('again');
    const after = (await engine.status()).providers?.[0];
    expect(after).toMatchObject({ state: 'ready', restarts: 1 });
    expect(after?.details?.pid).not.toBe(pid);
    expect(started().length).toBe(starts + 1);
  });
});

describe('an MCP server over Streamable HTTP', () => {
  let server: ChildProcess;
  let url: string;
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    server = spawn(process.execPath, [SERVER, 'http'], { env: { ...process.env, REQUIRE_AUTH: AUTH }, stdio: ['ignore', 'pipe', 'inherit'] });
    const port = await new Promise<string>((resolve, reject) => {
      server.stdout?.on('data', (chunk: Buffer) => {
        const found = /listening (\d+)/.exec(chunk.toString());
        if (found) resolve(found[1] as string);
      });
      server.once('exit', () => reject(new Error('the test server exited')));
    });
    url = `http://127.0.0.1:${port}/mcp`;
    project = projectWith({
      grants: GRANTS,
      providers: {
        docs: { mcp: { url, headers: { Authorization: { $secret: 'auth' } } }, permissions: ['net.fetch'] },
        nokey: { mcp: { url }, start: 'lazy' },
      },
    });
    engine = await openEngine(project, { secrets: { auth: AUTH } });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
    server?.kill();
    project?.remove();
  });

  it('starts on first call, with the header from a secret; lists and calls', async () => {
    expect((await engine.status()).providers?.find((p) => p.name === 'docs')?.state).toBe('idle');
    const result = await engine.call('docs.echo', { text: 'over http' });
    expect(result.ok && text(result.data)).toBe('over http');
    expect(engine.tool('docs.sum')).toBeDefined();
    expect(await engine.call('docs.sum', { a: 1, b: 1 })).toMatchObject({ ok: true, data: { sum: 2 } });
  });

  it('denies a caller without the provider permission', async () => {
    expect(await engine.call('docs.echo', { text: 'x' }, { grants: ['vfs.read'] })).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  });

  it("scrubs the header's secret from what the server returns", async () => {
    const result = await engine.call('docs.read_env', { name: 'REQUIRE_AUTH' });
    expect(result.ok && text(result.data)).toBe('[secret:auth]');
  });

  it('a server that refuses the connection leaves the provider failed, with why, and a load problem', async () => {
    const result = await engine.call('nokey.echo', { text: 'x' });
    expect(result).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', details: { provider: 'nokey' } } });
    const status = (await engine.status()).providers?.find((p) => p.name === 'nokey');
    // Tried again with a growing pause: failed, or trying once more.
    expect(status?.state).toMatch(/^(failed|restarting)$/);
    expect(status?.error).toMatch(/401|unauthorized/i);
    expect(engine.problems().find((p) => p.file === 'provider:nokey')?.message).toMatch(/did not start/);
  });
});

describe('an MCP provider misconfigured', () => {
  it('a secret the project does not hold: the provider fails to start, saying which', async () => {
    const project = projectWith({
      providers: { local: { mcp: { command: process.execPath, args: [SERVER], env: { API_TOKEN: { $secret: 'missing' } } }, start: 'eager' } },
    });
    const engine = await openEngine(project);
    try {
      const status = (await engine.status()).providers?.[0];
      expect(status?.state).toMatch(/^(failed|restarting)$/);
      expect(status?.error).toMatch(/env API_TOKEN names the secret "missing", which the project's "secrets" does not hold/);
      expect(engine.tools().some((t) => t.source === 'provider:local')).toBe(false);
    } finally {
      await engine.close();
      project.remove();
    }
  });
});

describe('an MCP server that exits at start', () => {
  it('leaves the provider failed with the end of what the server wrote to stderr, and is tried again', async () => {
    const project = projectWith({
      providers: {
        local: { mcp: { command: process.execPath, args: ['-e', "console.error('boom: no config file'); process.exit(2)"] }, start: 'eager' },
      },
    });
    const engine = await openEngine(project);
    try {
      const status = (await engine.status()).providers?.[0];
      expect(status?.state).toMatch(/^(failed|restarting)$/);
      expect(status?.error).toContain('boom: no config file');
      await waitFor(async () => ((await engine.status()).providers?.[0]?.restarts ?? 0) >= 1, 10_000, 'a second start');
      const call = await engine.call('local.echo', { text: 'x' });
      expect(call).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true, details: { provider: 'local' } } });
      expect(call.ok || call.error.message).toContain('boom: no config file');
    } finally {
      await engine.close();
      project.remove();
    }
  });
});

describe('a sandboxed MCP server that runs out of memory at start', () => {
  it("is failed with the runtime's reason and the limit to raise, not the native stack that follows it", async () => {
    const project = projectWith({
      providers: {
        local: {
          // 800 MB: above what Node 24 reserves at start (about 600), so the server's own heap is what fills it.
          mcp: {
            command: process.execPath,
            args: ['-e', 'const a = []; for (;;) a.push(new Array(1e6).fill(1.5))'],
            sandbox: { limits: { memory_mb: 800 } },
          },
          start: 'eager',
        },
      },
    });
    const engine = await openEngine(project);
    try {
      const error = (await engine.status()).providers?.[0]?.error ?? '';
      expect(error).toMatch(/the server ran out of memory \(.*out of memory.*\)/);
      expect(error).toContain('its sandbox allows 800 MB of data memory per process: raise "sandbox": { "limits": { "memory_mb" } }');
      expect(error).not.toMatch(/0x[0-9a-f]{6}/);
    } finally {
      await engine.close();
      project.remove();
    }
  }, 30_000);
});

describe('an MCP server that prints a secret and exits', () => {
  it('its state, load problem and UNAVAILABLE answers show the secret scrubbed', async () => {
    const project = projectWith({
      providers: {
        local: {
          mcp: {
            command: process.execPath,
            args: ['-e', 'console.error("bad token " + process.env.API_TOKEN); process.exit(2)'],
            env: { API_TOKEN: { $secret: 'api' } },
          },
          start: 'eager',
        },
      },
    });
    const engine = await openEngine(project, { secrets: { api: API } });
    try {
      const status = engine.providers()[0];
      expect(status?.error).toContain('bad token [secret:api]');
      const call = await engine.call('local.echo', { text: 'x' });
      const problem = engine.problems().find((p) => p.file === 'provider:local');
      expect(problem?.message).toContain('bad token [secret:api]');
      expect(JSON.stringify([status, (await engine.status()).providers, call, engine.problems()])).not.toContain(API);
    } finally {
      await engine.close();
      project.remove();
    }
  });
});

describe('an MCP provider closed with the engine', () => {
  it('a call in flight ends UNAVAILABLE and the server process is gone', async () => {
    const project = projectWith({
      grants: GRANTS,
      providers: { local: { mcp: { command: process.execPath, args: [SERVER] }, permissions: ['net.fetch'], start: 'eager' } },
    });
    const engine = await openEngine(project);
    try {
      const pid = (await engine.status()).providers?.[0]?.details?.pid as number;
      const running = engine.call('local.slow', { ms: 20_000 });
      await new Promise((r) => setTimeout(r, 150));
      await engine.close();
      expect(await running).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE' } });
      await waitFor(
        () => {
          try {
            process.kill(pid, 0);
            return false;
          } catch {
            return true;
          }
        },
        10_000,
        'the server process to end',
      );
    } finally {
      project.remove();
    }
  });
});

describe('an MCP server over Streamable HTTP that dies', () => {
  it('a call in flight ends UNAVAILABLE retryable; calls after it fail UNAVAILABLE until the server is back', async () => {
    const serve = async (port = 0) => {
      const child = spawn(process.execPath, [SERVER, 'http', String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
      const found = await new Promise<string>((resolve, reject) => {
        child.stdout?.on('data', (chunk: Buffer) => {
          const m = /listening (\d+)/.exec(chunk.toString());
          if (m) resolve(m[1] as string);
        });
        child.once('exit', () => reject(new Error('the test server exited')));
      });
      return { child, port: found };
    };
    const first = await serve();
    const project = projectWith({ grants: GRANTS, providers: { flaky: { mcp: { url: `http://127.0.0.1:${first.port}/mcp` }, start: 'eager' } } });
    const engine = await openEngine(project);
    let second: ChildProcess | null = null;
    try {
      const running = engine.call('flaky.slow', { ms: 20_000 });
      await new Promise((r) => setTimeout(r, 200));
      first.child.kill('SIGKILL');
      const result = await running;
      expect(result).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true } });
      expect(await engine.call('flaky.echo', { text: 'nobody there' })).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true } });
      second = (await serve(Number(first.port))).child;
      await waitFor(async () => (await engine.call('flaky.echo', { text: 'back' })).ok, 20_000, 'the provider to reach the new server');
    } finally {
      await engine.close();
      first.child.kill('SIGKILL');
      second?.kill('SIGKILL');
      project.remove();
    }
  }, 60_000);
});

describe('through the engine MCP surface', () => {
  it("a client of the engine hears the upstream server's progress and log lines", async () => {
    const project = projectWith({
      grants: GRANTS,
      providers: { local: { mcp: { command: process.execPath, args: [SERVER] }, permissions: ['net.fetch'], start: 'eager' } },
    });
    const gateway: Gateway = await createGateway({
      workspace: project.workspace,
      project: project.project,
      inspector: false,
      engineOptions: { persist: false, watch: false },
    });
    const client = new Client({ name: 'test', version: '1' });
    try {
      const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
      const logs: string[] = [];
      client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
        logs.push(String(n.params.data));
      });
      const progress: Array<{ progress: number; message?: string }> = [];
      const result = await client.callTool({ name: 'local.slow', arguments: { ms: 200 } }, undefined, { onprogress: (p) => progress.push(p) });
      expect(result.isError).toBeFalsy();
      expect(progress.some((p) => p.message === 'step 1')).toBe(true);
      expect(progress.map((p) => p.progress)).toEqual([...progress.map((p) => p.progress)].sort((a, b) => a - b));
      expect(logs).toContain('slow step 1');
    } finally {
      await client.close();
      await gateway.close();
      project.remove();
    }
  }, 60_000);
});
