import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import type { Engine, EngineOptions, ErrResult, ToolResult } from '../src/index.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';

let project: TempProject;
let engine: Engine;

async function reopen(options: EngineOptions = {}): Promise<Engine> {
  await engine?.close();
  engine = await openEngine(project, options);
  return engine;
}

beforeEach(async () => {
  project = tempProject();
  engine = await openEngine(project);
  engine.vfs.write('/docs/a.txt', 'alpha\nbeta\ngamma\n');
  engine.vfs.write('/docs/sub/b.txt', 'b');
  engine.vfs.write('/bin/blob.dat', Buffer.from([0, 1, 2, 255]));
  engine.vfs.write('/latin1.txt', Buffer.from([0x63, 0x61, 0x66, 0xe9])); // "café" in Latin-1: not UTF-8
  engine.vfs.write('/euro.txt', '€uro'); // 3 bytes for €
});

afterEach(async () => {
  await engine.close();
  project.remove();
});

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

function ok(result: ToolResult): Record<string, unknown> {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data as Record<string, unknown>;
}

const call = (id: string, input: Record<string, unknown>) => engine.call(id, input);

describe('fs.read', () => {
  it('reads UTF-8 text by default', async () => {
    expect(ok(await call('fs.read', { path: '/docs/a.txt' }))).toEqual({
      path: '/docs/a.txt',
      content: 'alpha\nbeta\ngamma\n',
      encoding: 'utf8',
      size: 17,
      offset: 0,
      length: 17,
    });
  });

  it('reads any bytes as base64', async () => {
    expect(ok(await call('fs.read', { path: '/bin/blob.dat', encoding: 'base64' }))).toMatchObject({
      content: 'AAEC/w==',
      encoding: 'base64',
      size: 4,
    });
  });

  test.each([
    [{ offset: 6, length: 4 }, 'beta', 6, 4],
    [{ offset: 6 }, 'beta\ngamma\n', 6, 11],
    [{ length: 5 }, 'alpha', 0, 5],
    [{ offset: 17 }, '', 17, 0],
    [{ offset: 1000 }, '', 17, 0],
    [{ offset: 3, length: 0 }, '', 3, 0],
    [{ offset: 12, length: 1000 }, 'amma\n', 12, 5],
  ])('reads the byte range %j', async (range, content, offset, length) => {
    expect(ok(await call('fs.read', { path: '/docs/a.txt', ...range }))).toMatchObject({ content, offset, length, size: 17 });
  });

  it('reads a base64 range of a binary file', async () => {
    expect(ok(await call('fs.read', { path: '/bin/blob.dat', encoding: 'base64', offset: 3, length: 1 }))).toMatchObject({
      content: '/w==',
      length: 1,
    });
  });

  test.each([
    ['/bin/blob.dat', {}],
    ['/latin1.txt', {}],
    ['/euro.txt', { offset: 1, length: 2 }], // cuts the € in half
  ])('refuses %s %j as text with NOT_TEXT, pointing to base64', async (path, range) => {
    const error = failed(await call('fs.read', { path, ...range }));
    expect([error.stage, error.code]).toEqual(['execution', 'NOT_TEXT']);
    expect(error.message).toContain('read it with "encoding": "base64"');
  });

  it('refuses a file past the output cap with OUTPUT_LIMIT, and reads a range of it', async () => {
    await reopen({ policy: { output_bytes: 2048 } });
    engine.vfs.write('/big.txt', 'x'.repeat(1500));
    engine.vfs.write('/mid.bin', Buffer.alloc(800, 7));
    const error = failed(await call('fs.read', { path: '/big.txt' }));
    expect([error.stage, error.code, error.retryable]).toEqual(['execution', 'OUTPUT_LIMIT', false]);
    expect(error.details).toEqual({ path: '/big.txt', size: 1500, limit_bytes: 2048, hint: 'read a range with offset and length' });
    expect(ok(await call('fs.read', { path: '/big.txt', offset: 500, length: 1000 }))).toMatchObject({ length: 1000 });
    // base64 costs 4/3: 800 bytes fit as text, not as base64.
    expect(failed(await call('fs.read', { path: '/mid.bin', encoding: 'base64' })).code).toBe('OUTPUT_LIMIT');
    expect(ok(await call('fs.read', { path: '/mid.bin', encoding: 'base64', length: 600 }))).toMatchObject({ length: 600 });
  });

  test.each([
    [{ path: '/nope.txt' }, 'execution', 'NOT_FOUND'],
    [{ path: '/docs' }, 'execution', 'IS_A_DIRECTORY'],
    [{ path: '/' }, 'execution', 'IS_A_DIRECTORY'],
    [{ path: '/docs/a.txt/x' }, 'execution', 'NOT_FOUND'],
    [{ path: '/docs/a.txt', offset: -1 }, 'validation', 'INVALID_INPUT'],
    [{ path: '/docs/a.txt', length: 1.5 }, 'validation', 'INVALID_INPUT'],
    [{ path: '/docs/a.txt', encoding: 'hex' }, 'validation', 'INVALID_INPUT'],
    [{ path: '' }, 'validation', 'INVALID_INPUT'],
    [{}, 'validation', 'INVALID_INPUT'],
  ])('%j → %s %s', async (input, stage, code) => {
    const error = failed(await call('fs.read', input));
    expect([error.stage, error.code]).toEqual([stage, code]);
  });
});

