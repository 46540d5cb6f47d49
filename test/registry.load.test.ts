import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, test } from 'vitest';
import { DEFAULT_REGISTRY_LIMITS, type Engine, type RegistryProblem } from '../src/index.js';
import { copyFixtureProject, openEngine, type TempProject } from './support/project.js';

/**
 * fixtures/definitions/tools holds one file per malformed definition and a few good ones. The test works
 * on a temporary copy, where it also makes what git should not carry: a definition of several megabytes,
 * an entry that is a symlink out of the tools folder, a definition that is itself a symlink, and an entry
 * that is a folder.
 */

const HUGE_BYTES = 5 * 1024 * 1024;
let project: TempProject;
let engine: Engine;
let problems: RegistryProblem[];

beforeAll(async () => {
  project = copyFixtureProject('definitions');
  symlinkSync('../outside.js', join(project.tools, 'link-out.js'));
  mkdirSync(join(project.tools, 'folder.js'));
  symlinkSync('../outside.json', join(project.tools, 'bad-definition-link.json'));
  writeFileSync(
    join(project.dir, 'outside.json'),
    JSON.stringify({ id: 'linked.def', description: 'reached through a link', runner: 'js-runner', entry: 'upper.js', schema: { type: 'object' } }),
  );
  // Valid JSON all the way through, so only its size can be the reason.
  const padding = 'x'.repeat(HUGE_BYTES);
  writeFileSync(
    join(project.tools, 'bad-huge.json'),
    JSON.stringify({ id: 'bad.huge', description: padding, runner: 'js-runner', entry: 'upper.js', schema: { type: 'object' } }),
  );
  engine = await openEngine(project);
  problems = engine.problems();
});

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

function problemOf(file: string): RegistryProblem {
  const found = problems.filter((p) => p.file === `tools/${file}`);
  expect(found, `problems reported for tools/${file}: ${JSON.stringify(problems.map((p) => p.file))}`).toHaveLength(1);
  return found[0] as RegistryProblem;
}

const SCHEMA_MISMATCH = 'does not match the tool definition schema';

