import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  type CallToolResult,
  ElicitRequestSchema,
  type ElicitResult,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { daemonPaths } from '../src/daemon/paths.js';
import { socketFetch } from '../src/daemon/socket-fetch.js';
import { createEngine } from '../src/index.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * `arium mcp` as a bridge to the workspace's daemon, driven by the SDK's own client over stdio: real
 * bridge processes (bin/arium.js from the build), a real daemon they start, the real socket between them.
 */

const BIN = join(import.meta.dirname, '..', 'bin', 'arium.js');

const py = (id: string, body: string, permissions: string[]) => ({
  [`${id}.py`]: `import time\n\ndef run(input, ctx):\n${body
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n')}\n`,
  [`${id}.json`]: definition({
    id,
    runner: 'py-runner',
    entry: `${id}.py`,
    permissions: ['exec.py', ...permissions],
    limits: { timeout_ms: 60_000 },
  }),
});

let project: TempProject;
let runtime: string;
const env = () => ({ PATH: process.env.PATH ?? '', XDG_RUNTIME_DIR: runtime });
const paths = () => daemonPaths(project.workspace, env());
const clients: Client[] = [];

/** The daemon's pid from its record, once it has written one. */
function daemonPid(): number | null {
  try {
    return (JSON.parse(readFileSync(paths().record, 'utf8')) as { pid: number }).pid;
  } catch {
    return null;
  }
}

/** Connections open to the daemon's socket now, from the kernel's table (/proc/net/unix, state 03: connected). */
function daemonConnections(): number {
  const socket = paths().socket;
  return readFileSync('/proc/net/unix', 'utf8')
    .split('\n')
    .filter((line) => line.endsWith(` ${socket}`) && line.trim().split(/\s+/)[5] === '03').length;
}

async function stopDaemon(): Promise<void> {
  const pid = daemonPid();
  if (pid === null) return;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {}
  await waitFor(() => !alive(pid), 15_000).catch(() => process.kill(pid, 'SIGKILL'));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A bridge for a client named `name`; with `elicit`, the client declares elicitation and answers with it. */
async function bridge(
  name: string,
  elicit?: (message: string) => Promise<ElicitResult>,
  projectName = project.project,
): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--no-node-snapshot', BIN, '--workspace', project.workspace, '--project', projectName, 'mcp'],
    env: env(),
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const client = new Client({ name, version: '1.0.0' }, elicit ? { capabilities: { elicitation: {} } } : {});
  if (elicit) client.setRequestHandler(ElicitRequestSchema, (request) => elicit(request.params.message));
  clients.push(client);
  await client.connect(transport).catch((error: Error) => {
    throw new Error(`${error.message}\n(bridge stderr: ${stderr})`);
  });
  return { client, stderr: () => stderr };
}

const call = (client: Client, name: string, args: Record<string, unknown> = {}) =>
  client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 }) as Promise<CallToolResult>;

beforeAll(() => {
  runtime = mkdtempSync(join(tmpdir(), 'arium-bridge-run-'));
  project = tempProject(
    {
      // Read, then write the whole file back: two calls that overlap conflict, and the engine runs one again.
      'append.js':
        "export default async function run(input, ctx) { const old = (await ctx.vfs.exists('/log.txt')) ? await ctx.vfs.read('/log.txt') : ''; await ctx.vfs.write('/log.txt', old + input.line + '\\n'); return { line: input.line }; }\n",
      'append.json': definition({
        id: 'demo.append',
        entry: 'append.js',
        permissions: ['exec.js', 'vfs.read', 'vfs.write'],
        limits: { max_attempts: 100 },
      }),
      'tool.js': TRIVIAL_JS,
      ...py('slow', "ctx.log('started', input.get('n'))\ntime.sleep(input.get('seconds', 2.5))\nreturn {'slept': True}", []),
      ...py('slow_writer', "ctx.vfs.write('/cancelled.txt', 'should never land')\nctx.log('started', input.get('n'))\ntime.sleep(30)", ['vfs.write']),
    },
    'arium-bridge-',
  );
  writeFileSync(
    join(project.dir, 'arium.json'),
    JSON.stringify({ audit_log: true, approvals: { rules: [{ tool: 'fs.delete' }], timeout_ms: 60_000 } }),
  );
});