describe('fs.write', () => {
  it('creates a file and returns what it did, without a diff unless asked', async () => {
    const data = ok(await call('fs.write', { path: '/plain/note.txt', content: 'hello\n' }));
    expect(data).toEqual({ path: '/plain/note.txt', created: true, size: 6, bytes_written: 6 });
    const again = ok(await call('fs.write', { path: '/plain/note.txt', content: 'hello again\n', diff: false }));
    expect(again).toEqual({ path: '/plain/note.txt', created: false, size: 12, bytes_written: 12 });
    expect(engine.vfs.read('/plain/note.txt').toString()).toBe('hello again\n');
  });

  it('creates a file and returns the diff from nothing when asked', async () => {
    const data = ok(await call('fs.write', { path: '/new/note.txt', content: 'hello\n', diff: true }));
    expect(data).toEqual({
      path: '/new/note.txt',
      created: true,
      size: 6,
      bytes_written: 6,
      diff: '--- /dev/null\n+++ b/new/note.txt\n@@ -0,0 +1,1 @@\n+hello\n',
      added: 1,
      removed: 0,
    });
    expect(engine.vfs.read('/new/note.txt').toString()).toBe('hello\n');
  });

  it('replaces a file and returns the unified diff against its previous content', async () => {
    const data = ok(await call('fs.write', { path: '/docs/a.txt', content: 'alpha\nBETA\ngamma\n', diff: true }));
    expect(data).toMatchObject({ created: false, size: 17, added: 1, removed: 1 });
    expect(data.diff).toBe('--- a/docs/a.txt\n+++ b/docs/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n');
  });

  it('appends, and diffs against what was there', async () => {
    const data = ok(await call('fs.write', { path: '/docs/a.txt', content: 'delta\n', append: true, diff: true }));
    expect(data).toMatchObject({ created: false, size: 23, bytes_written: 6, added: 1, removed: 0 });
    expect(data.diff).toContain('+delta');
    expect(engine.vfs.read('/docs/a.txt').toString()).toBe('alpha\nbeta\ngamma\ndelta\n');
  });

  it('reports an unchanged rewrite with an empty diff', async () => {
    const data = ok(await call('fs.write', { path: '/docs/a.txt', content: 'alpha\nbeta\ngamma\n', diff: true }));
    expect(data).toMatchObject({ created: false, added: 0, removed: 0 });
  });

  it('writes base64 content as bytes and does not diff binary', async () => {
    const data = ok(await call('fs.write', { path: '/bin/new.dat', content: 'AAEC/w==', encoding: 'base64', diff: true }));
    expect(data).toMatchObject({ created: true, size: 4, diff: null, diff_note: 'diff omitted: binary content (0 → 4 bytes)' });
    expect([...engine.vfs.read('/bin/new.dat')]).toEqual([0, 1, 2, 255]);
  });

  test.each(['not base64!', 'abcde', 'AAE=C'])('refuses the base64 %j as validation INVALID_INPUT at /content', async (content) => {
    const error = failed(await call('fs.write', { path: '/x.dat', content, encoding: 'base64' }));
    expect([error.stage, error.code]).toEqual(['validation', 'INVALID_INPUT']);
    expect(error.details?.violations).toEqual([expect.objectContaining({ pointer: '/content', message: 'is not valid base64' })]);
    expect(engine.vfs.exists('/x.dat')).toBe(false);
  });

  it('omits the diff (the old content) from a caller who may write but not read the file', async () => {
    await reopen({ grants: ['vfs.write'] });
    engine.vfs.write('/secret.txt', 'the old secret\n');
    const data = ok(await call('fs.write', { path: '/secret.txt', content: 'new\n', diff: true }));
    expect(data).toEqual({
      path: '/secret.txt',
      created: false,
      size: 4,
      bytes_written: 4,
      diff: null,
      added: 0,
      removed: 0,
      diff_note: 'diff omitted: no vfs.read permission for this path',
    });
    expect(JSON.stringify(data)).not.toContain('old secret');
  });

  it('omits the diff when the read grant does not cover that path', async () => {
    await reopen({ grants: ['vfs.write', 'vfs.read:/public/**'] });
    engine.vfs.write('/private/x.txt', 'old\n');
    expect(ok(await call('fs.write', { path: '/private/x.txt', content: 'new\n', diff: true }))).toMatchObject({ diff: null });
    expect(ok(await call('fs.write', { path: '/public/y.txt', content: 'new\n', diff: true })).diff).toContain('+new');
  });

  test.each([
    [{ path: '/docs/a.txt', content: 'x', overwrite: false }, 'ALREADY_EXISTS'],
    [{ path: '/missing/dir/x.txt', content: 'x', create_parents: false }, 'NOT_FOUND'],
    [{ path: '/docs', content: 'x' }, 'IS_A_DIRECTORY'],
    [{ path: '/', content: 'x' }, 'IS_A_DIRECTORY'],
    [{ path: '/docs/a.txt/inner', content: 'x' }, 'NOT_A_DIRECTORY'],
  ])('%j → execution %s, and nothing changes', async (input, code) => {
    const before = engine.vfs.list('/', { recursive: true });
    const error = failed(await call('fs.write', input));
    expect([error.stage, error.code]).toEqual(['execution', code]);
    expect(engine.vfs.list('/', { recursive: true })).toEqual(before);
  });

  it('creates a file that does not exist yet with overwrite: false', async () => {
    expect(ok(await call('fs.write', { path: '/fresh.txt', content: 'x', overwrite: false }))).toMatchObject({ created: true });
  });
});

