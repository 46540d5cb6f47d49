import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, test } from 'vitest';
import { callerCode, HOSTILE_IDS, HOSTILE_INPUTS } from '../fixtures/inputs/hostile.js';
import type { Engine, ErrResult, ToolErrorEvent, ToolInvocationEvent, ToolResult } from '../src/index.js';
import { compileSchema, PATTERN_CHECK_MS } from '../src/validation.js';
import { definition, FakeRunner, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

const FORM_SCHEMA = {
  type: 'object',
  required: ['name', 'age', 'tags'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', minLength: 2 },
    age: { type: 'integer', minimum: 0 },
    email: { type: 'string', format: 'email' },
    tags: { type: 'array', items: { type: 'string' } },
    nested: { type: 'object', properties: { 'a/b': { type: 'number' }, 'c~d': { enum: [1, 2] } } },
  },
};

const DRAFT07_SCHEMA = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  properties: { card: { type: 'string' }, billing: { type: 'string' } },
  dependencies: { card: ['billing'] },
};

/** A pattern that backtracks exponentially on a run of a's that does not end the way it wants. */
const BACKTRACKING = '^(a+)+$';
const BACKTRACKING_SCHEMA = { type: 'object', properties: { s: { type: 'string', pattern: BACKTRACKING } } };
/** Without a bound, checking this takes V8 days (doubling with each a: 30 of them took 45 s here). */
const HOSTILE_STRING = `${'a'.repeat(48)}!`;

let project: TempProject;
let engine: Engine;
let fake: FakeRunner;

beforeAll(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({ id: 'any.echo' }),
    'form.json': definition({ id: 'form.strict', schema: FORM_SCHEMA }),
    'form07.json': definition({ id: 'form.draft07', schema: DRAFT07_SCHEMA }),
    'pattern.json': definition({ id: 'slow.pattern', schema: BACKTRACKING_SCHEMA }),
    'props.json': definition({ id: 'slow.props', schema: { type: 'object', patternProperties: { [BACKTRACKING]: { type: 'number' } } } }),
    'out.json': definition({ id: 'slow.output', output_schema: BACKTRACKING_SCHEMA }),
  });
  fake = new FakeRunner({
    'any.echo': (ctx) => ctx.input,
    'form.strict': () => ({ ok: true }),
    'form.draft07': () => ({ ok: true }),
    'slow.pattern': () => ({ ok: true }),
    'slow.props': () => ({ ok: true }),
    'slow.output': (ctx) => ctx.input,
  });
  engine = await openEngine(project, { runners: [fake] });
});

afterAll(async () => {
  await engine.close();
  project.remove();
});

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

describe('hostile inputs are refused before the schema and before the tool', () => {
  test.each(HOSTILE_INPUTS)('$name → validation $code', async ({ make, code, pointer, message }) => {
    const events = recordEvents(engine);
    const before = fake.started.length;
    const error = failed(await engine.call('any.echo', make()));
    expect([error.stage, error.code]).toEqual(['validation', code]);
    expect(error.message).toContain(message);
    if (pointer !== undefined) expect(error.details?.pointer).toBe(pointer);
    expect(error.retryable).toBe(false);
    expect(fake.started.length).toBe(before);
    // The refused value never reaches an event either.
    const invocation = events.find((e) => e.type === 'ToolInvocationEvent') as ToolInvocationEvent;
    expect(invocation.input).toBe('[rejected input]');
    expect((events.find((e) => e.type === 'ToolErrorEvent') as ToolErrorEvent).error).toEqual(error);
    engine.events.removeAllListeners();
  });

  it('never ran a getter, setter or Proxy trap of any of them', () => {
    expect(callerCode.calls).toBe(0);
  });

  test.each(HOSTILE_IDS)('a tool id that is %s → validation UNKNOWN_TOOL', async (_name, make) => {
    const error = failed(await engine.call(make() as string, {}));
    expect([error.stage, error.code]).toEqual(['validation', 'UNKNOWN_TOOL']);
    expect(error.message.length).toBeLessThan(400);
    expect(callerCode.calls).toBe(0);
  });

  it('suggests close ids for a typo', async () => {
    const error = failed(await engine.call('fs.raed', {}));
    expect(error.code).toBe('UNKNOWN_TOOL');
    expect(error.message).toContain('Did you mean "fs.read"?');
    expect(error.details?.suggestions).toEqual(['fs.read']);
  });
});

