import { afterEach, describe, expect, it } from 'vitest';
import { ToolFailure } from '../src/errors.js';
import type { Engine, ErrResult, ToolResult } from '../src/index.js';
import { mcpTool } from '../src/surfaces/mcp/tool-shape.js';
import {
  deferred,
  definition,
  type FakeBehaviour,
  FakeRunner,
  openEngine,
  recordEvents,
  type TempProject,
  TRIVIAL_JS,
  tempProject,
  untilAborted,
} from './support/project.js';

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

/** A macro definition: runner "macro", an open input schema unless given. */
function macro(fields: Record<string, unknown> & { id: string; steps: unknown[] }): string {
  return JSON.stringify({ description: `test macro ${fields.id}`, runner: 'macro', schema: { type: 'object' }, ...fields });
}

const upper: FakeBehaviour = (ctx) => ({ text: String((ctx.input as { text: string }).text).toUpperCase() });
const boom: FakeBehaviour = () => {
  throw new ToolFailure('execution', 'TOOL_ERROR', 'boom went the tool');
};
const slow: FakeBehaviour = (ctx) => untilAborted(ctx.signal);

/** A project with fake JS tools (each declares exec.js only) and the given macros. */
async function setup(
  macros: Record<string, string>,
  behaviours: Record<string, FakeBehaviour> = {},
  options: { permissions?: Record<string, string[]>; grants?: string[] } = {},
) {
  const files: Record<string, string> = { 'tool.js': TRIVIAL_JS, ...macros };
  const all = { 'text.upper': upper, 'test.boom': boom, 'test.slow': slow, ...behaviours };
  for (const id of Object.keys(all)) files[`${id}.json`] = definition({ id, permissions: options.permissions?.[id] ?? ['exec.js'] });
  project = tempProject(files);
  const fake = new FakeRunner(all);
  engine = await openEngine(project, { runners: [fake], ...(options.grants ? { grants: options.grants } : {}) });
  return { engine, fake };
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

async function fileOf(e: Engine, path: string): Promise<string | null> {
  const read = await e.call('fs.read', { path });
  return read.ok ? (read.data as { content: string }).content : null;
}

const PIPELINE = macro({
  id: 'm.pipeline',
  schema: {
    type: 'object',
    properties: { path: { type: 'string' }, text: { type: 'string' }, dry_run: { type: 'boolean', default: false } },
    required: ['path', 'text'],
  },
  steps: [
    { tool: 'text.upper', input: { text: { $from: '/input/text' } } },
    {
      tool: 'fs.write',
      input: { path: { $from: '/input/path' }, content: { $from: '/steps/0/output/text' } },
      when: { $from: '/input/dry_run', equals: false },
    },
  ],
  output: { upper: { $from: '/steps/0/output/text' }, written: { $from: '/steps/1/output' }, items: ['literal', { $from: '/input/path' }] },
});

describe('a macro run', () => {
  it('runs its steps in order, threading outputs into later inputs', async () => {
    const { engine, fake } = await setup({ 'pipeline.json': PIPELINE });
    expect(engine.problems()).toEqual([]);
    const result = await engine.call('m.pipeline', { path: '/out.txt', text: 'hello' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    const data = (result as { data: { upper: string; written: { path: string }; items: unknown[] } }).data;
    expect(data.upper).toBe('HELLO');
    expect(data.written.path).toBe('/out.txt');
    expect(data.items).toEqual(['literal', '/out.txt']);
    expect(fake.started).toEqual(['text.upper']);
    expect(await fileOf(engine, '/out.txt')).toBe('HELLO');
  });

  it('skips a step whose when does not hold; the skipped step has output null', async () => {
    const { engine } = await setup({ 'pipeline.json': PIPELINE });
    const result = await engine.call('m.pipeline', { path: '/out.txt', text: 'hello', dry_run: true });
    expect(result.ok && result.data).toEqual({ upper: 'HELLO', written: null, items: ['literal', '/out.txt'] });
    expect(await fileOf(engine, '/out.txt')).toBeNull();
  });

  it('supports exists and not in when, and returns the last output without an output template', async () => {
    const { engine } = await setup({
      'cond.json': macro({
        id: 'm.cond',
        steps: [
          { tool: 'text.upper', input: { text: 'a' }, when: { $from: '/input/flag', exists: true } },
          { tool: 'text.upper', input: { text: 'b' }, when: { not: { $from: '/input/flag', exists: true } } },
        ],
      }),
    });
    expect(await engine.call('m.cond', {})).toMatchObject({ ok: true, data: { text: 'B' } });
    expect(await engine.call('m.cond', { flag: 1 })).toMatchObject({ ok: true, data: null });
  });

  it('fails naming the step and the pointer when a template finds no value', async () => {
    const { engine } = await setup({
      'missing.json': macro({ id: 'm.missing', steps: [{ tool: 'text.upper', input: { text: { $from: '/input/nope' } } }] }),
    });
    const error = failed(await engine.call('m.missing', {}));
    expect(error.code).toBe('INVALID_INPUT');
    expect(error.message).toContain('/input/nope');
    expect(error.details).toMatchObject({
      step: 0,
      tool: 'text.upper',
      error: { code: 'INVALID_INPUT', details: { pointer: '/input/nope', at: '/steps/0/input/text' } },
    });
  });

  it('is atomic: when step 3 of 3 fails, the VFS is as it was and the error names the step', async () => {
    const { engine } = await setup({
      'three.json': macro({
        id: 'm.three',
        steps: [
          { tool: 'fs.write', input: { path: '/a.txt', content: 'A' } },
          { tool: 'fs.write', input: { path: '/b.txt', content: 'B' } },
          { tool: 'test.boom', input: { from: { $from: '/steps/1/output/path' } } },
        ],
      }),
    });
    const before = await engine.call('fs.list', { path: '/', recursive: true });
    const error = failed(await engine.call('m.three', {}));
    expect(error.code).toBe('TOOL_ERROR');
    expect(error.message).toContain('Step 2 (test.boom)');
    expect(error.details).toMatchObject({ step: 2, tool: 'test.boom', error: { code: 'TOOL_ERROR', message: 'boom went the tool' } });
    expect(await engine.call('fs.list', { path: '/', recursive: true })).toEqual({ ...before, meta: expect.anything() });
    expect(await fileOf(engine, '/a.txt')).toBeNull();
  });

  it('fails DENIED when a step needs a permission the macro caller lacks: nothing written, one SecurityEvent', async () => {
    const { engine } = await setup({ 'pipeline.json': PIPELINE });
    const events = recordEvents(engine);
    const error = failed(await engine.call('m.pipeline', { path: '/out.txt', text: 'x' }, { grants: ['vfs.read', 'exec.js'] }));
    expect(error.code).toBe('DENIED');
    expect(error.details).toMatchObject({ step: 1, tool: 'fs.write', error: { code: 'DENIED' } });
    expect(events.filter((e) => e.type === 'SecurityEvent')).toHaveLength(1);
    expect(await fileOf(engine, '/out.txt')).toBeNull();
  });

  it('refuses a step that an approvals rule matches instead of waiting inside the transaction', async () => {
    const files = { 'tool.js': TRIVIAL_JS, 'pipeline.json': PIPELINE, 'text.upper.json': definition({ id: 'text.upper' }) };
    project = tempProject(files);
    engine = await openEngine(project, { runners: [new FakeRunner({ 'text.upper': upper })], approvals: { rules: [{ tool: 'fs.write' }] } });
    const error = failed(await engine.call('m.pipeline', { path: '/out.txt', text: 'x' }));
    expect(error.code).toBe('APPROVAL_DENIED');
    expect(error.details).toMatchObject({ step: 1, tool: 'fs.write' });
    expect(error.message).toContain('cannot wait');
    expect(await fileOf(engine, '/out.txt')).toBeNull();
  });

  it('makes the same calls in the same order for the same input and VFS', async () => {
    const { engine } = await setup({ 'pipeline.json': PIPELINE });
    const events = recordEvents(engine);
    const trace = async () => {
      events.length = 0;
      await engine.call('fs.delete', { path: '/out.txt' });
      events.length = 0;
      const result = await engine.call('m.pipeline', { path: '/out.txt', text: 'same' });
      expect(result.ok).toBe(true);
      return events.map((e) => ('tool' in e ? [e.type, e.tool, 'input' in e ? e.input : null, 'output' in e ? e.output : null] : [e.type]));
    };
    const first = await trace();
    expect(first.length).toBeGreaterThanOrEqual(6);
    expect(await trace()).toEqual(first);
  });

  it('gives its steps events with the macro trace id and parent_run_id', async () => {
    const { engine } = await setup({ 'pipeline.json': PIPELINE });
    const events = recordEvents(engine);
    const result = await engine.call('m.pipeline', { path: '/out.txt', text: 'x' }, { trace_id: 'trace-42' });
    expect(result.ok).toBe(true);
    const steps = events.filter((e) => 'parent_run_id' in e);
    expect(steps.map((e) => `${e.type} ${'tool' in e ? e.tool : ''}`)).toEqual([
      'ToolInvocationEvent text.upper',
      'ToolResultEvent text.upper',
      'ToolInvocationEvent fs.write',
      'ToolResultEvent fs.write',
    ]);
    for (const e of steps) {
      expect(e.trace_id).toBe('trace-42');
      expect((e as { parent_run_id: string }).parent_run_id).toBe(result.meta.run_id);
    }
    const own = events.find((e) => e.type === 'ToolResultEvent' && e.tool === 'm.pipeline');
    expect(own && 'vfs' in own && own.vfs?.written).toEqual(['/out.txt']);
  });

  it('runs a macro as a step of another, in the same transaction: a later failure undoes the inner writes', async () => {
    const { engine } = await setup({
      'pipeline.json': PIPELINE,
      'outer.json': macro({
        id: 'm.outer',
        steps: [
          { tool: 'm.pipeline', input: { path: '/inner.txt', text: { $from: '/input/text' } } },
          { tool: 'fs.read', input: { path: { $from: '/steps/0/output/written/path' } } },
          { tool: 'test.boom', input: {}, when: { $from: '/input/fail', equals: true } },
        ],
        output: { $from: '/steps/1/output/content' },
      }),
    });
    const events = recordEvents(engine);
    const ok = await engine.call('m.outer', { text: 'nested' });
    expect(ok).toMatchObject({ ok: true, data: 'NESTED' });
    const inner = events.find((e) => e.type === 'ToolResultEvent' && e.tool === 'm.pipeline') as { run_id: string; parent_run_id?: string };
    expect(inner.parent_run_id).toBe(ok.meta.run_id);
    const write = events.find((e) => e.type === 'ToolResultEvent' && e.tool === 'fs.write') as { parent_run_id?: string };
    expect(write.parent_run_id).toBe(inner.run_id);
    await engine.call('fs.delete', { path: '/inner.txt' });
    const error = failed(await engine.call('m.outer', { text: 'again', fail: true }));
    expect(error.details).toMatchObject({ step: 2, tool: 'test.boom' });
    expect(await fileOf(engine, '/inner.txt')).toBeNull();
  });

  it('times out as a whole: a slow step makes the macro TIMEOUT and nothing is written', async () => {
    const { engine } = await setup({
      'slow.json': macro({
        id: 'm.slow',
        limits: { timeout_ms: 300 },
        steps: [
          { tool: 'fs.write', input: { path: '/early.txt', content: 'E' } },
          { tool: 'test.slow', input: {} },
        ],
      }),
    });
    const error = failed(await engine.call('m.slow', {}));
    expect(error.code).toBe('TIMEOUT');
    expect(await fileOf(engine, '/early.txt')).toBeNull();
  });
});

describe('a macro on the surfaces', () => {
  it('is listed like any tool, and MCP hints claim nothing of what its steps may do', async () => {
    const { engine } = await setup({ 'pipeline.json': PIPELINE });
    const info = engine.tools().find((t) => t.id === 'm.pipeline');
    expect(info).toMatchObject({ runner: 'macro', source: 'tools/pipeline.json', steps: [{ tool: 'text.upper' }, { tool: 'fs.write' }] });
    expect(mcpTool(info as NonNullable<typeof info>)).toMatchObject({
      name: 'm.pipeline',
      inputSchema: { required: ['path', 'text'] },
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false },
    });
  });
});

describe('concurrent macro calls', () => {
  it('all land when 8 write different files in parallel', async () => {
    const { engine } = await setup({ 'pipeline.json': PIPELINE });
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => engine.call('m.pipeline', { path: `/f${i}.txt`, text: `t${i}` })));
    expect(results.every((r) => r.ok)).toBe(true);
    for (let i = 0; i < 8; i++) expect(await fileOf(engine, `/f${i}.txt`)).toBe(`T${i}`);
  });

  /** Two calls of a read-increment-write macro, whose first two runs both read before either commits. */
  async function race(options: Parameters<typeof setup>[2] = {}) {
    const both = deferred();
    const runs = { started: 0 };
    const inc: FakeBehaviour = async (ctx) => {
      runs.started++;
      if (runs.started === 2) both.resolve();
      if (runs.started <= 2) await both.promise;
      return { content: String(Number((ctx.input as { content: string }).content) + 1) };
    };
    const { engine } = await setup(
      {
        'inc.json': macro({
          id: 'm.inc',
          steps: [
            { tool: 'fs.read', input: { path: '/n.txt' } },
            { tool: 'test.inc', input: { content: { $from: '/steps/0/output/content' } } },
            { tool: 'fs.write', input: { path: '/n.txt', content: { $from: '/steps/1/output/content' } } },
          ],
        }),
      },
      { 'test.inc': inc },
      options,
    );
    await engine.call('fs.write', { path: '/n.txt', content: '0' });
    const results = await Promise.all([engine.call('m.inc', {}), engine.call('m.inc', {})]);
    return { results, runs, final: await fileOf(engine, '/n.txt') };
  }

  it('loses no update when two race on one file: the loser runs again or fails CONFLICT', async () => {
    const { results, runs, final } = await race();
    const ok = results.filter((r) => r.ok).length;
    for (const r of results) if (!r.ok) expect(r.error.code).toBe('CONFLICT');
    expect(ok).toBeGreaterThanOrEqual(1);
    expect(final).toBe(String(ok));
    expect(runs.started).toBe(2 + (ok === 2 ? 1 : 0));
  });

  it('never runs again a macro whose step may act outside the VFS: the loser fails CONFLICT', async () => {
    const { results, runs, final } = await race({
      permissions: { 'test.inc': ['exec.js', 'net.fetch'] },
      grants: ['vfs.read', 'vfs.write', 'exec.js', 'net.fetch'],
    });
    expect(results.map((r) => (r.ok ? 'ok' : r.error.code)).sort()).toEqual(['CONFLICT', 'ok']);
    expect(runs.started).toBe(2);
    expect(final).toBe('1');
  });
});