afterAll(async () => {
  for (const client of clients) await client.close().catch(() => {});
  await stopDaemon();
  project?.remove();
  rmSync(runtime, { recursive: true, force: true });
});

describe('arium mcp bridges to the workspace daemon', () => {
  it('starts the daemon, lists the tools and runs a call through it', async () => {
    const { client } = await bridge('first');
    expect(daemonPid()).not.toBeNull();
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['demo.append', 'fs.read', 'fs.write']));
    const written = await call(client, 'fs.write', { path: '/hello.txt', content: 'hi' });
    expect(written.isError).toBeFalsy();
    expect((await call(client, 'fs.read', { path: '/hello.txt' })).structuredContent).toMatchObject({ content: 'hi' });
  });

  it('four bridges on one project, 32 read-modify-write calls each at once: every line lands exactly once', async () => {
    const bridges = await Promise.all(['one', 'two', 'three', 'four'].map((name) => bridge(`writer-${name}`)));
    const results = await Promise.all(
      bridges.flatMap(({ client }, b) => Array.from({ length: 32 }, (_, i) => call(client, 'demo.append', { line: `b${b}-${i}` }))),
    );
    for (const result of results) expect(result.isError, JSON.stringify(result.structuredContent)).toBeFalsy();
    const read = await call(bridges[0]?.client as Client, 'fs.read', { path: '/log.txt' });
    const lines = ((read.structuredContent as { content: string }).content.trim() || '').split('\n');
    const expected = Array.from({ length: 4 }, (_, b) => Array.from({ length: 32 }, (_, i) => `b${b}-${i}`)).flat();
    expect(lines.sort()).toEqual(expected.sort());
  });

  it('names each bridge’s calls mcp:<client name> in the audit log', async () => {
    const audit = join(project.dir, '.arium', 'audit.jsonl');
    const callers = () =>
      existsSync(audit)
        ? new Set(
            readFileSync(audit, 'utf8')
              .trim()
              .split('\n')
              .map((line) => (JSON.parse(line) as { type: string; caller?: string }).caller),
          )
        : new Set();
    await waitFor(() => ['mcp:first', 'mcp:writer-one', 'mcp:writer-two', 'mcp:writer-three', 'mcp:writer-four'].every((c) => callers().has(c)));
  });

  it('tells a bridge’s client when a tool file is added', async () => {
    const { client } = await bridge('watcher');
    let changed = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changed++;
    });
    // list_changed says that a list the client has is stale: it lists first. The bridge forwards that
    // request once its GET stream to the daemon is open, so the change below is heard on that stream.
    expect((await client.listTools()).tools.map((t) => t.name)).not.toContain('demo.late');
    project.write('late.json', definition({ id: 'demo.late' }));
    await waitFor(() => changed > 0, 15_000);
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('demo.late');
  });

  it('notifies a subscribed resource’s update', async () => {
    const { client } = await bridge('subscriber');
    const updated: string[] = [];
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      updated.push(n.params.uri);
    });
    const uri = `arium://${project.project}/vfs/docs`;
    await client.subscribeResource({ uri });
    await call(client, 'fs.write', { path: '/docs/a.txt', content: 'x' });
    await waitFor(() => updated.length > 0);
    expect(updated).toEqual([uri]);
  });

  it('passes progress and log notifications of a long call, and a cancellation', async () => {
    const { client } = await bridge('patient');
    const ticks: number[] = [];
    const logs: unknown[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
      logs.push(note.params.data);
    });
    const result = (await client.callTool({ name: 'slow', arguments: { n: 7, seconds: 2.5 } }, undefined, {
      onprogress: (p) => ticks.push(p.progress),
      timeout: 60_000,
    })) as CallToolResult;
    expect(result.structuredContent).toEqual({ slept: true });
    expect(ticks.length).toBeGreaterThanOrEqual(1);
    expect(logs).toContain('started 7');

    const cancel = new AbortController();
    client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
      if (note.params.data === 'started 8') cancel.abort('changed my mind');
    });
    const cancelled = client.callTool({ name: 'slow_writer', arguments: { n: 8 } }, undefined, { signal: cancel.signal, timeout: 60_000 });
    await expect(cancelled).rejects.toThrow();
    // The daemon heard notifications/cancelled: the call stopped, and its write never committed.
    const events = await waitForEvent('ToolErrorEvent', (e) => e.tool === 'slow_writer');
    expect(events.error?.code).toBe('CANCELLED');
    expect((await call(client, 'fs.read', { path: '/cancelled.txt' })).structuredContent).toMatchObject({ error: { code: 'NOT_FOUND' } });

    // The daemon answers nothing to a cancelled request: the bridge closes its stream, else each would
    // hold a connection for as long as the session lasts. Each open bridge keeps one: its GET stream
    // (idle pooled connections close after 5 s).
    for (const n of [11, 12, 13]) {
      const again = new AbortController();
      client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
        if (note.params.data === `started ${n}`) again.abort('changed my mind');
      });
      await expect(
        client.callTool({ name: 'slow_writer', arguments: { n } }, undefined, { signal: again.signal, timeout: 60_000 }),
      ).rejects.toThrow();
    }
    await waitFor(() => daemonConnections() <= clients.length, 20_000);
  }, 60_000);

  it('an approval asked through a bridge is answered by elicitation', async () => {
    const asked: string[] = [];
    const { client } = await bridge('approver', async (message) => {
      asked.push(message);
      return { action: 'accept', content: { decision: 'approve' } };
    });
    await call(client, 'fs.write', { path: '/doomed.txt', content: 'x' });
    const result = await call(client, 'fs.delete', { path: '/doomed.txt' });
    expect(result.isError, JSON.stringify(result.structuredContent)).toBeFalsy();
    expect(asked[0]).toContain('Approve fs.delete');
    const resolved = await waitForEvent('ApprovalResolved', (e) => e.outcome === 'approved' && e.by === 'mcp:approver');
    expect(resolved.by).toBe('mcp:approver');
  });

  it('an approval asked through a bridge is answered by POST /v1/approvals/{run_id} over the socket while the bridge waits', async () => {
    let elicited: (answer: ElicitResult) => void = () => {};
    const asked: string[] = [];
    const { client } = await bridge('bystander', (message) => {
      asked.push(message);
      // Nobody answers here: the call waits for the other surface.
      return new Promise((resolve) => {
        elicited = resolve;
      });
    });
    await call(client, 'fs.write', { path: '/doomed2.txt', content: 'x' });
    const result = call(client, 'fs.delete', { path: '/doomed2.txt' });
    await waitFor(() => asked.length > 0);
    const runId = /\(run ([0-9a-f-]+)/.exec(asked[0] as string)?.[1];
    expect(runId).toBeDefined();
    const fetch = socketFetch(paths().socket);
    const answer = await fetch(`/p/${project.project}/v1/approvals/${runId}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ decision: 'approve', by: 'operator' }),
    });
    expect(answer.status).toBe(200);
    const done = await result;
    expect(done.isError, JSON.stringify(done.structuredContent)).toBeFalsy();
    elicited({ action: 'cancel' });
    const read = await call(client, 'fs.read', { path: '/doomed2.txt' });
    expect(read.structuredContent).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('a project that does not exist, or that another engine holds, fails initialize saying so', async () => {
    await expect(bridge('lost', undefined, 'nope')).rejects.toThrow(/No project "nope" in this workspace/);
    mkdirSync(join(project.workspace, 'held', 'tools'), { recursive: true });
    const holder = await createEngine({ workspace: project.workspace, project: 'held', watch: false });
    try {
      await expect(bridge('blocked', undefined, 'held')).rejects.toThrow(/held by another engine/);
    } finally {
      await holder.close();
    }
  });

  it('a daemon stopped gracefully mid-call: the call answers UNAVAILABLE, and the next call runs on a new daemon', async () => {
    const { client } = await bridge('stopped');
    const first = daemonPid() as number;
    const started = new Promise<void>((resolve) => {
      client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
        if (note.params.data === 'started 10') resolve();
      });
    });
    const inFlight = call(client, 'slow', { n: 10, seconds: 30 });
    await started;
    process.kill(first, 'SIGTERM');
    const result = await inFlight;
    expect(result.structuredContent).toMatchObject({ error: { code: 'UNAVAILABLE', retryable: true, details: { committed: 'unknown' } } });
    await waitFor(() => !alive(first), 15_000);
    expect((await call(client, 'fs.write', { path: '/after-stop.txt', content: 'on' })).isError).toBeFalsy();
    expect(daemonPid()).not.toBe(first);
  }, 90_000);

  it('kill -9 of the daemon mid-call: the call answers UNAVAILABLE, and the next call runs on a new daemon', async () => {
    const { client, stderr } = await bridge('survivor');
    const first = daemonPid() as number;
    const watched = `arium://${project.project}/vfs/watched`;
    await client.subscribeResource({ uri: watched });
    const updated: string[] = [];
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      updated.push(n.params.uri);
    });
    const started = new Promise<void>((resolve) => {
      client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
        if (note.params.data === 'started 9') resolve();
      });
    });
    const inFlight = call(client, 'slow', { n: 9, seconds: 30 });
    await started;
    process.kill(first, 'SIGKILL');
    const result = await inFlight;
    expect(result.isError, stderr()).toBe(true);
    expect(result.structuredContent).toMatchObject({ error: { code: 'UNAVAILABLE', retryable: true, details: { committed: 'unknown' } } });
    expect((result.content[0] as { text: string }).text).toMatch(/engine stopped.*unknown/);

    const next = await call(client, 'fs.write', { path: '/after-kill.txt', content: 'on' });
    expect(next.isError).toBeFalsy();
    const second = daemonPid();
    expect(second).not.toBe(first);
    expect(second === null ? false : alive(second)).toBe(true);
    expect(stderr()).toContain('reconnected to a new engine daemon');
    // The new session was given the client's subscription again.
    await call(client, 'fs.write', { path: '/watched/x.txt', content: 'x' });
    await waitFor(() => updated.length > 0);
    expect(updated).toEqual([watched]);
  }, 90_000);
});