describe('keys that name prototypes', () => {
  const raw = readFileSync(new URL('../fixtures/inputs/proto-pollution.json', import.meta.url), 'utf8');

  it('arrive as own data properties of a plain object and pollute nothing', async () => {
    const input = JSON.parse(raw);
    const result = await engine.call('any.echo', input);
    expect(result.ok).toBe(true);
    const seen = fake.contexts.at(-1)?.input as Record<string, unknown>;
    expect(seen).not.toBe(input); // a private copy
    expect(Object.getPrototypeOf(seen)).toBe(Object.prototype);
    for (const key of ['__proto__', 'constructor', 'prototype']) {
      expect(Object.getOwnPropertyDescriptor(seen, key)).toMatchObject({ enumerable: true, writable: true });
      expect(Object.hasOwn(seen, key)).toBe(true);
    }
    expect((seen as { isAdmin?: unknown }).isAdmin).toBeUndefined();
    expect(Object.getOwnPropertyDescriptor(seen, '__proto__')?.value).toEqual({ polluted: 'via __proto__', isAdmin: true });
    const nested = seen.nested as Record<string, unknown>;
    expect(Object.getPrototypeOf(nested)).toBe(Object.prototype);
    expect(Object.hasOwn(nested, '__proto__')).toBe(true);
    const item = (nested.list as Array<Record<string, unknown>>)[0] as Record<string, unknown>;
    expect(Object.getPrototypeOf(item)).toBe(Object.prototype);
    expect(Object.hasOwn(item, '__proto__')).toBe(true);
    // Nothing reached the shared prototypes.
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    expect(({} as { isAdmin?: unknown }).isAdmin).toBeUndefined();
    expect((Object.prototype as { polluted?: unknown }).polluted).toBeUndefined();
    expect((Function.prototype as { polluted?: unknown }).polluted).toBeUndefined();
    // The key round-trips to the caller as data too.
    expect(JSON.stringify(result.ok && result.data)).toBe(JSON.stringify(input));
  });

  it('are seen by the schema as the unknown properties they are', async () => {
    const error = failed(await engine.call('fs.write', JSON.parse('{"path":"/a","content":"x","__proto__":{"overwrite":false}}')));
    expect([error.stage, error.code]).toEqual(['validation', 'INVALID_INPUT']);
    expect(error.details?.violations).toEqual([expect.objectContaining({ pointer: '/__proto__', message: 'is not an allowed property' })]);
    expect(({} as { overwrite?: unknown }).overwrite).toBeUndefined();
  });
});

describe('accepted inputs', () => {
  test.each([
    ['an object without a prototype', () => Object.assign(Object.create(null), { a: 1 })],
    ['-0 and huge safe numbers', () => ({ z: -0, big: Number.MAX_SAFE_INTEGER, tiny: Number.MIN_VALUE })],
    ['an empty key and unicode keys', () => ({ '': 1, ключ: 2, '🔑': 3 })],
    [
      'a value shared by two keys (not a cycle)',
      () => {
        const shared = { v: 1 };
        return { a: shared, b: shared };
      },
    ],
    [
      'objects nested exactly 63 deep',
      () => {
        let v: unknown = 1;
        for (let i = 0; i < 63; i++) v = { d: v };
        return v;
      },
    ],
  ])('%s', async (_name, make) => {
    const input = make();
    const result = await engine.call('any.echo', input);
    expect(result.ok ? null : result.error).toBeNull();
    expect(JSON.stringify(result.ok && result.data)).toBe(JSON.stringify(input));
  });

  it('gives the tool a copy the caller cannot change while it runs', async () => {
    const input = { list: [1, 2] };
    const pending = engine.call('any.echo', input);
    input.list.push(3);
    const result = await pending;
    expect(result.ok && result.data).toEqual({ list: [1, 2] });
  });
});

