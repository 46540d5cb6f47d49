import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Engine, ToolResult } from '../src/index.js';
import { definition, FakeRunner, nextEvent, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

interface Found {
  id: string;
  path: string;
  schema: unknown;
  score: number | null;
}

function data<T>(result: ToolResult): T {
  if (!result.ok) throw new Error(`expected success, got ${result.error.code}: ${result.error.message}`);
  return result.data as T;
}

async function search(e: Engine, query: string, limit?: number, grants?: string[]): Promise<string[]> {
  const result = await e.call('tools.search', { query, ...(limit ? { limit } : {}) }, grants ? { grants } : {});
  return data<{ tools: Found[] }>(result).tools.map((t) => t.id);
}

const TOPICS = ['invoice', 'weather', 'calendar', 'email', 'repo', 'ticket', 'payment', 'sensor'];
const VERBS = ['list', 'get', 'create', 'update', 'delete', 'archive'];
const topicOf = (i: number) => TOPICS[i % TOPICS.length] as string;
const verbOf = (i: number) => VERBS[Math.floor(i / TOPICS.length) % VERBS.length] as string;
const genId = (i: number) => `gen${i}.${topicOf(i)}-${verbOf(i)}`;

/** n generated tool definitions over a few topics, each with a couple of properties. */
function generated(n: number): Record<string, string> {
  const files: Record<string, string> = { 'tool.js': TRIVIAL_JS };
  for (let i = 0; i < n; i++) {
    const topic = topicOf(i);
    const verb = verbOf(i);
    const id = genId(i);
    files[`${id}.json`] = definition({
      id,
      name: `${verb} ${topic} ${i}`,
      description: `Does ${verb} on a ${topic} record number ${i}.`,
      schema: { type: 'object', properties: { [`${topic}_id`]: { type: 'string' }, note: { type: 'string' } } },
    });
  }
  return files;
}

describe('tools.search ranking', () => {
  it('puts the tool whose id is the query first, ahead of tools whose descriptions say it', async () => {
    project = tempProject({
      'tool.js': TRIVIAL_JS,
      'text.upper.json': definition({ id: 'text.upper', name: 'Upper', description: 'Makes text upper case' }),
      'x.helper.json': definition({ id: 'x.helper', name: 'Helper', description: 'Calls text.upper text upper for you, text upper text upper' }),
    });
    engine = await openEngine(project, { runners: [new FakeRunner({})] });
    expect((await search(engine, 'text.upper'))[0]).toBe('text.upper');
  });

  it('counts input property names: a tool whose schema has the word is found', async () => {
    project = tempProject({
      'tool.js': TRIVIAL_JS,
      'a.convert.json': definition({
        id: 'a.convert',
        description: 'Converts things',
        schema: { type: 'object', properties: { celsiusValue: { type: 'number' } } },
      }),
      'b.other.json': definition({ id: 'b.other', description: 'Something else entirely' }),
    });
    engine = await openEngine(project, { runners: [new FakeRunner({})] });
    expect(await search(engine, 'celsius')).toEqual(['a.convert']);
  });

  it('ranks an id match above a description-only match', async () => {
    project = tempProject({
      'tool.js': TRIVIAL_JS,
      'weather.forecast.json': definition({ id: 'weather.forecast', description: 'Tells tomorrow' }),
      'misc.tool.json': definition({ id: 'misc.tool', description: 'Not a forecast of weather, just misc' }),
    });
    engine = await openEngine(project, { runners: [new FakeRunner({})] });
    expect(await search(engine, 'weather forecast')).toEqual(['weather.forecast', 'misc.tool']);
  });

  it('returns each tool with its schema and the path a program calls it by', async () => {
    project = tempProject({ 'tool.js': TRIVIAL_JS, 'demo.word-freq.json': definition({ id: 'demo.word-freq', description: 'Counts words' }) });
    engine = await openEngine(project, { runners: [new FakeRunner({})] });
    const found = data<{ tools: Found[] }>(await engine.call('tools.search', { query: 'counts words' })).tools;
    expect(found[0]).toMatchObject({ id: 'demo.word-freq', path: 'tools.demo.wordFreq', schema: { type: 'object' } });
  });

  it.each([500, 5000])(
    'finds the one right tool among %i generated tools, within limit',
    async (n) => {
      project = tempProject(generated(n));
      engine = await openEngine(project, { runners: [new FakeRunner({})], registryLimits: { max_tools: 10_000 } });
      const last = n - 1;
      const ids = await search(engine, `gen${last}`, 3);
      expect(ids[0]?.startsWith(`gen${last}.`)).toBe(true);
      const many = await search(engine, 'weather', 50);
      expect(many).toHaveLength(50);
      expect(many.every((id) => id.includes('weather'))).toBe(true);
    },
    120_000,
  );
});

describe('what a caller may not call is never found, described or called', () => {
  async function setup() {
    project = tempProject({
      'tool.js': TRIVIAL_JS,
      'open.echo.json': definition({ id: 'open.echo', description: 'Echoes secrets back', permissions: ['exec.js'] }),
      'net.secret-fetch.json': definition({
        id: 'net.secret-fetch',
        description: 'Fetches secrets from the network',
        permissions: ['exec.js', 'net.fetch'],
      }),
    });
    const fake = new FakeRunner({ 'open.echo': (ctx) => ctx.input, 'net.secret-fetch': () => ({ leaked: true }) });
    engine = await openEngine(project, { runners: [fake], grants: ['vfs.read', 'exec.js', 'net.fetch'] });
    return { engine, fake };
  }

  it('search, describe and call leave out a tool the narrowed grants do not allow', async () => {
    const { engine: e, fake } = await setup();
    const narrow = ['vfs.read', 'exec.js'];
    expect(await search(e, 'secrets', 10)).toContain('net.secret-fetch');
    const found = await search(e, 'secrets', 10, narrow);
    expect(found).toContain('open.echo');
    expect(found).not.toContain('net.secret-fetch');

    const described = await e.call('tools.describe', { ids: ['net.secret-fetch'] }, { grants: narrow });
    expect(described.ok).toBe(false);
    if (!described.ok) expect(described.error).toMatchObject({ code: 'UNKNOWN_TOOL' });

    const called = await e.call('tools.call', { id: 'net.secret-fetch', input: {} }, { grants: narrow });
    expect(called.ok).toBe(false);
    if (!called.ok) expect(called.error.code).toBe('UNKNOWN_TOOL');
    expect(fake.started).not.toContain('net.secret-fetch');

    // The surface's offered tools narrow too.
    const offered = (id: string) => id !== 'open.echo';
    expect(
      await e.call('tools.search', { query: 'echoes', limit: 10 }, { offered }).then((r) => data<{ tools: Found[] }>(r).tools.map((t) => t.id)),
    ).not.toContain('open.echo');
    const hidden = await e.call('tools.call', { id: 'open.echo', input: {} }, { offered });
    expect(hidden.ok).toBe(false);
  });

  it('describe names close ids for an unknown one', async () => {
    const { engine: e } = await setup();
    const described = await e.call('tools.describe', { ids: ['open.echi'] });
    expect(described.ok).toBe(false);
    if (!described.ok) {
      expect(described.error.message).toMatch(/No tool "open\.echi".*Did you mean "open\.echo"/);
      expect(described.error.details).toMatchObject({ suggestions: ['open.echo'] });
    }
    const ok = data<{ tools: Array<{ id: string }> }>(await e.call('tools.describe', { ids: ['open.echo', 'fs.read'] }));
    expect(ok.tools.map((t) => t.id)).toEqual(['open.echo', 'fs.read']);
  });

  it('tools.call runs the tool through the gate, as a call of that tool with parent_run_id', async () => {
    const { engine: e } = await setup();
    const events = recordEvents(e);
    const result = await e.call('tools.call', { id: 'open.echo', input: { text: 'hi' } }, { grants: ['exec.js'] });
    expect(data(result)).toEqual({ text: 'hi' });
    const inner = events.find((ev) => ev.type === 'ToolResultEvent' && ev.tool === 'open.echo');
    expect(inner).toMatchObject({ parent_run_id: result.meta.run_id });
    // The target's own schema is checked: an input it refuses fails with the target's code.
    project?.write(
      'strict.one.json',
      definition({ id: 'strict.one', schema: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } } }),
    );
    await e.refresh();
    const bad = await e.call('tools.call', { id: 'strict.one', input: { n: 'x' } });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.error).toMatchObject({ code: 'INVALID_INPUT', details: { tool: 'strict.one' } });
  });

  it('tools.call refuses at the gate a tool the caller lacks a permission for, even with a vfs scope', async () => {
    const { engine: e, fake } = await setup();
    // A grant with another name than the one declared: not callable, never started.
    const called = await e.call('tools.call', { id: 'open.echo', input: {} }, { grants: ['vfs.read'] });
    expect(called.ok).toBe(false);
    expect(fake.started).toEqual([]);
  });
});

