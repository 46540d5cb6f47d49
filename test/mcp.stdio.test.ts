import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  type CallToolResult,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from '../src/index.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

const execFileAsync = promisify(execFile);

/**
 * `arium mcp` driven by the MCP SDK's own client over stdio: the real server process (bin/arium.js from
 * the build), the real protocol. What a model's host application sees is what is checked.
 */

const ROOT = join(import.meta.dirname, '..');
const BIN = join(ROOT, 'bin', 'arium.js');

const py = (id: string, body: string, permissions: string[], limits: Record<string, number> = {}) => ({
  [`${id}.py`]: `import time\n\ndef run(input, ctx):\n${body
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n')}\n`,
  [`${id}.json`]: definition({ id, runner: 'py-runner', entry: `${id}.py`, permissions: ['exec.py', ...permissions], limits }),
});

let project: TempProject;

/** Connects a fresh client to a fresh `arium mcp` over the project. */
async function connect(p: TempProject = project): Promise<{ client: Client; close: () => Promise<void>; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [BIN, '--workspace', p.workspace, '--project', p.project, 'mcp', '--no-daemon'],
    stderr: 'pipe',
    env: { PATH: process.env.PATH ?? '' },
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const client = new Client({ name: 'arium-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, close: () => client.close(), stderr: () => stderr };
}

beforeAll(() => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({
      id: 'demo.echo',
      name: 'Echo',
      output_schema: { type: 'object' },
      schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false },
    }),
    'chatty.js':
      "export default async function run(input, ctx) { console.log('hello from the tool'); console.warn('careful'); return { said: 2 }; }\n",
    'chatty.json': definition({ id: 'demo.chatty', entry: 'chatty.js' }),
    'list.js': 'export default async function run() { return [1, 2, 3]; }\n',
    // Log, then run until cancelled: only a line sent while the tool runs can reach the client.
    'follow.js': "export default async function run(input, ctx) { console.log('started ' + input.n); for (;;) {} }\n",
    'follow.json': definition({ id: 'demo.follow', entry: 'follow.js', limits: { timeout_ms: 60000 } }),
    ...py('follow_py', "ctx.log('started', input.get('n'))\nwhile True:\n    time.sleep(0.05)", [], { timeout_ms: 60000 }),
    'list.json': definition({ id: 'demo.list', entry: 'list.js' }),
    ...py(
      'slow_writer',
      "ctx.vfs.write('/cancelled.txt', 'should never land')\ntime.sleep(input.get('seconds', 20))\nreturn {'slept': True}",
      ['vfs.write'],
      {
        timeout_ms: 60000,
      },
    ),
  });
});

afterAll(() => project?.remove());