describe('fs.list', () => {
  it('lists one folder, sorted, with types and sizes', async () => {
    expect(ok(await call('fs.list', { path: '/docs' }))).toEqual({
      path: '/docs',
      entries: [
        { path: '/docs/a.txt', name: 'a.txt', type: 'file', size: 17 },
        { path: '/docs/sub', name: 'sub', type: 'directory', size: 0 },
      ],
      truncated: false,
    });
  });

  it('lists recursively, and the root by default', async () => {
    const data = ok(await call('fs.list', { recursive: true }));
    expect(data.path).toBe('/');
    expect((data.entries as Array<{ path: string }>).map((e) => e.path)).toEqual([
      '/bin',
      '/bin/blob.dat',
      '/docs',
      '/docs/a.txt',
      '/docs/sub',
      '/docs/sub/b.txt',
      '/euro.txt',
      '/latin1.txt',
    ]);
  });

  it('stops at the limit and says so', async () => {
    const data = ok(await call('fs.list', { path: '/', recursive: true, limit: 3 }));
    expect((data.entries as unknown[]).length).toBe(3);
    expect(data.truncated).toBe(true);
  });

  test.each([
    [{ path: '/nope' }, 'NOT_FOUND'],
    [{ path: '/docs/a.txt' }, 'NOT_A_DIRECTORY'],
  ])('%j → execution %s', async (input, code) => {
    expect(failed(await call('fs.list', input)).code).toBe(code);
  });
});

describe('fs.stat', () => {
  it('describes a file and a folder', async () => {
    const file = ok(await call('fs.stat', { path: '/docs/a.txt' }));
    expect(file).toMatchObject({ path: '/docs/a.txt', type: 'file', size: 17 });
    expect(new Date(file.mtime as string).toISOString()).toBe(file.mtime);
    expect(ok(await call('fs.stat', { path: '/docs/' }))).toMatchObject({ path: '/docs', type: 'directory', size: 0 });
    expect(ok(await call('fs.stat', { path: '/' }))).toMatchObject({ path: '/', type: 'directory' });
  });

  it('says NOT_FOUND for a missing path', async () => {
    expect(failed(await call('fs.stat', { path: '/nope' })).code).toBe('NOT_FOUND');
  });
});

describe('fs.mkdir', () => {
  it('creates a folder and its parents, and succeeds when it exists', async () => {
    expect(ok(await call('fs.mkdir', { path: '/a/b/c' }))).toEqual({ created: true, path: '/a/b/c' });
    expect(engine.vfs.stat('/a/b').type).toBe('directory');
    expect(ok(await call('fs.mkdir', { path: '/a/b/c' }))).toEqual({ created: false, path: '/a/b/c' });
  });

  test.each([
    [{ path: '/p/q', parents: false }, 'NOT_FOUND'],
    [{ path: '/docs/a.txt' }, 'ALREADY_EXISTS'],
    [{ path: '/docs/a.txt/x' }, 'NOT_A_DIRECTORY'],
  ])('%j → execution %s', async (input, code) => {
    expect(failed(await call('fs.mkdir', input)).code).toBe(code);
  });
});