describe('the index follows the registry', () => {
  it('finds a tool file added while the engine runs once the watcher sees it', async () => {
    project = tempProject({ 'tool.js': TRIVIAL_JS, 'a.one.json': definition({ id: 'a.one', description: 'first tool' }) });
    engine = await openEngine(project, { runners: [new FakeRunner({})], watch: true });
    expect(await search(engine, 'zebra')).toEqual([]);
    const changed = nextEvent(engine, 'registry', (ev) => ev.added.includes('z.zebra'), 20_000);
    project.write('z.zebra.json', definition({ id: 'z.zebra', description: 'Counts zebras' }));
    await changed;
    expect(await search(engine, 'zebra')).toEqual(['z.zebra']);
  }, 30_000);

  it('answers many concurrent searches while tools are added and removed', async () => {
    project = tempProject(generated(200));
    engine = await openEngine(project, { runners: [new FakeRunner({})] });
    const e = engine;
    const steady: Array<Promise<string[]>> = [];
    const moving: Array<{ round: number; found: Promise<string[]> }> = [];
    for (let round = 0; round < 10; round++) {
      project.write(`late${round}.json`, definition({ id: `late${round}.tool`, description: `Late arrival ${round}` }));
      // Half the generated weather tools go away and come back: never all at once.
      if (round % 2 === 0) rmSync(join(project.tools, `${genId(round * 8 + 1)}.json`));
      const refreshed = e.refresh();
      for (let i = 0; i < 10; i++) {
        steady.push(search(e, 'weather', 10));
        moving.push({ round, found: search(e, `late${round}`, 10) });
      }
      await refreshed;
    }
    // Every search saw one whole version of the registry: ten weather tools, and the late tool first or not yet.
    for (const ids of await Promise.all(steady)) {
      expect(ids).toHaveLength(10);
      expect(ids.every((id) => id.includes('weather'))).toBe(true);
    }
    for (const { round, found } of moving) {
      const ids = await found;
      // Not there yet, or there and first.
      expect(ids.indexOf(`late${round}.tool`)).toBeLessThanOrEqual(0);
    }
    for (let round = 0; round < 10; round++) expect(await search(e, `late${round}.tool`, 1)).toEqual([`late${round}.tool`]);
    expect(await search(e, genId(1), 1)).not.toContain(genId(1));
  }, 60_000);
});