// file, message fragments (all must appear), `at` (undefined: the file has no meaningful position)
const BAD: Array<[string, string[], string | undefined]> = [
  ['bad-malformed.json', ['malformed JSON', 'Expected double-quoted property name'], '5:1'],
  ['bad-half-written.json', ['malformed JSON', 'Unterminated string'], '3:43'],
  ['bad-empty.json', ['the file is empty', 'half-written'], undefined],
  ['bad-not-object.json', ['must be a JSON object, not an array'], undefined],
  ['bad-wrong-types.json', [SCHEMA_MISMATCH, '/id: must be string', '/permissions: must be array'], '/id'],
  ['bad-unknown-field.json', [SCHEMA_MISMATCH, '/permisions: is not an allowed property'], '/permisions'],
  ['bad-missing-description.json', [SCHEMA_MISMATCH, '/description: is required'], '/description'],
  ['bad-missing-entry-field.json', [SCHEMA_MISMATCH, '/entry: is required'], '/entry'],
  ['bad-unknown-runner.json', [SCHEMA_MISMATCH, '/runner: must be one of "builtin", "js-runner", "py-runner"'], '/runner'],
  ['bad-runner-builtin.json', ['runner "builtin" is reserved', 'use "js-runner" or "py-runner"'], '/runner'],
  ['bad-runner-builtin-entry.json', ['runner "builtin" is reserved'], '/runner'],
  ['bad-builtin-clash.json', ['the id "fs.read" belongs to a builtin tool'], '/id'],
  ['bad-js-without-exec.json', ['runner "js-runner" needs the permission "exec.js"'], '/permissions'],
  ['bad-entry-missing.json', ['entry file "nope.js" was not found in the tools folder'], '/entry'],
  ['bad-entry-dotdot.json', ['must stay inside the tools folder', '"../outside.js"'], '/entry'],
  ['bad-entry-dotdot-inner.json', ['must stay inside the tools folder', '"lib/../../outside.js"'], '/entry'],
  ['bad-entry-symlink.json', ['entry file "link-out.js" is a link that leads outside the tools folder'], '/entry'],
  ['bad-entry-absolute.json', ['must be relative to the tools folder, not an absolute path', '/etc/passwd.js'], '/entry'],
  ['bad-entry-windows.json', ['must be relative to the tools folder, not an absolute path', 'C:\\tools\\evil.py'], '/entry'],
  ['bad-entry-extension.json', ['"entry" of a py-runner tool must end in .py'], '/entry'],
  ['bad-entry-folder.json', ['entry "folder.js" is not a regular file'], '/entry'],
  ['bad-schema-typo.json', ['invalid input schema', 'strict mode: unknown keyword: "requried"'], '/schema/requried'],
  [
    'bad-schema-type.json',
    ['invalid input schema', 'schema is invalid', 'must be one of "array", "boolean", "integer"'],
    '/schema/properties/n/type',
  ],
  ['bad-schema-draft04.json', ['invalid input schema', 'unsupported "$schema"', 'draft-04', 'use draft 2020-12, 2019-09 or draft-07'], '/schema'],
  ['bad-schema-root.json', ['the input schema must have "type": "object" at its root'], '/schema/type'],
  ['bad-schema-ref.json', ['invalid input schema', "can't resolve reference #/$defs/missing"], '/schema'],
  ['bad-output-schema.json', ['invalid output schema', '/minProperties: must be >= 0'], '/output_schema/minProperties'],
  ['bad-id-uppercase.json', [SCHEMA_MISMATCH, '/id: must match pattern'], '/id'],
  ['bad-id-path.json', [SCHEMA_MISMATCH, '/id: must match pattern'], '/id'],
  ['bad-id-empty-segment.json', [SCHEMA_MISMATCH, '/id: must match pattern'], '/id'],
  ['bad-id-empty.json', [SCHEMA_MISMATCH, '/id: must NOT have fewer than 1 characters'], '/id'],
  ['bad-permission.json', [SCHEMA_MISMATCH, '/permissions/1: must match pattern'], '/permissions/1'],
  ['bad-permission-scope.json', ['vfs.read:/docs/../etc/**', 'must not contain "." or ".." segments'], '/permissions/1'],
  ['bad-limits.json', [SCHEMA_MISMATCH, '/limits/timeout_ms: must be <= 600000'], '/limits/timeout_ms'],
  [
    'bad-duplicate-permissions.json',
    ['the key "permissions" appears twice in the top-level object', 'first at 6:3', 'JSON keeps only the last'],
    '8:3',
  ],
  ['bad-duplicate-nested.json', ['the key "maxLength" appears twice in the object at /schema/properties/text', 'first at 10:35'], '10:52'],
  ['bad-id-constructor.json', ['the id "constructor" has the segment "constructor"', 'member every JavaScript object has'], '/id'],
  ['bad-id-prototype-segment.json', ['the segment "hasownproperty"', 'choose another name'], '/id'],
  ['dup-b.json', ['duplicate id "dup.tool"', 'already defined by tools/dup-a.json', 'first file (in name order) wins'], '/id'],
  // Made by beforeAll in the temporary copy:
  ['bad-huge.json', [`over the limit of ${DEFAULT_REGISTRY_LIMITS.max_definition_bytes} bytes`], undefined],
  ['bad-definition-link.json', ['must be a regular file, not a link or folder'], undefined],
];

