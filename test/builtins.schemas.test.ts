import { describe, expect, it } from 'vitest';
import { BUILTINS } from '../runners/builtin/index.js';
import { compileSchema, lazyValidator, SchemaError } from '../src/validation.js';

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
