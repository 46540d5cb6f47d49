import { readdirSync, readFileSync } from 'node:fs';
import Ajv2020Module from 'ajv/dist/2020.js';
import { describe, expect, it, test } from 'vitest';
import { TOOL_META_SCHEMA } from '../src/index.js';

const PUBLISHED = new URL('../schema/tool.schema.json', import.meta.url);
const REGENERATE =
  'schema/tool.schema.json is out of date with TOOL_META_SCHEMA (src/registry/meta-schema.ts). Regenerate it with: ' +
  `npm run build && node -e "import('./dist/src/index.js').then(m => process.stdout.write(JSON.stringify(m.TOOL_META_SCHEMA, null, 2) + '\\n'))" > schema/tool.schema.json`;

describe('schema/tool.schema.json', () => {
  it('is TOOL_META_SCHEMA, byte for byte', () => {
    const text = readFileSync(PUBLISHED, 'utf8');
    expect(text, REGENERATE).toBe(`${JSON.stringify(TOOL_META_SCHEMA, null, 2)}\n`);
  });

  it('is exported by the package for editors', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    expect(pkg.exports['./schema/tool.schema.json']).toBe('./schema/tool.schema.json');
    expect(pkg.files).toContain('schema');
  });
});

describe('an editor using the published schema', () => {
  // A plain, non-strict ajv, as an editor would use it: independent of the engine's own validator.
  const Ajv2020 = (
    Ajv2020Module as unknown as { default: new (o: object) => { compile(s: object): ((v: unknown) => boolean) & { errors?: unknown[] } } }
  ).default;
  const validate = new Ajv2020({ allErrors: true, strict: false }).compile(JSON.parse(readFileSync(PUBLISHED, 'utf8')));
  const tools = new URL('../fixtures/definitions/tools/', import.meta.url);
  const read = (name: string) => JSON.parse(readFileSync(new URL(name, tools), 'utf8').replace(/^\uFEFF/, ''));
  const good = readdirSync(tools).filter((n) => n.startsWith('good-') || n.startsWith('dup-'));

  test.each(good)('accepts the good definition %s', (name) => {
    expect(validate(read(name)), JSON.stringify(validate.errors)).toBe(true);
  });

  // Definitions whose fault is in their shape, so the schema alone must flag them.
  test.each([
    'bad-wrong-types.json',
    'bad-unknown-field.json',
    'bad-missing-description.json',
    'bad-missing-entry-field.json',
    'bad-unknown-runner.json',
    'bad-runner-builtin-entry.json',
    'bad-id-uppercase.json',
    'bad-id-path.json',
    'bad-id-empty-segment.json',
    'bad-id-empty.json',
    'bad-permission.json',
    'bad-limits.json',
  ])('flags %s', (name) => {
    expect(validate(read(name))).toBe(false);
  });
});