describe('fs.delete', () => {
  it('deletes a file', async () => {
    expect(ok(await call('fs.delete', { path: '/docs/a.txt' }))).toEqual({ deleted: 1, bytes: 17, path: '/docs/a.txt' });
    expect(engine.vfs.exists('/docs/a.txt')).toBe(false);
  });

  it('deletes a folder only with recursive', async () => {
    const error = failed(await call('fs.delete', { path: '/docs' }));
    expect([error.stage, error.code]).toEqual(['execution', 'NOT_EMPTY']);
    expect(engine.vfs.exists('/docs/a.txt')).toBe(true);
    expect(ok(await call('fs.delete', { path: '/docs', recursive: true }))).toEqual({ deleted: 4, bytes: 18, path: '/docs' });
    expect(engine.vfs.exists('/docs')).toBe(false);
  });

  test.each([['/'], ['//'], ['/docs/..'], ['.']])('refuses to delete %j (the root) without allow_root', async (path) => {
    const before = engine.vfs.usage();
    const error = failed(await call('fs.delete', { path, recursive: true }));
    expect([error.stage, error.code]).toEqual(['execution', 'INVALID_PATH']);
    expect(error.message).toContain('pass allow_root: true and recursive: true');
    expect(engine.vfs.usage()).toEqual(before);
  });

  it('empties the root with allow_root and recursive, and not with allow_root alone', async () => {
    expect(failed(await call('fs.delete', { path: '/', allow_root: true })).code).toBe('NOT_EMPTY');
    expect(ok(await call('fs.delete', { path: '/', allow_root: true, recursive: true }))).toMatchObject({ path: '/' });
    expect(engine.vfs.list('/').entries).toEqual([]);
    expect(engine.vfs.usage()).toEqual({ bytes: 0, files: 0, dirs: 0 });
  });

  it('says NOT_FOUND for a missing path', async () => {
    expect(failed(await call('fs.delete', { path: '/nope' })).code).toBe('NOT_FOUND');
  });
});

describe('fs.move', () => {
  it('renames a file', async () => {
    expect(ok(await call('fs.move', { from: '/docs/a.txt', to: '/docs/renamed.txt' }))).toEqual({
      from: '/docs/a.txt',
      to: '/docs/renamed.txt',
      overwritten: false,
    });
    expect(engine.vfs.read('/docs/renamed.txt').toString()).toBe('alpha\nbeta\ngamma\n');
    expect(engine.vfs.exists('/docs/a.txt')).toBe(false);
  });

  it('moves a folder with its contents, creating missing parents', async () => {
    ok(await call('fs.move', { from: '/docs', to: '/archive/2024/docs' }));
    expect(engine.vfs.read('/archive/2024/docs/sub/b.txt').toString()).toBe('b');
    expect(engine.vfs.exists('/docs')).toBe(false);
  });

  it('replaces a file only with overwrite', async () => {
    expect(failed(await call('fs.move', { from: '/euro.txt', to: '/latin1.txt' })).code).toBe('ALREADY_EXISTS');
    expect(ok(await call('fs.move', { from: '/euro.txt', to: '/latin1.txt', overwrite: true }))).toMatchObject({ overwritten: true });
    expect(engine.vfs.read('/latin1.txt').toString()).toBe('€uro');
  });

  test.each([
    [{ from: '/docs', to: '/docs/sub/docs' }, 'INVALID_PATH', 'into itself'],
    [{ from: '/docs', to: '/docs/inside' }, 'INVALID_PATH', 'into itself'],
    [{ from: '/docs/sub', to: '/docs', overwrite: true }, 'INVALID_PATH', 'which contains it'],
    [{ from: '/', to: '/elsewhere' }, 'IS_A_DIRECTORY', 'Cannot move the root'],
    [{ from: '/nope', to: '/x' }, 'NOT_FOUND', '/nope'],
    [{ from: '/euro.txt', to: '/docs', overwrite: true }, 'IS_A_DIRECTORY', 'Cannot replace a directory with a file'],
    [{ from: '/docs/sub', to: '/euro.txt', overwrite: true }, 'NOT_A_DIRECTORY', 'Cannot replace a file with a directory'],
  ])('%j → execution %s, and nothing changes', async (input, code, message) => {
    const before = engine.vfs.list('/', { recursive: true });
    const error = failed(await call('fs.move', input));
    expect([error.stage, error.code]).toEqual(['execution', code]);
    expect(error.message).toContain(message);
    expect(engine.vfs.list('/', { recursive: true })).toEqual(before);
  });

  it('treats a move onto itself as done', async () => {
    expect(ok(await call('fs.move', { from: '/docs/a.txt', to: '/docs/./a.txt' }))).toEqual({
      from: '/docs/a.txt',
      to: '/docs/a.txt',
      overwritten: false,
    });
    expect(engine.vfs.exists('/docs/a.txt')).toBe(true);
  });
});
