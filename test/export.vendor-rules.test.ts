import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTINS } from '../runners/builtin/index.js';
import { type Engine, exportTools, type ToolInfo } from '../src/index.js';
import { publishSchema } from '../src/surfaces/publish-schema.js';
import { checkRequestTools, checkSchema, SCHEMA_TARGETS, type SchemaTarget } from '../src/surfaces/vendor-rules.js';
import { compileSchema } from '../src/validation.js';
import { definition, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * The vendors' schema rules (src/surfaces/vendor-rules.ts) against the verdicts the APIs gave in public
 * reports, and every schema Arium publishes (builtins, the demo project, every fixture definition,
 * hostile ones) against those rules.
 */

const ROOT = join(import.meta.dirname, '..');
const obj = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ type: 'object', properties, ...extra });
const strictObj = (properties: Record<string, unknown>) => ({
  type: 'object',
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
});

describe('the rules give the verdicts the APIs give', () => {
  // [target, schema, the keyword the API names, or null when it takes the schema]
  const cases: Array<[SchemaTarget, unknown, string | null]> = [
    ['anthropic', obj({ a: { type: 'string' } }), null],
    ['anthropic', { ...obj({ a: { type: 'string' } }), oneOf: [{ required: ['a'] }] }, 'oneOf'],
    ['anthropic', { ...obj({}), anyOf: [{ required: ['a'] }] }, 'anyOf'],
    ['anthropic', { ...obj({}), allOf: [{ required: ['a'] }] }, 'allOf'],
    ['anthropic', { properties: {} }, 'type'],
    ['anthropic', obj({ a: { oneOf: [{ type: 'string' }, { type: 'number' }] } }), null],
    ['openai', { ...obj({}), enum: [{}] }, 'enum'],
    ['openai', { ...obj({}), not: { required: ['a'] } }, 'not'],
    ['openai', { type: 'string' }, 'type'],
    ['openai', obj({ a: { type: 'string', minLength: 1 } }), null],
    ['openai-strict', strictObj({ a: { type: 'string', pattern: '^x', format: 'email' } }), null],
    ['openai-strict', strictObj({ a: { type: 'string', minLength: 1 } }), 'minLength'],
    ['openai-strict', strictObj({ a: { type: 'string', format: 'uri' } }), 'format'],
    ['openai-strict', obj({ a: { type: 'string' } }, { additionalProperties: false }), 'required'],
    ['openai-strict', obj({ a: { type: 'string' } }, { required: ['a'] }), 'additionalProperties'],
    ['openai-strict', strictObj({ a: {} }), 'type'],
    ['openai-strict', strictObj({ a: { allOf: [{ type: 'string' }] } }), 'allOf'],
    ['openai-strict', strictObj({ a: { type: ['string', 'null'] } }), null],
    ['openai-strict', strictObj({ a: { type: 'array', items: { type: 'string' }, uniqueItems: true } }), 'uniqueItems'],
    ['gemini', obj({ a: { type: 'string' } }, { required: ['a'] }), null],
    ['gemini', obj({ a: { type: 'string' } }, { additionalProperties: false }), 'additionalProperties'],
    ['gemini', obj({ a: { const: 'x' } }), 'const'],
    ['gemini', obj({ a: { type: ['string', 'null'] } }), 'type'],
    ['gemini', obj({ a: { type: 'string', nullable: true } }), null],
    ['gemini', obj({ a: { type: 'integer', enum: [1, 2] } }), 'enum'],
    ['gemini', obj({ a: { type: 'string', enum: ['x', 'y'] } }), null],
    ['gemini', obj({ a: { type: 'string', format: 'uri' } }), 'format'],
    ['gemini', obj({ a: { type: 'string', format: 'date-time' } }), null],
    ['gemini', obj({ a: { type: 'number', exclusiveMinimum: 0 } }), 'exclusiveMinimum'],
    ['gemini', obj({ a: obj({}) }), 'properties'],
    ['gemini', obj({}), 'properties'],
    ['gemini', obj({ 'a-b': { type: 'string' } }), 'properties'],
    ['gemini', { $schema: 'https://json-schema.org/draft/2020-12/schema', ...obj({ a: { type: 'string' } }) }, '$schema'],
    ['mcp', { type: 'array' }, 'type'],
    ['mcp', { ...obj({ a: { type: 'string' } }), oneOf: [{ required: ['a'] }] }, 'oneOf'],
    ['mcp', { ...obj({ a: { type: 'string' } }), not: { required: ['a'] } }, 'not'],
    ['mcp', obj({ a: { type: 'string' } }), null],
  ];
  it.each(cases)('%s: %j → %s', (target, schema, keyword) => {
    const breaks = checkSchema(schema, target);
    if (keyword === null) expect(breaks).toEqual([]);
    else expect(breaks.map((b) => b.keyword)).toContain(keyword);
  });

  it('OpenAI strict: the size limits of its documentation', () => {
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 11; i++) deep = strictObj({ x: deep });
    expect(checkSchema(deep, 'openai-strict').map((b) => b.keyword)).toEqual(['depth']);
    let ten: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 10; i++) ten = strictObj({ x: ten });
    expect(checkSchema(ten, 'openai-strict')).toEqual([]);
    const many = strictObj(Object.fromEntries(Array.from({ length: 5001 }, (_, i) => [`p${i}`, { type: 'string' }])));
    expect(checkSchema(many, 'openai-strict').map((b) => b.keyword)).toContain('properties');
    const enums = strictObj({ a: { type: 'string', enum: Array.from({ length: 1001 }, (_, i) => `v${i}`) } });
    expect(checkSchema(enums, 'openai-strict').map((b) => b.keyword)).toContain('enum');
    const long = strictObj({ a: { type: 'string', enum: Array.from({ length: 251 }, (_, i) => `${'v'.repeat(60)}${i}`) } });
    expect(checkSchema(long, 'openai-strict')[0]?.message).toMatch(/15000 characters in an enum of more than 250 strings/);
  });

  it('requests: every tool of a request is checked in the shape each API takes, names included', () => {
    const hash = BUILTINS.find((b) => b.tool.spec.id === 'system.hash')?.tool.spec.schema;
    expect(checkRequestTools('anthropic', [{ name: 'system__hash', input_schema: hash }])).toEqual([
      expect.objectContaining({ param: 'tools.0.custom.input_schema', keyword: 'oneOf' }),
    ]);
    expect(checkRequestTools('openai', [{ type: 'function', function: { name: 'system.hash', parameters: obj({}) } }])).toEqual([
      expect.objectContaining({ param: 'tools[0].function.name', keyword: 'name' }),
    ]);
    const twice = { type: 'function', function: { name: 'a', parameters: obj({}) } };
    expect(checkRequestTools('openai', [twice, twice])[0]?.message).toMatch(/unique/);
    const strict = { type: 'function', function: { name: 'a', strict: true, parameters: obj({ s: { type: 'string' } }) } };
    expect(checkRequestTools('openai', [strict]).map((b) => b.keyword)).toEqual(['additionalProperties', 'required']);
    expect(checkRequestTools('gemini', [{ functionDeclarations: [{ name: '9lives', parameters: obj({ a: { type: 'string' } }) }] }])).toEqual([
      expect.objectContaining({ param: 'tools[0].function_declarations[0].name' }),
    ]);
  });
});