describe('the bridge is a thin client', () => {
  it('imports nothing of the engine: only the daemon link, its paths, the socket fetch, the caller name and the SDK', async () => {
    const built = await build({
      entryPoints: [join(import.meta.dirname, '..', 'src', 'daemon', 'bridge.ts')],
      bundle: true,
      platform: 'node',
      format: 'esm',
      write: false,
      metafile: true,
      logLevel: 'silent',
    });
    const ours = Object.keys(built.metafile.inputs).filter((input) => !input.includes('node_modules/'));
    expect(ours.sort()).toEqual(
      [
        'src/daemon/bridge-answers.ts',
        'src/daemon/bridge-fetch.ts',
        'src/daemon/bridge.ts',
        'src/daemon/link.ts',
        'src/daemon/paths.ts',
        'src/daemon/socket-fetch.ts',
        'src/surfaces/mcp/caller.ts',
      ].sort(),
    );
    const packages = new Set(Object.keys(built.metafile.inputs).flatMap((input) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input)?.[1] ?? []));
    expect([...packages].sort()).toEqual(['@modelcontextprotocol/sdk', 'content-type', 'eventsource-parser', 'pkce-challenge', 'zod'].sort());
  });
});

/** The first event of `type` in the audit log that `match` accepts. */
async function waitForEvent<T = Record<string, unknown> & { error?: { code: string }; by?: string }>(
  type: string,
  match: (event: Record<string, unknown>) => boolean,
): Promise<T> {
  const audit = join(project.dir, '.arium', 'audit.jsonl');
  let found: unknown;
  await waitFor(() => {
    if (!existsSync(audit)) return false;
    found = readFileSync(audit, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .find((event) => event.type === type && match(event));
    return found !== undefined;
  }, 15_000);
  return found as T;
}

async function waitFor(condition: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