describe('schema validation', () => {
  it('reports every violation, each with its JSON pointer', async () => {
    const error = failed(
      await engine.call('form.strict', {
        name: 'x',
        age: -1.5,
        email: 'not-an-email',
        tags: ['ok', 3],
        extra: true,
        nested: { 'a/b': 'text', 'c~d': 3 },
      }),
    );
    expect([error.stage, error.code, error.retryable]).toEqual(['validation', 'INVALID_INPUT', false]);
    const violations = error.details?.violations as Array<{ pointer: string; keyword: string; message: string }>;
    expect(violations.map((v) => [v.pointer, v.keyword]).sort()).toEqual(
      [
        ['/name', 'minLength'],
        ['/age', 'type'],
        ['/age', 'minimum'],
        ['/email', 'format'],
        ['/tags/1', 'type'],
        ['/extra', 'additionalProperties'],
        ['/nested/a~1b', 'type'],
        ['/nested/c~0d', 'enum'],
      ].sort(),
    );
    expect(violations.find((v) => v.pointer === '/nested/c~0d')?.message).toBe('must be one of 1, 2');
    expect(violations.find((v) => v.pointer === '/extra')?.message).toBe('is not an allowed property');
    expect(error.message).toMatch(/^Invalid input for form\.strict: .+; and 3 more$/);
    expect(fake.started).not.toContain('form.strict');
  });

  it('points a missing required property at where it should be', async () => {
    const error = failed(await engine.call('form.strict', { name: 'ok' }));
    const violations = error.details?.violations as Array<{ pointer: string; message: string }>;
    expect(violations.map((v) => [v.pointer, v.message])).toEqual([
      ['/age', 'is required'],
      ['/tags', 'is required'],
    ]);
  });

  it('points at the input itself when it is not an object', async () => {
    for (const input of ['text', 42, null, [1], true]) {
      const error = failed(await engine.call('form.strict', input));
      expect([error.stage, error.code]).toEqual(['validation', 'INVALID_INPUT']);
      expect(error.details?.violations).toEqual([expect.objectContaining({ pointer: '', keyword: 'type', message: 'must be object' })]);
    }
  });

  it('validates draft-07 schemas with draft-07 semantics', async () => {
    const error = failed(await engine.call('form.draft07', { card: '4111' }));
    expect(error.code).toBe('INVALID_INPUT');
    expect(error.details?.violations).toEqual([expect.objectContaining({ keyword: 'dependencies', pointer: '' })]);
    const ok = await engine.call('form.draft07', { card: '4111', billing: 'x' });
    expect(ok.ok).toBe(true);
  });

  it('passes a valid input through to the tool', async () => {
    const result = await engine.call('form.strict', { name: 'Ada', age: 36, tags: [], email: 'ada@example.org' });
    expect(result.ok).toBe(true);
  });

  it('compiles a schema once: equal schemas share one validator', () => {
    const a = compileSchema(FORM_SCHEMA);
    const b = compileSchema(JSON.parse(JSON.stringify(FORM_SCHEMA)));
    expect(b).toBe(a);
    expect(a.draft).toBe('2020-12');
    expect(compileSchema(DRAFT07_SCHEMA).draft).toBe('draft-07');
  });

  it('does not let a caller change a cached schema through the object it compiled', () => {
    const schema = { type: 'object', properties: { n: { type: 'number' } } };
    const validate = compileSchema(schema);
    schema.properties.n.type = 'string';
    expect(validate({ n: 1 })).toBeNull();
    expect(validate({ n: 'one' })).toEqual([expect.objectContaining({ pointer: '/n', keyword: 'type' })]);
  });
});