/** Publishes `schema` to every target and checks what comes out: never a throw, and a published schema always passes. */
function publishEverywhere(schema: unknown) {
  const out = {} as Record<SchemaTarget, ReturnType<typeof publishSchema>>;
  for (const target of SCHEMA_TARGETS) {
    const published = publishSchema(schema, target);
    if (published.schema) expect(checkSchema(published.schema, target), `${target}: ${JSON.stringify(published.schema).slice(0, 300)}`).toEqual([]);
    else if (!(target === 'gemini' && published.problems.length === 0)) expect(published.problems.length).toBeGreaterThan(0);
    for (const b of published.problems) expect(b.message.length).toBeGreaterThan(10);
    out[target] = published;
  }
  return out;
}

describe('the builtins, as published', () => {
  it.each(BUILTINS.map((b) => [b.tool.spec.id, b.tool.spec.schema] as const))('%s: every vendor takes it', (id, schema) => {
    const out = publishEverywhere(schema);
    for (const target of ['openai', 'anthropic', 'gemini', 'mcp'] as const) expect(out[target].problems, target).toEqual([]);
    // Strict mode: all but shell.run, whose env is a map of free names.
    if (id === 'shell.run') expect(out['openai-strict'].problems).toEqual([expect.objectContaining({ pointer: '/properties/env/propertyNames' })]);
    else expect(out['openai-strict'].problems).toEqual([]);
  });

  it('system.hash: published without its top-level oneOf; the engine still refuses both or neither', () => {
    const hash = BUILTINS.find((b) => b.tool.spec.id === 'system.hash')?.tool;
    for (const target of ['openai', 'anthropic', 'mcp'] as const) {
      const published = publishSchema(hash?.spec.schema, target).schema as Record<string, unknown>;
      expect(published.oneOf).toBeUndefined();
      expect(published.description).toBe('give exactly one of: "path"; "text"');
    }
    expect(hash?.spec.schema.oneOf).toBeDefined();
    expect(hash?.validateInput({ path: '/a', text: 'x' })).not.toBeNull();
    expect(hash?.validateInput({})).not.toBeNull();
    expect(hash?.validateInput({ text: 'x' })).toBeNull();
  });
});

