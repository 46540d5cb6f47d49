/**
 * Capability routing: a caller asks for a capability instead of an id; the one tool that provides it
 * and that the caller may call runs, several are AMBIGUOUS, none is UNKNOWN_TOOL. Events, audit and
 * limits are those of the tool that ran.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Engine, EngineEvent, ToolResult } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';
import { createMcpServer } from '../src/surfaces/mcp/server.js';
import { runCli } from './cli.helpers.js';
import { definition, FakeRunner, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

let project: TempProject;
let fake: FakeRunner;

beforeEach(() => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'plain.json': definition({ id: 'sum.plain', provides: ['summarize', 'shorten'] }),
    'writer.json': definition({ id: 'sum.writer', provides: ['summarize'], permissions: ['exec.js', 'vfs.write:/out/**'] }),
    'other.json': definition({ id: 'other.tool', provides: ['translate'], limits: { timeout_ms: 1234 } }),
    'none.json': definition({ id: 'plain.none' }),
  });
  fake = new FakeRunner({
    'sum.plain': () => ({ by: 'sum.plain' }),
    'sum.writer': (ctx) => {
      ctx.vfs.write('/out/summary.txt', 'short');
      return { by: 'sum.writer' };
    },
    'other.tool': (ctx) => ({ by: 'other.tool', timeout: ctx.limits.timeout_ms }),
  });
});

afterEach(() => project.remove());

async function withEngine(grants: readonly string[], fn: (engine: Engine, events: EngineEvent[]) => Promise<void>): Promise<void> {
  const engine = await openEngine(project, { grants, runners: [fake] });
  try {
    await fn(engine, recordEvents(engine));
  } finally {
    await engine.close();
  }
}

const data = (r: ToolResult) => (r.ok ? r.data : { error: r.error });

describe('routing a call by capability', () => {
  it('runs the one provider; events, limits and meta name the tool that ran', async () => {
    await withEngine(['exec.js'], async (engine, events) => {
      const r = await engine.call({ capability: 'translate' }, { text: 'hola' }, { trace_id: 'step-1' });
      expect(data(r)).toEqual({ by: 'other.tool', timeout: 1234 });
      expect(r.meta).toMatchObject({ tool: 'other.tool', capability: 'translate', trace_id: 'step-1' });
      const kinds = events.map((e) => [e.type, 'tool' in e ? e.tool : null]);
      expect(kinds).toEqual([
        ['ToolInvocationEvent', 'other.tool'],
        ['ToolResultEvent', 'other.tool'],
      ]);
    });
  });

  it('several providers the caller may call: AMBIGUOUS listing them, nothing runs', async () => {
    await withEngine(['exec.js', 'vfs.write'], async (engine, events) => {
      const r = await engine.call({ capability: 'summarize' }, {});
      expect(r.ok).toBe(false);
      if (r.ok) return;
      expect(r.error).toMatchObject({ code: 'AMBIGUOUS', stage: 'validation', retryable: false });
      expect(r.error.details).toEqual({ capability: 'summarize', candidates: ['sum.plain', 'sum.writer'] });
      expect(r.error.message).toContain('Call one of them by id');
      expect(fake.started).toEqual([]);
      expect(engine.vfs.exists('/out/summary.txt')).toBe(false);
      expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'ToolErrorEvent']);
      expect(events.every((e) => 'tool' in e && e.tool === 'capability:summarize')).toBe(true);
    });
  });

  it('a provider whose permissions the caller lacks is not eligible, so the other one runs', async () => {
    await withEngine(['exec.js'], async (engine) => {
      expect(data(await engine.call({ capability: 'summarize' }, {}))).toEqual({ by: 'sum.plain' });
    });
    // Narrowed per call as well: the call's grants decide, not the engine's.
    await withEngine(['exec.js', 'vfs.write'], async (engine) => {
      expect(data(await engine.call({ capability: 'summarize' }, {}, { grants: ['exec.js'] }))).toEqual({ by: 'sum.plain' });
      // As at the permission gate, a scoped grant that does not overlap the declared scope does not count.
      expect(data(await engine.call({ capability: 'summarize' }, {}, { grants: ['exec.js', 'vfs.write:/tmp/**'] }))).toEqual({
        by: 'sum.plain',
      });
    });
  });

  it('an explicit id always runs that tool, whatever else provides its capability', async () => {
    await withEngine(['exec.js', 'vfs.write'], async (engine) => {
      expect(data(await engine.call('sum.writer', {}))).toEqual({ by: 'sum.writer' });
      expect(engine.vfs.read('/out/summary.txt').toString()).toBe('short');
    });
  });

  it('no eligible provider: UNKNOWN_TOOL naming the capability, and saying whether any tool provides it', async () => {
    await withEngine([], async (engine) => {
      const none = await engine.call({ capability: 'summarize' }, {});
      expect(none.ok).toBe(false);
      if (!none.ok) {
        expect(none.error.code).toBe('UNKNOWN_TOOL');
        expect(none.error.message).toContain('capability "summarize"');
        expect(none.error.message).toContain('2 tool(s) provide it, but this caller is not granted');
      }
      const absent = await engine.call({ capability: 'fly' }, {});
      if (!absent.ok) expect(absent.error.message).toContain('no tool declares it in "provides"');
      expect(absent.ok).toBe(false);
    });
  });

  it.each([
    ['a number', { capability: 7 }],
    ['an empty name', { capability: '' }],
    ['a name over 128 characters', { capability: 'x'.repeat(129) }],
  ])('a capability that is %s is INVALID_INPUT', async (_, target) => {
    await withEngine(['exec.js'], async (engine) => {
      const r = await engine.call(target as never, {});
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toMatchObject({ code: 'INVALID_INPUT', stage: 'validation', details: { option: 'capability' } });
    });
  });

  it('a surface’s offered filter narrows the choice', async () => {
    await withEngine(['exec.js', 'vfs.write'], async (engine) => {
      const r = await engine.call({ capability: 'summarize' }, {}, { offered: (id) => id !== 'sum.plain' });
      expect(data(r)).toEqual({ by: 'sum.writer' });
    });
  });

  it('follows the registry: a second provider added makes the capability ambiguous', async () => {
    await withEngine(['exec.js'], async (engine) => {
      expect(data(await engine.call({ capability: 'translate' }, {}))).toMatchObject({ by: 'other.tool' });
      writeFileSync(join(project.tools, 'second.json'), definition({ id: 'other.second', provides: ['translate'] }));
      await engine.refresh();
      const r = await engine.call({ capability: 'translate' }, {});
      expect(r.ok ? null : r.error.code).toBe('AMBIGUOUS');
    });
  });

  it('concurrent callers each get the same, correct resolution', async () => {
    await withEngine(['exec.js', 'vfs.write'], async (engine) => {
      const results = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          engine.call({ capability: i % 2 === 0 ? 'translate' : 'summarize' }, {}, i % 3 === 0 ? { grants: ['exec.js'] } : {}),
        ),
      );
      results.forEach((r, i) => {
        if (i % 2 === 0) expect(data(r)).toMatchObject({ by: 'other.tool' });
        else if (i % 3 === 0) expect(data(r)).toEqual({ by: 'sum.plain' });
        else expect(r.ok ? null : r.error.code).toBe('AMBIGUOUS');
      });
    });
  });

  it('a bad "provides" is a load problem with its pointer', async () => {
    writeFileSync(join(project.tools, 'bad.json'), definition({ id: 'bad.one', provides: ['Not A Name'] }));
    await withEngine(['exec.js'], async (engine) => {
      const problem = engine.problems().find((p) => p.file.endsWith('bad.json'));
      expect(problem?.at).toBe('/provides/0');
      expect(engine.tool('bad.one')).toBeUndefined();
    });
  });
});

describe('capabilities on the surfaces', () => {
  it('HTTP: POST /v1/capabilities/<name>:run runs the provider; ambiguity is 409, none is 404', async () => {
    const gateway = await createGateway({
      workspace: project.workspace,
      project: project.project,
      engineOptions: { persist: false, watch: false, grants: ['exec.js', 'vfs.write'], runners: [fake] },
    });
    try {
      const run = (name: string) =>
        gateway.app.inject({
          method: 'POST',
          url: `/v1/capabilities/${name}:run`,
          payload: { input: {} },
          headers: { 'content-type': 'application/json' },
        });
      const ok = await run('translate');
      expect(ok.statusCode).toBe(200);
      expect(ok.json()).toMatchObject({ ok: true, tool_id: 'other.tool', output: { by: 'other.tool' } });
      const ambiguous = await run('summarize');
      expect(ambiguous.statusCode).toBe(409);
      expect(ambiguous.json().error).toMatchObject({ code: 'AMBIGUOUS', details: { candidates: ['sum.plain', 'sum.writer'] } });
      expect((await run('fly')).statusCode).toBe(404);
    } finally {
      await gateway.close();
    }
  });

  it('MCP: a tools/call name that is no offered tool but a capability runs its one provider', async () => {
    await withEngine(['exec.js', 'vfs.write'], async (engine) => {
      const { server, detach } = createMcpServer(engine, { profile: { tools: ['sum.*', 'other.tool'] } });
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      await server.connect(serverSide);
      const client = new Client({ name: 'capabilities-test', version: '1.0.0' });
      await client.connect(clientSide);
      try {
        const ok = (await client.callTool({ name: 'translate', arguments: {} })) as CallToolResult;
        expect(ok.isError).toBeFalsy();
        expect(ok.structuredContent).toEqual({ by: 'other.tool', timeout: 1234 });
        expect(ok._meta?.['arium/tool']).toBe('other.tool');
        const ambiguous = (await client.callTool({ name: 'summarize', arguments: {} })) as CallToolResult;
        expect(ambiguous.isError).toBe(true);
        expect(JSON.stringify(ambiguous.content)).toContain('AMBIGUOUS');
        // An id always wins, and a name that is neither is unknown.
        expect(((await client.callTool({ name: 'sum.plain', arguments: {} })) as CallToolResult).structuredContent).toEqual({ by: 'sum.plain' });
        const unknown = (await client.callTool({ name: 'fly', arguments: {} })) as CallToolResult;
        expect(JSON.stringify(unknown.content)).toContain('UNKNOWN_TOOL');
      } finally {
        await client.close();
        detach();
      }
    });
  });

  it('MCP: the profile’s tool list bounds the choice', async () => {
    await withEngine(['exec.js', 'vfs.write'], async (engine) => {
      const { server, detach } = createMcpServer(engine, { profile: { tools: ['sum.writer'] } });
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      await server.connect(serverSide);
      const client = new Client({ name: 'capabilities-test', version: '1.0.0' });
      await client.connect(clientSide);
      try {
        const r = (await client.callTool({ name: 'summarize', arguments: {} })) as CallToolResult;
        expect(r.structuredContent).toEqual({ by: 'sum.writer' });
        const hidden = (await client.callTool({ name: 'translate', arguments: {} })) as CallToolResult;
        expect(JSON.stringify(hidden.content)).toContain('UNKNOWN_TOOL');
      } finally {
        await client.close();
        detach();
      }
    });
  });

  it('CLI: arium call --capability <name> [input]', async () => {
    const cwd = project.workspace;
    const args = ['--workspace', '.', '--project', 'p'];
    const ambiguous = await runCli(cwd, ['call', ...args, '--capability', 'summarize', '{}', '--json']);
    expect(ambiguous.code).toBe(1);
    expect(JSON.parse(ambiguous.out).error.code).toBe('AMBIGUOUS');
    const usage = await runCli(cwd, ['call', ...args, '--capability', 'summarize', '{}', 'extra']);
    expect(usage.code).not.toBe(0);
    expect(usage.err).toContain('extra');
  });
});
