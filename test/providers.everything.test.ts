import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine.js';
import type { Progress } from '../src/result.js';
import { nextEvent, openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * The MCP provider kind against a real server from the npm registry, @modelcontextprotocol/server-everything
 * (the MCP reference servers' test server), over stdio (its package bin) and over Streamable HTTP (its
 * `streamableHttp` mode, on the port PORT names, at /mcp).
 */

const PACKAGE = new URL('../node_modules/@modelcontextprotocol/server-everything/', import.meta.url).pathname;
const BIN = join(
  PACKAGE,
  (JSON.parse(readFileSync(join(PACKAGE, 'package.json'), 'utf8')) as { bin: Record<string, string> }).bin['mcp-server-everything'] as string,
);
const TOKEN = 'ghp_Everything0Token9Value';
const GRANTS = ['vfs.read', 'vfs.write', 'net.fetch'];
const text = (data: unknown) => ((data as { content: Array<{ text: string }> }).content[0] as { text: string }).text;

function projectWith(config: Record<string, unknown>): TempProject {
  const p = tempProject();
  writeFileSync(join(p.dir, 'arium.json'), JSON.stringify(config));
  return p;
}

/** A port free on loopback now (the server binds it a moment later). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

describe('server-everything over stdio', () => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = projectWith({
      grants: GRANTS,
      providers: {
        every: {
          mcp: { command: process.execPath, args: [BIN, 'stdio'], env: { GITHUB_TOKEN: { $secret: 'gh' } } },
          permissions: ['net.fetch'],
          tools: ['echo', 'get-*', 'trigger-long-running-operation'],
          start: 'eager',
        },
      },
    });
    engine = await openEngine(project, {
      secrets: { gh: TOKEN },
      approvals: { rules: [{ tool: 'every.echo', when: { message: { prefix: 'deploy' } } }] },
    });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
    project?.remove();
  });

  it('lists the tools the provider serves, checked and published like any tool', () => {
    const ids = engine
      .tools()
      .filter((t) => t.source === 'provider:every')
      .map((t) => t.id);
    expect(ids).toContain('every.echo');
    expect(ids).toContain('every.get-env');
    expect(ids).toContain('every.trigger-long-running-operation');
    expect(ids).not.toContain('every.toggle-simulated-logging');
    expect(engine.problems().filter((p) => p.file === 'provider:every')).toEqual([]);
  });

  it('calls a tool', async () => {
    const result = await engine.call('every.echo', { message: 'hello' });
    expect(result.ok && text(result.data)).toBe('Echo: hello');
  });

  it('denies a caller without the provider permission', async () => {
    expect(await engine.call('every.echo', { message: 'x' }, { grants: ['vfs.read'] })).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  });

  it('waits for approval when a rule matches the input', async () => {
    const asked = nextEvent(engine, 'approval');
    const waiting = engine.call('every.echo', { message: 'deploy prod' });
    engine.approve((await asked).run_id, { by: 'tester' });
    const result = await waiting;
    expect(result.ok && text(result.data)).toBe('Echo: deploy prod');
  });

  it('the server gets the secret in its environment, and its dump of the environment comes back scrubbed', async () => {
    const result = await engine.call('every.get-env', {});
    expect(result.ok).toBe(true);
    const env = JSON.parse(text(result.ok ? result.data : null)) as Record<string, string>;
    expect(env.GITHUB_TOKEN).toBe('[secret:gh]');
    expect(JSON.stringify(result)).not.toContain(TOKEN);
  });

  it("passes the server's progress through", async () => {
    const progress: Progress[] = [];
    const result = await engine.call('every.trigger-long-running-operation', { duration: 0.3, steps: 3 }, { onProgress: (p) => progress.push(p) });
    expect(result.ok).toBe(true);
    // The SDK's client runs notification handlers a tick after it reads them, and the answer at once:
    // the report of the last step may come after the answer, when the call no longer listens.
    expect(progress.slice(0, 2)).toEqual([
      { progress: 1, total: 3 },
      { progress: 2, total: 3 },
    ]);
  });

  it('a cancelled call ends CANCELLED', async () => {
    const controller = new AbortController();
    const running = engine.call('every.trigger-long-running-operation', { duration: 20, steps: 2 }, { signal: controller.signal });
    await new Promise((r) => setTimeout(r, 100));
    controller.abort();
    expect(await running).toMatchObject({ ok: false, error: { code: 'CANCELLED' } });
  });

  it('killed mid-call: UNAVAILABLE retryable, and the next call runs on a restarted server', async () => {
    const pid = (await engine.status()).providers?.[0]?.details?.pid as number;
    const running = engine.call('every.trigger-long-running-operation', { duration: 20, steps: 2 });
    await new Promise((r) => setTimeout(r, 200));
    process.kill(pid, 'SIGKILL');
    expect(await running).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true } });
    const next = await engine.call('every.echo', { message: 'again' });
    expect(next.ok && text(next.data)).toBe('Echo: again');
    expect((await engine.status()).providers?.[0]).toMatchObject({ state: 'ready', restarts: 1 });
  });
});

describe('server-everything over Streamable HTTP', () => {
  let server: ChildProcess;
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    const port = await freePort();
    server = spawn(process.execPath, [BIN, 'streamableHttp'], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'] });
    await new Promise<void>((resolve, reject) => {
      let said = '';
      server.stderr?.on('data', (chunk: Buffer) => {
        said += chunk.toString();
        if (said.includes('listening on port')) resolve();
      });
      server.once('exit', () => reject(new Error(`server-everything exited: ${said}`)));
    });
    project = projectWith({
      grants: GRANTS,
      providers: {
        remote: {
          mcp: { url: `http://127.0.0.1:${port}/mcp` },
          permissions: ['net.fetch'],
          tools: ['echo', 'get-sum', 'trigger-long-running-operation'],
        },
      },
    });
    engine = await openEngine(project, { approvals: { rules: [{ tool: 'remote.get-sum' }] } });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
    server?.kill();
    project?.remove();
  });

  it('starts on the first call, lists and calls', async () => {
    const result = await engine.call('remote.echo', { message: 'over http' });
    expect(result.ok && text(result.data)).toBe('Echo: over http');
    expect(
      engine
        .tools()
        .filter((t) => t.source === 'provider:remote')
        .map((t) => t.id),
    ).toEqual(['remote.echo', 'remote.get-sum', 'remote.trigger-long-running-operation']);
  });

  it('denies a caller without the provider permission', async () => {
    expect(await engine.call('remote.echo', { message: 'x' }, { grants: ['vfs.read'] })).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  });

  it('holds a call for approval: denied it fails APPROVAL_DENIED, approved it runs', async () => {
    const asked = nextEvent(engine, 'approval');
    const waiting = engine.call('remote.get-sum', { a: 2, b: 3 });
    engine.deny((await asked).run_id, { by: 'tester', reason: 'not now' });
    expect(await waiting).toMatchObject({ ok: false, error: { code: 'APPROVAL_DENIED' } });
    const askedAgain = nextEvent(engine, 'approval', (e) => e.type === 'ApprovalRequested');
    const again = engine.call('remote.get-sum', { a: 2, b: 3 });
    const second = await askedAgain;
    engine.approve(second.run_id, { by: 'tester' });
    const result = await again;
    expect(result.ok && text(result.data)).toMatch(/5/);
  });

  it("passes the server's progress through", async () => {
    const progress: Progress[] = [];
    const result = await engine.call('remote.trigger-long-running-operation', { duration: 0.2, steps: 2 }, { onProgress: (p) => progress.push(p) });
    expect(result.ok).toBe(true);
    expect(progress[0]).toEqual({ progress: 1, total: 2 });
  });
});