describe('a tools folder full of malformed definitions', () => {
  test.each(BAD)('%s is reported with its file name and a precise reason', (file, fragments, at) => {
    const problem = problemOf(file);
    for (const fragment of fragments) expect(problem.message).toContain(fragment);
    expect(problem.at).toBe(at);
    expect(problem.stale).toBeUndefined();
  });

  it('names the id the file declares, when it has a readable one', () => {
    expect(problemOf('bad-id-path.json').id).toBe('../x');
    expect(problemOf('bad-builtin-clash.json').id).toBe('fs.read');
    expect(problemOf('dup-b.json').id).toBe('dup.tool');
    expect(problemOf('bad-wrong-types.json').id).toBeUndefined();
  });

  it('reports every bad file and nothing else', () => {
    const reported = problems.map((p) => p.file.replace(/^tools\//, '')).sort();
    expect(reported).toEqual(BAD.map(([file]) => file).sort());
  });

  it('never puts a host path in a report', () => {
    const text = JSON.stringify(problems);
    expect(text).not.toContain(project.workspace);
    expect(text).not.toContain('/tmp/');
  });

  it('still loads every good tool, beside the builtins, with its schema and permissions', () => {
    const own = engine.tools().filter((t) => t.source !== 'builtin');
    expect(own.map((t) => [t.id, t.source])).toEqual([
      ['bom.tool', 'tools/good-bom.json'],
      ['dup.tool', 'tools/dup-a.json'],
      ['list.count', 'tools/good-draft07.json'],
      ['list.count-2019', 'tools/good-2019-09.json'],
      ['text.reverse', 'tools/good-py.json'],
      ['text.upper', 'tools/good-js.json'],
    ]);
    const reverse = engine.tool('text.reverse');
    expect(reverse?.permissions).toEqual(['exec.py', 'vfs.read:/docs/**', 'vfs.write:/out/**']);
    expect(reverse?.limits).toEqual({ timeout_ms: 5000, memory_mb: 64, output_bytes: 65536 });
    expect(reverse?.name).toBe('text.reverse');
    expect(engine.tool('text.upper')?.schema).toMatchObject({ required: ['text'] });
    const builtins = engine.tools().filter((t) => t.source === 'builtin');
    expect(builtins.map((t) => t.id)).toEqual(expect.arrayContaining(['fs.read', 'fs.write', 'fs.list', 'system.hash']));
    for (const b of builtins) {
      expect(b.schema).toMatchObject({ type: 'object' });
      expect(Array.isArray(b.permissions)).toBe(true);
    }
  });

  it('validates calls of good tools against their own draft (07 tuples, 2019-09 unevaluatedProperties)', async () => {
    const tuple = await engine.call('list.count', { items: ['a', 2] });
    expect(tuple.ok ? null : [tuple.error.stage, tuple.error.code, tuple.error.details?.violations]).toEqual([
      'validation',
      'INVALID_INPUT',
      [expect.objectContaining({ pointer: '/items/1', message: 'must be string' })],
    ]);
    const extra = await engine.call('list.count-2019', { items: [], more: 1 });
    expect(extra.ok ? null : [extra.error.code, extra.error.details?.violations]).toEqual([
      'INVALID_INPUT',
      [expect.objectContaining({ pointer: '', keyword: 'unevaluatedProperties' })],
    ]);
  });

  it('never serves a rejected definition', async () => {
    for (const id of [
      'bad.malformed',
      'bad.duplicate-permissions',
      'bad.duplicate-nested',
      'constructor',
      'text.hasownproperty',
      'bad.builtin',
      'bad.huge',
      'bad.entry-symlink',
      'linked.def',
      'Text.Upper',
      '../x',
    ]) {
      const result = await engine.call(id, {});
      expect(result.ok ? null : [result.error.stage, result.error.code]).toEqual(['validation', 'UNKNOWN_TOOL']);
    }
    // The builtin keeps its id: a project file claiming it changes nothing.
    expect(engine.tool('fs.read')?.source).toBe('builtin');
  });
});

describe('registry limits', () => {
  it('applies a lower max_definition_bytes from the engine options', async () => {
    const small = copyFixtureProject('definitions');
    try {
      const e = await openEngine(small, { registryLimits: { max_definition_bytes: 400 } });
      try {
        const p = e.problems().find((x) => x.file === 'tools/good-js.json');
        expect(p?.message).toMatch(/^the file is \d+ bytes, over the limit of 400 bytes/);
        expect(e.tool('text.upper')).toBeUndefined();
        expect(e.tool('text.reverse')).toBeDefined();
      } finally {
        await e.close();
      }
    } finally {
      small.remove();
    }
  });

  it('refuses tools past max_tools and says so', async () => {
    const small = copyFixtureProject('definitions');
    try {
      const e = await openEngine(small, { registryLimits: { max_tools: 2 } });
      try {
        // Files are taken in name order: dup-a.json and good-2019-09.json come first.
        expect(e.tools().flatMap((t) => (t.source === 'builtin' ? [] : [t.id]))).toEqual(['dup.tool', 'list.count-2019']);
        const over = e.problems().filter((p) => p.message.includes('the most one project may define'));
        expect(over.map((p) => p.id).sort()).toEqual(['bom.tool', 'list.count', 'text.reverse', 'text.upper']);
      } finally {
        await e.close();
      }
    } finally {
      small.remove();
    }
  });
});