describe('macro load problems', () => {
  async function problemsOf(macros: Record<string, string>) {
    const { engine } = await setup(macros);
    return engine.problems();
  }

  it.each([
    ['an unknown tool', [{ tool: 'no.such', input: {} }], '/steps/0/tool', 'no.such'],
    [
      'a forward reference',
      [{ tool: 'text.upper', input: { text: { $from: '/steps/1/output/text' } } }, { tool: 'text.upper' }],
      '/steps/0/input/text',
      'runs later',
    ],
    ['a reference to itself', [{ tool: 'text.upper', input: { text: { $from: '/steps/0/output' } } }], '/steps/0/input/text', 'the step itself'],
    [
      'a forward reference in when',
      [{ tool: 'text.upper', when: { not: { $from: '/steps/0/output', exists: true } } }],
      '/steps/0/when/not/$from',
      'the step itself',
    ],
    [
      'a literal of the wrong type',
      [{ tool: 'fs.write', input: { path: 42, content: { $from: '/input/c' } } }],
      '/steps/0/input/path',
      'must be string',
    ],
    ['a missing required key', [{ tool: 'fs.write', input: { content: { $from: '/input/c' } } }], '/steps/0/input/path', 'is required'],
    [
      'a key the tool does not take',
      [{ tool: 'fs.read', input: { path: { $from: '/input/p' }, bogus: 1 } }],
      '/steps/0/input/bogus',
      'not an allowed',
    ],
    ['a when with neither equals nor exists', [{ tool: 'fs.list', when: { $from: '/input/x' } }], '/steps/0/when', 'this one has the keys "$from"'],
    ['a when mixing forms', [{ tool: 'fs.list', when: { not: { $from: '/input/x', equals: 1, exists: true } } }], '/steps/0/when/not', '"exists"'],
    ['a malformed $from', [{ tool: 'fs.read', input: { path: { $from: 7 } } }], '/steps/0/input/path', 'JSON pointer'],
    ['a pointer outside the document', [{ tool: 'fs.read', input: { path: { $from: '/elsewhere' } } }], '/steps/0/input/path', 'points nowhere'],
  ])('reports %s at its pointer, and does not serve the macro', async (_name, steps, at, words) => {
    const problems = await problemsOf({ 'bad.json': macro({ id: 'm.bad', steps }) });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ file: 'tools/bad.json', id: 'm.bad', at });
    expect(problems[0]?.message).toContain(words);
    expect(engine?.tools().some((t) => t.id === 'm.bad')).toBe(false);
  });

  it('reports a placeholder whose declared type the called tool never takes there', async () => {
    const typed = {
      type: 'object',
      properties: { n: { type: 'integer' }, s: { type: 'string' }, list: { type: 'array', items: { type: 'boolean' } } },
    };
    const problems = await problemsOf({
      'typed.json': macro({
        id: 'm.typed',
        schema: typed,
        steps: [{ tool: 'fs.write', input: { path: { $from: '/input/n' }, content: { $from: '/input/s' } } }],
      }),
      'item.json': macro({ id: 'm.item', schema: typed, steps: [{ tool: 'fs.read', input: { path: { $from: '/input/list/0' } } }] }),
      'fine.json': macro({
        id: 'm.fine',
        schema: typed,
        steps: [{ tool: 'fs.write', input: { path: { $from: '/input/s' }, content: { $from: '/input/s' } } }],
      }),
      'loose.json': macro({ id: 'm.loose', steps: [{ tool: 'fs.write', input: { path: { $from: '/input/anything' }, content: 'x' } }] }),
    });
    expect(problems.map((p) => [p.id, p.at])).toEqual([
      ['m.item', '/steps/0/input/path'],
      ['m.typed', '/steps/0/input/path'],
    ]);
    expect(problems.find((p) => p.id === 'm.typed')?.message).toContain('"/input/n" is integer, but fs.write wants string here');
    expect(problems.find((p) => p.id === 'm.item')?.message).toContain('is boolean');
  });

  it('accepts placeholders wherever the called schema is satisfiable', async () => {
    const problems = await problemsOf({
      'ok.json': macro({ id: 'm.ok', steps: [{ tool: 'fs.write', input: { path: { $from: '/input/p' }, content: { $from: '/input/c' } } }] }),
    });
    expect(problems).toEqual([]);
  });

  it('reports a cycle between macros in both', async () => {
    const problems = await problemsOf({
      'a.json': macro({ id: 'm.a', steps: [{ tool: 'text.upper', input: { text: 'x' } }, { tool: 'm.b' }] }),
      'b.json': macro({ id: 'm.b', steps: [{ tool: 'm.a' }] }),
    });
    expect(problems).toEqual([
      expect.objectContaining({ id: 'm.a', at: '/steps/1/tool', message: expect.stringContaining('m.a → m.b → m.a') }),
      expect.objectContaining({ id: 'm.b', at: '/steps/0/tool', message: expect.stringContaining('m.b → m.a → m.b') }),
    ]);
  });

  it('reports a chain deeper than the limit, and the macros calling a macro not served', async () => {
    const macros: Record<string, string> = {};
    for (let i = 0; i < 9; i++)
      macros[`d${i}.json`] = macro({ id: `m.d${i}`, steps: [{ tool: i === 8 ? 'text.upper' : `m.d${i + 1}`, input: i === 8 ? { text: 'x' } : {} }] });
    const problems = await problemsOf(macros);
    expect(problems).toEqual([expect.objectContaining({ id: 'm.d0', at: '/steps/0/tool', message: expect.stringContaining('nest 9 deep') })]);
    expect(engine?.tools().some((t) => t.id === 'm.d1')).toBe(true);
  });

  it('fails a call naming the chain when a reload made it deeper than the limit while it ran', async () => {
    const gate = deferred();
    const held = deferred();
    const wait: FakeBehaviour = async () => {
      held.resolve();
      await gate.promise;
      return {};
    };
    const macros: Record<string, string> = {};
    for (let i = 0; i < 7; i++) macros[`d${i}.json`] = macro({ id: `m.d${i}`, steps: [{ tool: `m.d${i + 1}` }] });
    macros['d7.json'] = macro({ id: 'm.d7', steps: [{ tool: 'test.wait' }, { tool: 'test.x' }] });
    const { engine } = await setup(macros, { 'test.wait': wait, 'test.x': () => ({}) });
    expect(engine.problems()).toEqual([]);
    const running = engine.call('m.d0', {});
    await held.promise;
    // test.x becomes a macro: m.d0 → … → m.d7 → test.x is now 9 macros deep.
    project?.write('test.x.json', macro({ id: 'test.x', steps: [{ tool: 'fs.list', input: { path: '/' } }] }));
    await engine.refresh();
    expect(engine.problems()).toEqual([expect.objectContaining({ id: 'm.d0', message: expect.stringContaining('nest 9 deep') })]);
    gate.resolve();
    const error = failed(await running);
    expect(error.code).toBe('MISCONFIGURED');
    expect(JSON.stringify(error)).toContain('m.d0 → m.d1 → m.d2 → m.d3 → m.d4 → m.d5 → m.d6 → m.d7 → test.x');
  });

  it('refuses an entry on a macro and steps on another runner', async () => {
    const problems = await problemsOf({
      'e.json': JSON.stringify({
        id: 'm.e',
        description: 'x',
        runner: 'macro',
        entry: 'tool.js',
        schema: { type: 'object' },
        steps: [{ tool: 'fs.list' }],
      }),
      's.json': definition({ id: 'm.s', steps: [{ tool: 'fs.list' }] }),
      'n.json': JSON.stringify({ id: 'm.n', description: 'x', runner: 'macro', schema: { type: 'object' } }),
    });
    expect(problems).toEqual([
      expect.objectContaining({ id: 'm.e', at: '/entry' }),
      expect.objectContaining({ id: 'm.n', at: '/steps', message: expect.stringContaining('/steps: is required') }),
      expect.objectContaining({ id: 'm.s', at: '/steps' }),
    ]);
  });
});