describe('arium mcp over stdio, with the SDK client', () => {
  let session: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    session = await connect();
  });
  afterAll(async () => {
    await session?.close();
  });

  it('lists every tool with its schemas and annotations derived from its permissions', async () => {
    const { tools } = await session.client.listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect(byName.get('demo.echo')).toMatchObject({
      name: 'demo.echo',
      title: 'Echo',
      inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      outputSchema: { type: 'object' },
      annotations: { readOnlyHint: true, destructiveHint: false },
    });
    expect(byName.get('fs.read')?.annotations).toMatchObject({ readOnlyHint: true });
    expect(byName.get('fs.write')?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false });
    expect(byName.get('fs.delete')?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(byName.get('shell.run')?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true, openWorldHint: false });
    expect(byName.has('slow_writer')).toBe(true);
  });

  it('a success returns structuredContent and its text rendering; an output that is not an object only the text', async () => {
    const result = (await session.client.callTool({ name: 'demo.echo', arguments: { text: 'hi' } })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual({ text: 'hi' });
    expect(result.content).toEqual([{ type: 'text', text: '{"text":"hi"}' }]);
    expect(result._meta?.['arium/run_id']).toMatch(/\S/);
    const list = (await session.client.callTool({ name: 'demo.list', arguments: {} })) as CallToolResult;
    expect(list.structuredContent).toBeUndefined();
    expect(list.content).toEqual([{ type: 'text', text: '[1,2,3]' }]);
  });

  it('a failure is an isError result with the normalized error, never a protocol error', async () => {
    const bad = (await session.client.callTool({ name: 'demo.echo', arguments: { text: 42 } })) as CallToolResult;
    expect(bad.isError).toBe(true);
    expect(bad.structuredContent).toMatchObject({ error: { code: 'INVALID_INPUT', stage: 'validation', retryable: false } });
    expect(JSON.parse((bad.content[0] as { text: string }).text).error.code).toBe('INVALID_INPUT');
    const unknown = (await session.client.callTool({ name: 'no.such', arguments: {} })) as CallToolResult;
    expect(unknown.structuredContent).toMatchObject({ error: { code: 'UNKNOWN_TOOL' } });
    const missing = (await session.client.callTool({ name: 'fs.read', arguments: { path: '/nope.txt' } })) as CallToolResult;
    expect(missing.structuredContent).toMatchObject({ error: { code: 'NOT_FOUND', stage: 'execution' } });
  });

  it('sends the tool’s log lines as logging notifications', async () => {
    const seen: Array<{ level: string; data: unknown; logger?: string }> = [];
    session.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      seen.push(n.params);
    });
    const result = (await session.client.callTool({ name: 'demo.chatty', arguments: {} })) as CallToolResult;
    expect(result.structuredContent).toEqual({ said: 2 });
    expect(seen).toEqual(
      expect.arrayContaining([
        { level: 'info', logger: 'demo.chatty', data: 'hello from the tool' },
        { level: 'warning', logger: 'demo.chatty', data: 'careful' },
      ]),
    );
  });

  it.each(['demo.follow', 'follow_py'])('sends %s’s log lines while it runs, so a client can act on them (here: cancel it)', async (name) => {
    const n = Math.floor(Math.random() * 1e9);
    const cancel = new AbortController();
    const heard = new Promise<{ level: string; data: unknown; logger?: string }>((resolve) => {
      session.client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
        if (note.params.data === `started ${n}`) {
          resolve(note.params);
          cancel.abort();
        }
      });
    });
    const call = session.client.callTool({ name, arguments: { n } }, undefined, { signal: cancel.signal }).catch((error: Error) => error);
    expect(await heard).toEqual({ level: 'info', logger: name, data: `started ${n}` });
    expect(String(await call)).toMatch(/abort|cancel/i);
  });

  it('twenty calls at once all come back, each with its own result', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => session.client.callTool({ name: 'demo.echo', arguments: { text: `n${i}` } }) as Promise<CallToolResult>),
    );
    expect(results.map((r) => (r.structuredContent as { text: string }).text)).toEqual(Array.from({ length: 20 }, (_, i) => `n${i}`));
  });

  it('a call the client cancels stops: nothing it wrote lands', async () => {
    const controller = new AbortController();
    const call = session.client.callTool({ name: 'slow_writer', arguments: { seconds: 3 } }, undefined, {
      signal: controller.signal,
      timeout: 60000,
    });
    setTimeout(() => controller.abort('changed my mind'), 1000);
    await expect(call).rejects.toThrow();
    // Had the server not heard notifications/cancelled, the call would have committed its write by now.
    await new Promise((r) => setTimeout(r, 3500));
    const read = (await session.client.callTool({ name: 'fs.read', arguments: { path: '/cancelled.txt' } })) as CallToolResult;
    expect(read.structuredContent).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('reports progress to a client that asks for it', async () => {
    const ticks: number[] = [];
    const result = (await session.client.callTool({ name: 'slow_writer', arguments: { seconds: 2.5 } }, undefined, {
      onprogress: (p) => ticks.push(p.progress),
      timeout: 60000,
    })) as CallToolResult;
    expect(result.structuredContent).toEqual({ slept: true });
    expect(ticks.length).toBeGreaterThanOrEqual(1);
    expect(ticks).toEqual([...ticks].sort((a, b) => a - b));
  });

  it('serves VFS files, the snapshot log and diffs as resources, and notifies subscribers of a change', async () => {
    await session.client.callTool({ name: 'fs.write', arguments: { path: '/docs/a.txt', content: 'first' } });
    await session.client.callTool({ name: 'fs.write', arguments: { path: '/bin.dat', content: '/w==', encoding: 'base64' } });
    const uri = `arium://${project.project}/vfs/docs/a.txt`;
    expect((await session.client.readResource({ uri })).contents).toEqual([{ uri, mimeType: 'text/plain', text: 'first' }]);
    const bin = `arium://${project.project}/vfs/bin.dat`;
    expect((await session.client.readResource({ uri: bin })).contents).toEqual([{ uri: bin, blob: '/w==' }]);
    const { resources } = await session.client.listResources();
    expect(resources.map((r) => r.uri)).toEqual(expect.arrayContaining([uri, bin, `arium://${project.project}/snapshots`]));
    const { resourceTemplates } = await session.client.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate)).toContain(`arium://${project.project}/vfs/{+path}`);
    await expect(session.client.readResource({ uri: `arium://${project.project}/vfs/missing.txt` })).rejects.toThrow(/NOT_FOUND/);
    await expect(session.client.readResource({ uri: 'arium://other/vfs/x' })).rejects.toThrow(/Unknown resource/);

    const updated: string[] = [];
    session.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      updated.push(n.params.uri);
    });
    await session.client.subscribeResource({ uri: `arium://${project.project}/vfs/docs` });
    await session.client.callTool({ name: 'fs.write', arguments: { path: '/elsewhere.txt', content: 'x' } });
    await session.client.callTool({ name: 'fs.write', arguments: { path: '/docs/a.txt', content: 'second' } });
    await waitFor(() => updated.length > 0);
    expect(updated).toEqual([`arium://${project.project}/vfs/docs`]);
    const snapshots = await session.client.readResource({ uri: `arium://${project.project}/snapshots` });
    expect(JSON.parse((snapshots.contents[0] as { text: string }).text)).toEqual([]);
  });

  it('tells connected clients when a tool file is dropped into tools/', async () => {
    let changed = 0;
    session.client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changed++;
    });
    project.write('late.json', definition({ id: 'demo.late' }));
    await waitFor(() => changed > 0, 10_000);
    const { tools } = await session.client.listTools();
    expect(tools.map((t) => t.name)).toContain('demo.late');
  });
});