describe("a schema's regular expressions", () => {
  it('are checked as usual when they are quick', async () => {
    expect((await engine.call('slow.pattern', { s: 'aaaa' })).ok).toBe(true);
    const error = failed(await engine.call('slow.pattern', { s: 'aab' }));
    expect(error.details?.violations).toEqual([expect.objectContaining({ pointer: '/s', keyword: 'pattern' })]);
  });

  it('cannot hold the engine: a catastrophically backtracking pattern ends as INVALID_INPUT, and the engine goes on', async () => {
    const runs = fake.started.filter((id) => id === 'slow.pattern').length;
    const error = failed(await engine.call('slow.pattern', { s: HOSTILE_STRING }));
    expect([error.stage, error.code, error.retryable]).toEqual(['validation', 'INVALID_INPUT', false]);
    expect(error.details?.violations).toEqual([
      expect.objectContaining({ pointer: '', keyword: 'pattern', params: { timeout_ms: PATTERN_CHECK_MS } }),
    ]);
    expect(error.message).toContain('backtracks too much');
    // The tool never ran.
    expect(fake.started.filter((id) => id === 'slow.pattern')).toHaveLength(runs);
    expect((await engine.call('slow.pattern', { s: 'aaaa' })).ok).toBe(true);
  });

  it('in patternProperties, and in an output_schema, too', async () => {
    const props = failed(await engine.call('slow.props', { [HOSTILE_STRING]: 1 }));
    expect([props.code, props.message]).toEqual(['INVALID_INPUT', expect.stringContaining('backtracks too much')]);
    const output = failed(await engine.call('slow.output', { s: HOSTILE_STRING }));
    expect([output.code, output.message]).toEqual(['INVALID_OUTPUT', expect.stringContaining('backtracks too much')]);
  });
});

describe('JSON Schema defaults', () => {
  const SCHEMA = {
    type: 'object',
    properties: {
      greeting: { type: 'string', default: 'hello' },
      options: { type: 'object', default: {}, properties: { times: { type: 'integer', default: 2 } } },
      mode: { oneOf: [{ type: 'object', properties: { fast: { type: 'boolean', default: true } } }] },
    },
  };
  let own: Engine;
  let ownProject: TempProject;
  const seen: unknown[] = [];

  beforeAll(async () => {
    ownProject = tempProject({ 'tool.js': TRIVIAL_JS, 'defaults.json': definition({ id: 'defaults', schema: SCHEMA }) });
    own = await openEngine(ownProject, {
      runners: [
        new FakeRunner({
          defaults: (ctx) => {
            seen.push(structuredClone(ctx.input));
            return ctx.input;
          },
        }),
      ],
    });
  });
  afterAll(async () => {
    await own.close();
    ownProject.remove();
  });

  it('fill in what the input lacks, nested ones too; the tool and the result event see them, the caller’s object is untouched', async () => {
    const events = recordEvents(own);
    const input = { mode: {} };
    const result = await own.call('defaults', input);
    const filled = { greeting: 'hello', options: { times: 2 }, mode: {} };
    expect(result).toMatchObject({ ok: true, data: filled });
    expect(seen.at(-1)).toEqual(filled);
    expect(input).toEqual({ mode: {} });
    expect(events.find((e) => e.type === 'ToolInvocationEvent')).toMatchObject({ input: { mode: {} } });
    expect(events.find((e) => e.type === 'ToolResultEvent')).toMatchObject({ input: filled });
  });

  it('never replace a given value, not even null; a default under oneOf is not applied (ajv) and is no load error', async () => {
    expect(own.problems()).toEqual([]);
    expect((await own.call('defaults', { greeting: 'hi', options: { times: 5 } })).ok && seen.at(-1)).toEqual({
      greeting: 'hi',
      options: { times: 5 },
    });
    const events = recordEvents(own);
    const error = (await own.call('defaults', { greeting: null })) as ErrResult;
    expect(error.error).toMatchObject({ code: 'INVALID_INPUT', details: { violations: [{ pointer: '/greeting' }] } });
    expect(events.find((e): e is ToolErrorEvent => e.type === 'ToolErrorEvent')).not.toHaveProperty('input');
  });

  it('a typo next to a default is still a load error, in strict mode', () => {
    expect(() => compileSchema({ type: 'object', properties: { a: { type: 'string', default: 'x', minLenght: 1 } } }, { defaults: true })).toThrow(
      'strict mode: unknown keyword: "minLenght"',
    );
  });
});
