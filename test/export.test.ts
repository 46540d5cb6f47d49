import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callExported, type Engine, exportTools, resolveCall, type ToolInfo, vendorName } from '../src/index.js';
import { definition, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/** Function-calling export: each vendor's tool schema from a real engine's tools, and the way back. */

let project: TempProject;
let engine: Engine;

const NOTE_SCHEMA = {
  type: 'object',
  properties: {
    title: { type: 'string', description: 'the title' },
    tags: { type: 'array', items: { type: 'string' } },
    meta: { type: 'object', properties: { pinned: { type: 'boolean', default: false } }, required: [] },
    level: { type: 'integer', minimum: 1, default: 3 },
  },
  required: ['title'],
  additionalProperties: false,
};

beforeAll(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'note.json': definition({ id: 'notes.add', schema: NOTE_SCHEMA, output_schema: { type: 'object' } }),
    'loose.json': definition({ id: 'text.loose', schema: { type: 'object', properties: { s: { type: 'string', minLength: 2 } } } }),
    'map.json': definition({
      id: 'text.map',
      schema: { type: 'object', properties: { tags: { type: 'object', additionalProperties: { type: 'string' } } } },
    }),
    'clash-a.json': definition({ id: 'a.b' }),
    'clash-b.json': definition({ id: 'a__b' }),
    'long.json': definition({ id: `very.${'long'.repeat(20)}.name` }),
  });
  engine = await openEngine(project);
});

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

const tool = (id: string) => engine.tools().find((t) => t.id === id) as ToolInfo;

describe('exportTools', () => {
  it('openai: function tools named without dots, with the tool’s own schema; the map turns names back into ids', () => {
    const out = exportTools(engine.tools(), 'openai');
    expect(out.tools).toContainEqual({
      type: 'function',
      function: { name: 'notes__add', description: tool('notes.add').description, parameters: NOTE_SCHEMA },
    });
    expect(out.names.notes__add).toBe('notes.add');
    expect(out.names.fs__read).toBe('fs.read');
    for (const [name, id] of Object.entries(out.names)) expect(resolveCall(out, name, {}).id).toBe(id);
  });

  it('anthropic: name, description, input_schema', () => {
    const out = exportTools(engine.tools(), 'anthropic');
    expect(out.tools).toContainEqual({ name: 'notes__add', description: tool('notes.add').description, input_schema: NOTE_SCHEMA });
  });

  it('mcp: the ids as they are, with annotations and output schemas', () => {
    const out = exportTools(engine.tools(), 'mcp');
    expect(out.tools).toContainEqual(expect.objectContaining({ name: 'notes.add', inputSchema: NOTE_SCHEMA, outputSchema: { type: 'object' } }));
    expect(out.problems).toEqual([]);
  });

  it('reports ids that clash once mapped and leaves both out; cuts long names with a hash, still reversible', () => {
    const out = exportTools(engine.tools(), 'openai');
    expect(out.problems).toEqual(
      expect.arrayContaining([
        { tool: 'a.b', message: expect.stringContaining('"a__b" is also the name of "a__b"') },
        { tool: 'a__b', message: expect.stringContaining('is also the name of "a.b"') },
      ]),
    );
    expect(Object.values(out.names)).not.toContain('a.b');
    const long = vendorName(`very.${'long'.repeat(20)}.name`);
    expect(long).toMatch(/^[a-zA-Z0-9_-]{64}$/);
    expect(out.names[long]).toBe(`very.${'long'.repeat(20)}.name`);
  });

  it('strict (openai): every object closed, every property required, optional ones nullable; defaults dropped', () => {
    const out = exportTools([tool('notes.add'), tool('text.loose')], 'openai', { strict: true });
    const fn = (out.tools[0] as { function: Record<string, unknown> }).function;
    expect(fn.strict).toBe(true);
    expect(fn.parameters).toEqual({
      type: 'object',
      properties: {
        title: { type: 'string', description: 'the title' },
        tags: { type: ['array', 'null'], items: { type: 'string' } },
        meta: { type: ['object', 'null'], properties: { pinned: { type: ['boolean', 'null'] } }, required: ['pinned'], additionalProperties: false },
        level: { type: ['integer', 'null'], minimum: 1 },
      },
      required: ['title', 'tags', 'meta', 'level'],
      additionalProperties: false,
    });
    // minLength is not a strict-mode keyword: said in the description, the tool still strict.
    expect((out.tools[1] as { function: Record<string, unknown> }).function).toMatchObject({
      strict: true,
      parameters: { properties: { s: { type: ['string', 'null'], description: 'at least 2 characters' } } },
    });
    expect(out.problems).toEqual([]);
    expect(out.rewrites).toContainEqual({ tool: 'text.loose', message: expect.stringContaining('"minLength" said in the description') });
  });

  it('strict (openai): a map with free keys cannot be strict; exported without strict, saying which property and why', () => {
    const out = exportTools([tool('text.map')], 'openai', { strict: true });
    expect((out.tools[0] as { function: Record<string, unknown> }).function.strict).toBeUndefined();
    expect(out.problems).toEqual([
      {
        tool: 'text.map',
        message: expect.stringMatching(/^exported without strict: additionalProperties at \/properties\/tags\/additionalProperties: .*a map/),
      },
    ]);
  });
});

describe('from a model’s tool call back to the engine', () => {
  it('runs a call given as OpenAI gives it (arguments as JSON text), strict nulls dropped so defaults apply', async () => {
    const out = exportTools([tool('notes.add')], 'openai', { strict: true });
    const result = await callExported(engine, out, 'notes__add', '{"title":"t","tags":null,"meta":{"pinned":null},"level":null}');
    expect(result).toMatchObject({ ok: true, data: { title: 't', meta: { pinned: false }, level: 3 } });
  });

  it('runs a call given as Anthropic gives it (an object)', async () => {
    const out = exportTools(engine.tools(), 'anthropic');
    expect(await callExported(engine, out, 'notes__add', { title: 'x' })).toMatchObject({ ok: true, data: { title: 'x', level: 3 } });
  });

  it('an unknown name, arguments that are not JSON or not an object, are failed results naming what was wrong', async () => {
    const out = exportTools(engine.tools(), 'openai');
    expect(await callExported(engine, out, 'no__such', '{}')).toMatchObject({ ok: false, error: { code: 'UNKNOWN_TOOL', stage: 'validation' } });
    expect(await callExported(engine, out, 'constructor', '{}')).toMatchObject({ ok: false, error: { code: 'UNKNOWN_TOOL' } });
    const bad = await callExported(engine, out, 'notes__add', '{"title": "x",');
    expect(bad).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT', details: { tool: 'notes.add' } } });
    expect(bad.ok ? '' : bad.error.message).toMatch(/not valid JSON/);
    expect(await callExported(engine, out, 'notes__add', '[1]')).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT' } });
    expect(await callExported(engine, out, 'notes__add', { title: 3 })).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT' } });
  });

  it('twenty calls at once each reach their own tool', async () => {
    const out = exportTools(engine.tools(), 'openai');
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => callExported(engine, out, 'notes__add', JSON.stringify({ title: `n${i}` }))),
    );
    expect(results.map((r) => (r.ok ? (r.data as { title: string }).title : r.error.code))).toEqual(Array.from({ length: 20 }, (_, i) => `n${i}`));
  });
});