describe('what a client sees comes from arium.json, not from the client', () => {
  it('surfaces.mcp limits the tools listed and callable, and the grants of their calls', async () => {
    const own = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
    writeFileSync(
      join(own.dir, 'arium.json'),
      JSON.stringify({ surfaces: { mcp: { tools: ['demo.*', 'fs.read', 'fs.write'], grants: ['vfs.read', 'exec.js'] } } }),
    );
    const session = await connect(own);
    try {
      const { tools } = await session.client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(['demo.echo', 'fs.read', 'fs.write']);
      const hidden = (await session.client.callTool({ name: 'fs.delete', arguments: { path: '/x' } })) as CallToolResult;
      expect(hidden.structuredContent).toMatchObject({ error: { code: 'UNKNOWN_TOOL' } });
      const denied = (await session.client.callTool({ name: 'fs.write', arguments: { path: '/x', content: 'y' } })) as CallToolResult;
      expect(denied.structuredContent).toMatchObject({ error: { code: 'DENIED', stage: 'permission' } });
      expect(((await session.client.callTool({ name: 'demo.echo', arguments: { a: 1 } })) as CallToolResult).structuredContent).toEqual({ a: 1 });
    } finally {
      await session.close();
      own.remove();
    }
  });
});

describe('arium mcp --no-daemon on a project another engine holds', () => {
  it('says on stderr who holds it and how to go on, since an MCP client shows only "Connection closed"', async () => {
    const own = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
    const holder = await createEngine({ workspace: own.workspace, project: own.project, watch: false });
    try {
      const { stderr, exitCode } = await execFileAsync(
        process.execPath,
        [BIN, '--workspace', own.workspace, '--project', own.project, 'mcp', '--no-daemon'],
        {
          env: { PATH: process.env.PATH ?? '' },
        },
      ).then(
        () => ({ stderr: '', exitCode: 0 }),
        (error: { stderr: string; code: number }) => ({ stderr: error.stderr, exitCode: error.code }),
      );
      expect(exitCode).not.toBe(0);
      expect(stderr).toContain(`project "${own.project}" of ${own.workspace} is held by another engine (pid ${process.pid}`);
      expect(stderr).toContain('Run arium mcp without --no-daemon');
    } finally {
      await holder.close();
      own.remove();
    }
  });
});

async function waitFor(condition: () => boolean, ms = 5000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