describe('the demo project and every fixture definition, as published', () => {
  const files = [
    ...readdirSync(join(ROOT, 'fixtures'), { recursive: true, encoding: 'utf8' })
      .filter((f) => /(^|\/)tools\/.*\.json$/.test(f))
      .map((f) => join('fixtures', f)),
    ...readdirSync(join(ROOT, 'workspace', 'demo', 'tools'))
      .filter((f) => f.endsWith('.json'))
      .map((f) => join('workspace', 'demo', 'tools', f)),
  ];

  it('finds them', () => expect(files.length).toBeGreaterThan(60));

  it.each(files)('%s', (file) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(join(ROOT, file), 'utf8').replace(/^\uFEFF/, ''));
    } catch {
      return; // a broken file: a load problem, never published
    }
    const schema = (parsed as { schema?: unknown } | null)?.schema;
    if (schema === undefined) return;
    const out = publishEverywhere(schema);
    let loads = true;
    try {
      compileSchema(schema as Record<string, unknown>);
    } catch {
      loads = false;
    }
    // A schema the engine loads is published to every vendor, strict mode included.
    if (loads && (schema as { type?: unknown }).type === 'object') {
      for (const target of SCHEMA_TARGETS) expect(out[target].problems, target).toEqual([]);
    }
  });
});

describe('hostile schemas', () => {
  it('nesting hundreds of levels deep: refused by name, not a stack overflow', () => {
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 5000; i++) deep = obj({ x: deep });
    const out = publishEverywhere(deep);
    for (const target of SCHEMA_TARGETS)
      expect(
        out[target].problems.map((b) => b.keyword),
        target,
      ).toContain('depth');
  });

  it('a $ref cycle: Gemini, which has no $ref, refuses it by name; the others take the reference', () => {
    const tree = {
      type: 'object',
      properties: { root: { $ref: '#/$defs/node' } },
      required: ['root'],
      additionalProperties: false,
      $defs: { node: strictObj({ name: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } }) },
    };
    const out = publishEverywhere(tree);
    expect(out.gemini.problems).toEqual([expect.objectContaining({ keyword: '$ref', message: expect.stringMatching(/refers to itself/) })]);
    for (const target of ['openai', 'openai-strict', 'anthropic', 'mcp'] as const) expect(out[target].problems, target).toEqual([]);
    const acyclic = { ...tree, $defs: { node: strictObj({ name: { type: 'string' } }) } };
    expect(publishSchema(acyclic, 'gemini').schema).toEqual({
      type: 'object',
      properties: { root: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } },
      required: ['root'],
    });
  });

  it('a huge enum: past strict mode’s limits it is exported without strict; Gemini and the others take it', () => {
    const out = publishEverywhere(obj({ pick: { type: 'string', enum: Array.from({ length: 20_000 }, (_, i) => `value-${i}`) } }));
    expect(out['openai-strict'].problems.map((b) => b.keyword)).toEqual(expect.arrayContaining(['enum']));
    for (const target of ['openai', 'anthropic', 'gemini', 'mcp'] as const) expect(out[target].problems, target).toEqual([]);
  });

  it.each([{ type: 'string' }, { type: 'array', items: { type: 'string' } }, { oneOf: [{ type: 'string' }] }, [], null, 'object', true])(
    'a root that is not an object schema (%j): refused by every target',
    (schema) => {
      const out = publishEverywhere(schema);
      for (const target of SCHEMA_TARGETS)
        expect(
          out[target].problems.map((b) => b.keyword),
          target,
        ).toEqual(['type']);
    },
  );

  it('prototype keys (__proto__, constructor) stay properties: published as such, Object.prototype untouched', () => {
    const schema = JSON.parse(
      '{"type":"object","properties":{"__proto__":{"type":"string","minLength":1},"constructor":{"type":"integer"},"toString":{"type":"object","properties":{"__proto__":{"type":"boolean"}}}},"required":["__proto__"]}',
    );
    const out = publishEverywhere(schema);
    for (const target of SCHEMA_TARGETS) {
      const published = out[target].schema as Record<string, Record<string, unknown>>;
      expect(Object.hasOwn(published.properties as object, '__proto__'), target).toBe(true);
      expect(Object.keys(published.properties as object), target).toEqual(['__proto__', 'constructor', 'toString']);
    }
    const strict = out['openai-strict'].schema as { required: string[]; properties: Record<string, { type: unknown }> };
    expect(strict.required).toEqual(['__proto__', 'constructor', 'toString']);
    expect(JSON.stringify(strict)).toContain('"__proto__":{"type":"string","description":"at least 1 character"}');
    expect(out['openai-strict'].nullable).toEqual([['constructor'], ['toString', '__proto__'], ['toString']]);
    expect(({} as Record<string, unknown>).type).toBeUndefined();
  });

  it('a top-level oneOf whose alternative is not an object: refused where the top level must be one object', () => {
    const out = publishEverywhere({ type: 'object', properties: { a: { type: 'string' } }, oneOf: [{ required: ['a'] }, { type: 'string' }] });
    for (const target of SCHEMA_TARGETS)
      expect(
        out[target].problems.map((b) => b.keyword),
        target,
      ).toEqual(['oneOf']);
  });
});

