import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine.js';
import { PROVIDER_KINDS } from '../src/providers/kinds.js';
import type {
  Provider,
  ProviderCallContext,
  ProviderDeps,
  ProviderKind,
  ProviderOutcome,
  ProviderStatus,
  ProviderTool,
} from '../src/providers/provider.js';
import { callExported, exportTools } from '../src/surfaces/export.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, nextEvent, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * A provider's tool goes through everything a local tool does: the provider runner is the only new
 * part of its path. A fake provider kind, registered here, stands for an upstream (MCP server, HTTP
 * worker, satellite): it records what it is asked and answers as the test says.
 */

const SECRET = 'tok_9f8e7d6c5b4a-provider';

class FakeProvider implements Provider {
  readonly kind = 'fake';
  offered: ProviderTool[] = [
    { name: 'echo', description: 'returns its input', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
    { name: 'leakToken', description: 'returns the token it was started with', inputSchema: { type: 'object' } },
    { name: 'slow', description: 'waits for its signal', inputSchema: { type: 'object' } },
    { name: 'fails', description: 'reports a failure', inputSchema: { type: 'object' } },
    { name: 'bad', description: 'a string input schema', inputSchema: { type: 'string' } },
    {
      name: 'labels',
      description: 'an object of free keys, which Gemini cannot take',
      inputSchema: { type: 'object', properties: { labels: { type: 'object', additionalProperties: { type: 'string' } } }, required: ['labels'] },
    },
    { name: 'big', description: 'returns a large answer', inputSchema: { type: 'object' } },
    { name: 'chatty', description: 'logs and reports progress with its token in them', inputSchema: { type: 'object' } },
  ];
  state: ProviderStatus['state'] = 'idle';
  readonly calls: Array<{ tool: string; input: unknown; ctx: ProviderCallContext }> = [];
  readonly aborted: string[] = [];
  readonly #listeners = new Set<() => void>();
  token: string | undefined;

  constructor(
    readonly name: string,
    readonly deps: ProviderDeps,
  ) {
    providers.set(name, this);
  }
  async start() {
    this.token = this.deps.secret('token');
    this.state = 'ready';
  }
  tools() {
    return this.state === 'ready' ? this.offered : [];
  }
  onToolsChanged(listener: () => void) {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
  change(tools: ProviderTool[]) {
    this.offered = tools;
    for (const l of this.#listeners) l();
  }
  async call(tool: string, input: unknown, ctx: ProviderCallContext): Promise<ProviderOutcome> {
    this.calls.push({ tool, input, ctx });
    if (tool === 'echo') {
      ctx.onLog?.({ level: 'info', message: `echoing for ${ctx.runId}` });
      return { ok: true, data: input };
    }
    if (tool === 'chatty') {
      ctx.onLog?.({ level: 'warn', message: `using token ${this.token}` });
      ctx.onProgress?.({ progress: 1, total: 2, message: `half done with ${this.token}` });
      return { ok: true, data: { done: true } };
    }
    if (tool === 'big') return { ok: true, data: { text: 'x'.repeat(10_000) } };
    if (tool === 'labels') return { ok: true, data: input };
    if (tool === 'leakToken') return { ok: true, data: { token: this.token, upper: `Bearer ${this.token}` } };
    if (tool === 'fails') return { ok: false, code: 'UNAVAILABLE', message: 'the upstream went away', retryable: true };
    return new Promise((resolve) => {
      ctx.signal.addEventListener('abort', () => {
        this.aborted.push(ctx.runId);
        resolve({ ok: false, code: 'CANCELLED', message: 'aborted' });
      });
    });
  }
  status(): ProviderStatus {
    return { name: this.name, kind: this.kind, state: this.state, tools: this.tools().length, restarts: 0 };
  }
  async close() {
    this.state = 'closed';
  }
}

const providers = new Map<string, FakeProvider>();
const fakeKind: ProviderKind<unknown> = {
  key: 'fake',
  parse: (raw, at) => {
    if (typeof raw !== 'object' || raw === null) throw new Error(`${at} must be an object`);
    return raw;
  },
  create: (name, _settings, deps) => new FakeProvider(name, deps),
};
PROVIDER_KINDS.set('fake', fakeKind as ProviderKind);

let project: TempProject | null = null;
let engine: Engine | null = null;
let gateway: Gateway | null = null;

afterEach(async () => {
  await gateway?.close();
  await engine?.close();
  project?.remove();
  gateway = null;
  engine = null;
  project = null;
  providers.clear();
});

function projectWith(config: Record<string, unknown>, files: Record<string, string> = {}): TempProject {
  const p = tempProject(files);
  writeFileSync(join(p.dir, 'arium.json'), JSON.stringify(config));
  project = p;
  return p;
}

const GRANTS = ['vfs.read', 'vfs.write', 'exec.js', 'net.fetch'];

async function open(extra: Record<string, unknown> = {}, options: Parameters<typeof openEngine>[1] = {}): Promise<Engine> {
  const p = projectWith({
    providers: { up: { fake: {}, permissions: ['net.fetch'], start: 'eager', ...extra } },
    grants: GRANTS,
  });
  engine = await openEngine(p, { secrets: { token: SECRET }, ...options });
  return engine;
}

describe('a provider tool in the registry', () => {
  it('joins as <provider>.<tool> with the provider permissions; a bad upstream schema is a load problem naming provider and tool', async () => {
    const e = await open();
    const echo = e.tool('up.echo');
    expect(echo).toMatchObject({ id: 'up.echo', name: 'echo', runner: 'provider', permissions: ['net.fetch'], source: 'provider:up' });
    expect(e.tool('up.leak_token')?.name).toBe('leakToken');
    expect(e.tool('up.bad')).toBeUndefined();
    const problem = e.problems().find((p) => p.id === 'up.bad');
    expect(problem?.message).toMatch(/tool "bad" of provider "up": the input schema must be an object schema/);
    const status = await e.status();
    expect(status.providers).toEqual([expect.objectContaining({ name: 'up', kind: 'fake', state: 'ready', tools: 8 })]);
  });

  it('gets the vendor checks of any tool: one a model API cannot take still runs, and problems() names the vendor', async () => {
    const e = await open();
    expect(e.problems().filter((p) => p.id === 'up.labels')).toEqual([
      expect.objectContaining({ file: 'provider:up', vendor: 'gemini', at: '/schema/properties/labels' }),
    ]);
    expect(await e.call('up.labels', { labels: { a: 'b' } })).toMatchObject({ ok: true });
  });

  it('serves only the tools the provider names in "tools"', async () => {
    const e = await open({ tools: ['echo', 'sl*'] });
    expect(
      e
        .tools()
        .filter((t) => t.source === 'provider:up')
        .map((t) => t.id),
    ).toEqual(['up.echo', 'up.slow']);
  });

  it('a project definition in a provider namespace is a load problem, not served', async () => {
    const p = projectWith({ providers: { up: { fake: {}, start: 'eager' } } }, { 'tool.js': TRIVIAL_JS, 'x.json': definition({ id: 'up.sneaky' }) });
    engine = await openEngine(p);
    expect(engine.tool('up.sneaky')).toBeUndefined();
    expect(engine.problems().find((x) => x.id === 'up.sneaky')?.message).toMatch(/namespace of provider "up"/);
  });

  it('a lazy provider starts on the first call of one of its tools', async () => {
    const e = await open({ start: 'lazy' });
    expect((await e.status()).providers?.[0]?.state).toBe('idle');
    const result = await e.call('up.echo', { text: 'hi' });
    expect(result).toMatchObject({ ok: true, data: { text: 'hi' } });
    expect((await e.status()).providers?.[0]?.state).toBe('ready');
  });

  it('a lazy provider starts when the tools are listed; its tools join with a registry change', async () => {
    const e = await open({ start: 'lazy' });
    const joined = nextEvent(e, 'registry', (ev) => ev.added.includes('up.echo'));
    expect(e.tools().some((t) => t.id === 'up.echo')).toBe(false);
    await joined;
    expect(e.tools().some((t) => t.id === 'up.echo')).toBe(true);
  });

  it('a macro over a provider tool is served once the provider offers it, and runs it as a step', async () => {
    const macro = JSON.stringify({
      id: 'shout',
      description: 'echoes through the provider',
      runner: 'macro',
      schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      permissions: [],
      steps: [{ tool: 'up.echo', input: { text: { $from: '/input/text' } } }],
    });
    const p = projectWith({ providers: { up: { fake: {}, permissions: ['net.fetch'] } }, grants: GRANTS }, { 'shout.json': macro });
    engine = await openEngine(p);
    expect(engine.tool('shout')).toBeUndefined();
    const linked = nextEvent(engine, 'registry', (ev) => ev.added.includes('shout'));
    expect(await engine.call('up.echo', { text: 'start' })).toMatchObject({ ok: true });
    await linked;
    expect(await engine.call('shout', { text: 'through' })).toMatchObject({ ok: true, data: { text: 'through' } });
    expect(await engine.call('shout', { text: 'denied' }, { grants: ['vfs.read'] })).toMatchObject({ ok: false, error: { code: 'DENIED' } });
  });

  it('upstream tools changing updates the registry and tells listeners', async () => {
    const e = await open();
    const changed = nextEvent(e, 'registry');
    providers.get('up')?.change([
      { name: 'echo', inputSchema: { type: 'object' } },
      { name: 'fresh', inputSchema: { type: 'object' } },
    ]);
    const event = await changed;
    expect(event.added).toEqual(['up.fresh']);
    expect(event.removed).toEqual(['up.big', 'up.chatty', 'up.fails', 'up.labels', 'up.leak_token', 'up.slow']);
    expect(event.updated).toEqual(['up.echo']);
    expect(e.tool('up.fresh')).toBeDefined();
  });
});

describe('a provider tool goes through the gate', () => {
  it('runs for a caller granted its permissions; the upstream gets the run id and its log line lands in meta.logs', async () => {
    const e = await open();
    const result = await e.call('up.echo', { text: 'hi' });
    expect(result).toMatchObject({ ok: true, data: { text: 'hi' }, meta: { runner: 'provider' } });
    const call = providers.get('up')?.calls[0];
    expect(call?.ctx.runId).toBe(result.meta.run_id);
    expect(result.meta.logs?.[0]?.message).toBe(`echoing for ${result.meta.run_id}`);
  });

  it('is DENIED without the provider permission, and the upstream is never asked', async () => {
    const e = await open();
    const events = recordEvents(e);
    const result = await e.call('up.echo', { text: 'hi' }, { grants: ['vfs.read'] });
    expect(result).toMatchObject({ ok: false, error: { code: 'DENIED', stage: 'permission' } });
    expect(providers.get('up')?.calls).toHaveLength(0);
    expect(events.some((ev) => ev.type === 'SecurityEvent' && ev.tool === 'up.echo')).toBe(true);
  });

  it('an input that breaks the upstream schema is INVALID_INPUT before the upstream is asked', async () => {
    const e = await open();
    const result = await e.call('up.echo', { text: 3 });
    expect(result).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT' } });
    expect(providers.get('up')?.calls).toHaveLength(0);
  });

  it('waits for an approval rule that matches its input, and runs once approved', async () => {
    const e = await open({}, { approvals: { rules: [{ tool: 'up.*', when: { text: { prefix: 'rm' } } }] } });
    const free = await e.call('up.echo', { text: 'ls' });
    expect(free.ok).toBe(true);
    const asked = nextEvent(e, 'approval');
    const waiting = e.call('up.echo', { text: 'rm -rf' });
    const pending = await asked;
    expect(providers.get('up')?.calls).toHaveLength(1);
    e.approve(pending.run_id, { by: 'tester' });
    expect(await waiting).toMatchObject({ ok: true, data: { text: 'rm -rf' } });
    expect(providers.get('up')?.calls).toHaveLength(2);
  });

  it("scrubs a secret's value out of what the upstream returns", async () => {
    const e = await open();
    const events = recordEvents(e);
    const result = await e.call('up.leak_token', {});
    expect(providers.get('up')?.token).toBe(SECRET);
    expect(result).toMatchObject({ ok: true, data: { token: '[secret:token]', upper: 'Bearer [secret:token]' } });
    expect(JSON.stringify(events)).not.toContain(SECRET);
  });

  it("scrubs a secret's value out of the upstream's log lines and progress messages", async () => {
    const e = await open();
    const told: string[] = [];
    const result = await e.call('up.chatty', {}, { onLog: (l) => told.push(l.message), onProgress: (p) => told.push(p.message ?? '') });
    expect(result.ok).toBe(true);
    expect(told).toEqual(['using token [secret:token]', 'half done with [secret:token]']);
    expect(result.meta.logs?.map((l) => l.message)).toEqual(['using token [secret:token]']);
  });

  it('times out under the provider limit, and the upstream is told through its signal', async () => {
    const e = await open({ limits: { timeout_ms: 150 } });
    const result = await e.call('up.slow', {});
    expect(result).toMatchObject({ ok: false, error: { code: 'TIMEOUT', retryable: true } });
    await new Promise((r) => setTimeout(r, 20));
    expect(providers.get('up')?.aborted).toEqual([result.meta.run_id]);
  });

  it("a caller's cancellation reaches the upstream", async () => {
    const e = await open();
    const controller = new AbortController();
    const running = e.call('up.slow', {}, { signal: controller.signal });
    await new Promise((r) => setTimeout(r, 50));
    controller.abort();
    expect(await running).toMatchObject({ ok: false, error: { code: 'CANCELLED' } });
    await new Promise((r) => setTimeout(r, 20));
    expect(providers.get('up')?.aborted).toHaveLength(1);
  });

  it('an answer over the provider max_output_bytes is OUTPUT_LIMIT, not cut', async () => {
    const e = await open({ limits: { max_output_bytes: 1000 } });
    expect(await e.call('up.big', {})).toMatchObject({ ok: false, error: { code: 'OUTPUT_LIMIT' } });
  });

  it('an upstream failure keeps its code and is retryable when the code is', async () => {
    const e = await open();
    expect(await e.call('up.fails', {})).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true, details: { provider: 'up' } } });
  });

  it('holds calls past the provider concurrency until one ends', async () => {
    const e = await open({ limits: { concurrency: 1, timeout_ms: 300 } });
    const first = e.call('up.slow', {});
    await new Promise((r) => setTimeout(r, 30));
    const second = e.call('up.echo', { text: 'after' });
    await new Promise((r) => setTimeout(r, 60));
    expect(providers.get('up')?.calls.map((c) => c.tool)).toEqual(['slow']);
    expect((await first).ok).toBe(false);
    expect(await second).toMatchObject({ ok: true });
  });

  it('calls and results are events and audit lines like any tool', async () => {
    const e = await open({}, { auditLog: true });
    const result = await e.call('up.echo', { text: 'audited' });
    await e.close();
    engine = null;
    const lines = readFileSync(join(project?.dir as string, '.arium', 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const mine = lines.filter((l) => l.run_id === result.meta.run_id).map((l) => l.type);
    expect(mine).toEqual(['ToolInvocationEvent', 'ToolResultEvent']);
  });
});

describe('arium.json providers', () => {
  it.each([
    [{ Bad: { fake: {} } }, /must match pattern|property name/],
    [{ fs: { fake: {} } }, /prefix of the engine's own tools/],
    [{ up: { permissions: [] } }, /names no kind/],
    [{ up: { fake: {}, mcp: { command: 'x' } } }, /names 2 kinds/],
    [{ up: { nope: {} } }, /unknown key or kind "nope"/],
    [{ up: { fake: {}, permissions: ['net.fetchh'] } }, /Unknown permission/],
    [{ up: { mcp: { command: 'x', bogus: 1 } } }, /mcp\/bogus: unknown setting/],
    [{ up: { mcp: { url: 'http://u:p@127.0.0.1/mcp' } } }, /must not hold credentials/],
  ])('refuses %j', async (providersConfig, message) => {
    const p = projectWith({ providers: providersConfig });
    await expect(openEngine(p)).rejects.toThrow(message);
  });
});

describe('a provider tool on the surfaces', () => {
  it('is exported for function calling with its upstream schema, and an exported call runs it', async () => {
    const e = await open();
    for (const vendor of ['openai', 'anthropic', 'gemini'] as const) {
      const exported = exportTools(e.tools(), vendor);
      const name = Object.entries(exported.names).find(([, id]) => id === 'up.echo')?.[0];
      expect(name, vendor).toBeDefined();
      expect(JSON.stringify(exported.tools)).toContain('"text"');
      const ran = await callExported(e, exported, name as string, { text: `via ${vendor}` });
      expect(ran).toMatchObject({ ok: true, data: { text: `via ${vendor}` }, meta: { tool: 'up.echo', runner: 'provider' } });
    }
  });

  it("a surface profile's tool patterns and grants apply to it as to any tool", async () => {
    const p = projectWith({
      providers: { up: { fake: {}, permissions: ['net.fetch'], start: 'eager' } },
      grants: GRANTS,
      surfaces: { http: { tools: ['up.echo', 'fs.*'], grants: ['vfs.read'] } },
    });
    gateway = await createGateway({ workspace: p.workspace, project: p.project, inspector: false, engineOptions: { persist: false, watch: false } });
    const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    const listed = (await (await fetch(`${base}/v1/tools`)).json()) as { tools: Array<{ id: string }> };
    expect(listed.tools.map((t) => t.id).filter((id) => id.startsWith('up.'))).toEqual(['up.echo']);
    const post = (id: string) =>
      fetch(`${base}/v1/tools/${id}:run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: { text: 'x' } }),
      });
    expect(await (await post('up.echo')).json()).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    expect((await post('up.slow')).status).toBe(404);
    expect(providers.get('up')?.calls).toHaveLength(0);
  });

  it('HTTP lists and runs it, and an MCP client sees it and hears list_changed', async () => {
    const p = projectWith({ providers: { up: { fake: {}, permissions: ['net.fetch'], start: 'eager' } }, grants: GRANTS });
    gateway = await createGateway({ workspace: p.workspace, project: p.project, inspector: false, engineOptions: { persist: false, watch: false } });
    const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
    const listed = (await (await fetch(`${base}/v1/tools`)).json()) as { tools: Array<{ id: string }> };
    expect(listed.tools.map((t) => t.id)).toContain('up.echo');
    const run = await fetch(`${base}/v1/tools/up.echo:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: { text: 'via http' } }),
    });
    expect(await run.json()).toMatchObject({ ok: true, tool_id: 'up.echo', output: { text: 'via http' } });
    const shown = (await (await fetch(`${base}/v1/providers`)).json()) as { providers: unknown[] };
    expect(shown.providers).toEqual([expect.objectContaining({ name: 'up', kind: 'fake', state: 'ready', restarts: 0 })]);

    const client = new Client({ name: 'test', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    try {
      const tools = await client.listTools();
      expect(tools.tools.map((t) => t.name)).toContain('up.echo');
      const called = await client.callTool({ name: 'up.echo', arguments: { text: 'via mcp' } });
      expect(JSON.stringify(called.content)).toContain('via mcp');
      const heard = new Promise<void>((resolve) => client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve()));
      providers.get('up')?.change([{ name: 'fresh', inputSchema: { type: 'object' } }]);
      await heard;
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('up.fresh');
    } finally {
      await client.close();
    }
  });
});