describe('ToolCatalog', () => {
  it('indexes once per registry version: queries reuse the index until the tools change', async () => {
    const { ToolCatalog } = await import('../src/code-mode/catalog.js');
    let lists = 0;
    const catalog = new ToolCatalog(() => {
      lists++;
      return [];
    });
    const first = catalog.current().index;
    expect(catalog.current().index).toBe(first);
    expect(lists).toBe(1);
    catalog.changed();
    expect(catalog.current().index).not.toBe(first);
    expect(lists).toBe(2);
  });
});

describe('what MCP clients are told of the discovery tools', () => {
  it('tools.call claims no read-only hint: it runs whatever tool it is given', async () => {
    const { mcpTool } = await import('../src/surfaces/mcp/tool-shape.js');
    project = tempProject();
    engine = await openEngine(project);
    const call = engine.tool('tools.call');
    expect(call && mcpTool(call)?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    const search = engine.tool('tools.search');
    expect(search && mcpTool(search)?.annotations).toMatchObject({ readOnlyHint: true });
  });
});

describe('tools.call and the VFS, approvals', () => {
  it('commits what the called tool writes with its own call, and refuses a tool that needs approval', async () => {
    project = tempProject();
    engine = await openEngine(project, { approvals: { rules: [{ tool: 'fs.delete' }] } });
    const wrote = await engine.call('tools.call', { id: 'fs.write', input: { path: '/made.txt', content: 'by tools.call' } });
    expect(wrote.ok).toBe(true);
    expect(engine.vfs.read('/made.txt').toString()).toBe('by tools.call');
    const deleted = await engine.call('tools.call', { id: 'fs.delete', input: { path: '/made.txt' } });
    expect(deleted.ok).toBe(false);
    if (!deleted.ok) expect(deleted.error.code).toBe('APPROVAL_DENIED');
    expect(engine.vfs.exists('/made.txt')).toBe(true);
    // A caller granted only vfs.read cannot write through it.
    const refused = await engine.call('tools.call', { id: 'fs.write', input: { path: '/no.txt', content: 'x' } }, { grants: ['vfs.read'] });
    expect(refused.ok).toBe(false);
    expect(engine.vfs.exists('/no.txt')).toBe(false);
  });
});