describe('a project’s tools', () => {
  let project: TempProject;
  let engine: Engine;
  beforeAll(async () => {
    const map = { type: 'object', additionalProperties: { type: 'string' } };
    project = tempProject({
      'tool.js': TRIVIAL_JS,
      'either.json': definition({
        id: 'note.either',
        schema: {
          type: 'object',
          oneOf: [
            { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'], additionalProperties: false },
            { type: 'object', properties: { title: { type: 'string', maxLength: 80 } }, required: ['title'], additionalProperties: false },
          ],
        },
      }),
      'labels.json': definition({ id: 'note.labels', schema: { type: 'object', properties: { labels: map }, required: ['labels'] } }),
      '9.json': definition({ id: '9lives', schema: { type: 'object', properties: { n: { type: 'integer' } } } }),
    });
    engine = await openEngine(project);
  });
  afterAll(async () => {
    await engine?.close();
    project?.remove();
  });
  const tool = (id: string) => engine.tools().find((t) => t.id === id) as ToolInfo;

  it('a top-level oneOf of objects is published as one object, and the engine still checks the oneOf', async () => {
    for (const vendor of ['openai', 'anthropic', 'gemini', 'mcp'] as const) {
      const out = exportTools([tool('note.either')], vendor);
      expect(out.problems, vendor).toEqual([]);
      expect(out.rewrites, vendor).toContainEqual({ tool: 'note.either', message: expect.stringContaining('top-level oneOf merged') });
    }
    const strict = exportTools([tool('note.either')], 'openai', { strict: true });
    expect((strict.tools[0] as { function: { strict?: boolean; parameters: unknown } }).function).toMatchObject({
      strict: true,
      parameters: {
        properties: { id: { type: ['integer', 'null'] }, title: { type: ['string', 'null'], description: 'at most 80 characters' } },
        required: ['id', 'title'],
        description: 'give exactly one of: "id"; "title"',
      },
    });
    expect(await engine.call('note.either', { id: 1, title: 'both' })).toMatchObject({ ok: false, error: { code: 'INVALID_INPUT' } });
    expect(await engine.call('note.either', { id: 1 })).toMatchObject({ ok: true });
  });

  it('a tool a vendor cannot take still loads and runs; engine.problems() names the vendor, where and why', async () => {
    const problems = engine.problems().filter((p) => p.vendor);
    expect(problems).toEqual(
      expect.arrayContaining([
        {
          file: 'tools/labels.json',
          id: 'note.labels',
          at: '/schema/properties/labels',
          vendor: 'gemini',
          message: expect.stringMatching(/^not published to Gemini: Gemini needs a non-empty "properties"/),
        },
        { file: 'tools/9.json', id: '9lives', at: '/id', vendor: 'gemini', message: expect.stringContaining('"9lives" is not a tool name') },
      ]),
    );
    expect(problems.every((p) => p.vendor === 'gemini')).toBe(true);
    expect(exportTools(engine.tools(), 'gemini').problems).toEqual(
      expect.arrayContaining([
        { tool: 'note.labels', message: expect.stringContaining('left out, Gemini would refuse every request that lists it') },
      ]),
    );
    expect(await engine.call('note.labels', { labels: { a: 'b' } })).toMatchObject({ ok: true });
  });
});
