import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { BUILTINS } from '../runners/builtin/index.js';
import { DEFAULT_CATALOG } from '../runners/index.js';
import { toolMetaSchema } from '../src/registry/meta-schema.js';
import { compileSchema, lazyValidator, metaKey, SchemaError, schemaKey } from '../src/validation.js';

// At run time the builtins' schemas are compiled without being checked against their draft's
// meta-schema (src/validation.ts lazyValidator: that check made the first call of a fresh process
// slow). This is where they are checked, as strictly as a tool author's.
describe('the builtin tools’ schemas', () => {
  it.each(BUILTINS.map((b) => [b.tool.spec.id, b.tool.spec] as const))('%s: valid under strict compilation', (_id, spec) => {
    expect(() => compileSchema(spec.schema)).not.toThrow();
    expect(() => compileSchema(spec.schema, { defaults: true })).not.toThrow();
    if (spec.output_schema) expect(() => compileSchema(spec.output_schema)).not.toThrow();
  });

  it('skips the check only for the builtins: a tool author’s schema is still compiled strictly', () => {
    const typo = { type: 'object', properties: { n: { type: 'number' } }, requried: ['n'] };
    expect(() => compileSchema(typo)).toThrow(SchemaError);
    // The lazy, trusted validator of the same schema compiles and checks values: the author's check is
    // the strict compile above, never skipped on the paths that load tool definitions.
    const check = lazyValidator({ type: 'object', properties: { n: { type: 'number', default: 1 } } }, { defaults: true });
    const value: Record<string, unknown> = {};
    expect(check(value)).toBeNull();
    expect(value).toEqual({ n: 1 });
    expect(check({ n: 'x' })?.[0]).toMatchObject({ pointer: '/n', keyword: 'type' });
  });

  it('load the formats when a schema names one, and check them', () => {
    const check = compileSchema({ type: 'object', properties: { at: { type: 'string', format: 'date-time' } } });
    expect(check({ at: '2026-11-25T10:00:00Z' })).toBeNull();
    expect(check({ at: 'yesterday' })?.[0]).toMatchObject({ pointer: '/at', keyword: 'format' });
  });
});

describe('the validators compiled at build time (dist/generated/validators.cjs)', () => {
  const generated = createRequire(import.meta.url)('../dist/generated/validators.cjs') as Record<
    string,
    ((v: unknown) => boolean) & { errors?: unknown }
  >;

  it('are there for the current tool meta-schema, every draft and every builtin, so starts do not compile them', () => {
    const { $id: _id, ...meta } = toolMetaSchema(DEFAULT_CATALOG);
    const keys = [
      schemaKey(meta),
      metaKey('2020-12'),
      metaKey('2019-09'),
      metaKey('draft-07'),
      ...BUILTINS.map((b) => schemaKey(b.tool.spec.schema, { defaults: true, trusted: true })),
    ];
    for (const key of keys) expect(typeof generated[key], key).toBe('function');
  });

  it('answer as ajv compiling the same schema now does, errors included', () => {
    const fsWrite = BUILTINS.find((b) => b.tool.spec.id === 'fs.write')?.tool.spec.schema as Record<string, unknown>;
    const built = generated[schemaKey(fsWrite, { defaults: true, trusted: true })];
    const inputs: unknown[] = [
      { path: '/a', content: 'x' },
      { path: '', content: 1 },
      { content: 'x', extra: true },
      { path: '/a', content: 'x', diff: 'yes' },
      [],
    ];
    // The same schema with its keys in another order: another text, so compiled by ajv now, not looked up.
    const { type, ...rest } = fsWrite;
    const reordered = { ...rest, type };
    expect(generated[schemaKey(reordered, { defaults: true, trusted: true })]).toBeUndefined();
    const fresh = compileSchema(reordered, { defaults: true, trusted: true });
    for (const input of inputs) {
      const a = structuredClone(input);
      const b = structuredClone(input);
      expect(built?.(a)).toBe(fresh(b) === null);
      expect(a).toEqual(b); // the same defaults filled in
    }
    const { $id: _id, ...meta } = toolMetaSchema(DEFAULT_CATALOG);
    const metaCheck = generated[schemaKey(meta)];
    const bad = { id: 'Bad Id', description: '', runner: 'nope', schema: {} };
    expect(metaCheck?.(bad)).toBe(false);
    expect(((metaCheck?.errors ?? []) as Array<{ instancePath: string }>).map((e) => e.instancePath)).toEqual(
      expect.arrayContaining(['/id', '/description', '/runner']),
    );
  });
});
