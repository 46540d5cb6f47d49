import { describe, expect, it, test } from 'vitest';
import { ToolFailure } from '../src/errors.js';
import { DEFAULT_VFS_QUOTA } from '../src/index.js';
import { baseName, isWithin, normalizePath, parentOf } from '../src/vfs/path.js';
import { Vfs } from '../src/vfs/vfs.js';

const QUOTA = { max_path_length: DEFAULT_VFS_QUOTA.max_path_length, max_name_length: DEFAULT_VFS_QUOTA.max_name_length };

function failure(input: unknown, quota = QUOTA): ToolFailure {
  try {
    normalizePath(input, quota);
  } catch (error) {
    if (error instanceof ToolFailure) return error;
    throw error;
  }
  throw new Error(`${JSON.stringify(input)} was accepted`);
}

describe('paths that normalize', () => {
  test.each([
    ['/', '/'],
    ['/a.txt', '/a.txt'],
    ['a.txt', '/a.txt'],
    ['docs/a.txt', '/docs/a.txt'],
    ['//docs///a.txt', '/docs/a.txt'],
    ['/docs/', '/docs'],
    ['/./docs/./a.txt', '/docs/a.txt'],
    ['/docs/sub/../a.txt', '/docs/a.txt'],
    ['/docs/..', '/'],
    ['/a/b/c/../../d', '/a/d'],
    ['.', '/'],
    ['./x', '/x'],
    ['/...', '/...'],
    ['/..hidden', '/..hidden'],
    ['/.env', '/.env'],
    ['/a b/ünïcødé/日本.txt', '/a b/ünïcødé/日本.txt'],
    ['/a%2fb', '/a%2fb'],
    ['/x%2e%2ey', '/x%2e%2ey'],
    ['/100%', '/100%'],
    ['/C:', '/C:'],
    ['/docs/file:x', '/docs/file:x'],
    [`/${'n'.repeat(255)}`, `/${'n'.repeat(255)}`],
  ])('%j → %j', (input, expected) => {
    expect(normalizePath(input, QUOTA)).toBe(expected);
  });

  it('returns the same answer on the fast path and the full parse', () => {
    // The fast path only takes already-normal plain names; a trailing slash forces the full parse.
    for (const path of ['/a', '/a/b.c', '/A_b-c/d.e.f']) expect(normalizePath(`${path}/`, QUOTA)).toBe(normalizePath(path, QUOTA));
  });
});

describe('paths that are refused', () => {
  // input, code, reason fragment, escape (a SecurityEvent "intrusion" follows when true)
  const REFUSED: Array<[string, 'INVALID_PATH' | 'QUOTA_EXCEEDED', string, boolean]> = [
    ['', 'INVALID_PATH', 'the path is empty', false],
    ['..', 'INVALID_PATH', '".." climbs above the VFS root', true],
    ['/..', 'INVALID_PATH', '".." climbs above the VFS root', true],
    ['/../etc/passwd', 'INVALID_PATH', 'climbs above', true],
    ['/docs/../../etc', 'INVALID_PATH', 'climbs above', true],
    ['a/../../b', 'INVALID_PATH', 'climbs above', true],
    ['/%2e%2e/etc', 'INVALID_PATH', 'is an encoded dot segment', true],
    ['/docs/%2E%2E/x', 'INVALID_PATH', 'is an encoded dot segment', true],
    ['/docs/.%2e/x', 'INVALID_PATH', 'is an encoded dot segment', true],
    ['/docs/%2e/x', 'INVALID_PATH', 'is an encoded dot segment', true],
    ['/a\u0000b', 'INVALID_PATH', 'NUL byte', true],
    ['/etc/passwd\u0000.txt', 'INVALID_PATH', 'NUL byte', true],
    ['C:\\Windows\\System32', 'INVALID_PATH', 'host path syntax', true],
    ['c:/windows', 'INVALID_PATH', 'host path syntax', true],
    ['\\\\server\\share', 'INVALID_PATH', 'host path syntax', true],
    ['file:///etc/passwd', 'INVALID_PATH', 'host path syntax', true],
    ['file:etc/passwd', 'INVALID_PATH', 'host path syntax', true],
    ['..\\..\\etc\\passwd', 'INVALID_PATH', 'backslashes are not path separators', true],
    ['/docs\\%2e%2e\\x', 'INVALID_PATH', 'backslashes', true],
    ['/docs\\a.txt', 'INVALID_PATH', 'backslashes are not path separators', false],
    ['/a\nb', 'INVALID_PATH', 'control character', false],
    ['/a\rb', 'INVALID_PATH', 'control character', false],
    ['/a\tb', 'INVALID_PATH', 'control character', false],
    ['/a\u001bb', 'INVALID_PATH', 'control character', false],
    ['/a\u007fb', 'INVALID_PATH', 'control character', false],
    ['/a\u0085b', 'INVALID_PATH', 'control character', false],
    ['/a\u009bb', 'INVALID_PATH', 'control character', false],
    [`/${'n'.repeat(256)}`, 'QUOTA_EXCEEDED', 'longer than 255 bytes', false],
    [`/${'é'.repeat(128)}`, 'QUOTA_EXCEEDED', 'longer than 255 bytes', false],
    [`/${'dir/'.repeat(1100)}x`, 'QUOTA_EXCEEDED', 'longer than 4096 bytes', false],
  ];

  test.each(REFUSED)('%j → %s (%s)', (input, code, reason, escapes) => {
    const error = failure(input);
    expect([error.stage, error.code]).toEqual(['execution', code]);
    expect(error.message).toContain(reason);
    if (code === 'INVALID_PATH') expect(error.details?.escape).toBe(escapes);
  });

  test.each([
    ['a number', 42],
    ['null', null],
    ['undefined', undefined],
    ['an object', { toString: () => '/etc/passwd' }],
    ['an array', ['/a']],
    ['a Buffer', Buffer.from('/a')],
  ])('a path that is %s is INVALID_PATH', (_name, input) => {
    const error = failure(input);
    expect(error.code).toBe('INVALID_PATH');
    expect(error.details?.reason).toBe('a path must be a string');
  });

  it('clips what it echoes of a huge path', () => {
    const error = failure(`/${'x'.repeat(100_000)}\u0000`);
    expect(error.message.length).toBeLessThan(400);
    expect(String(error.details?.path).length).toBeLessThanOrEqual(201);
  });

  it('counts the path limit in bytes of the normalized path', () => {
    const small = { max_path_length: 10, max_name_length: 255 };
    expect(normalizePath('/a/../123456789', small)).toBe('/123456789');
    expect(failure('/1234567890', small).details).toMatchObject({ limit: 'max_path_length', max: 10 });
  });
});

describe('every Vfs operation normalizes first', () => {
  it('writes and reads the same file through different spellings', () => {
    const vfs = new Vfs();
    vfs.write('docs//sub/./a.txt', 'x');
    expect(vfs.read('/docs/sub/a.txt').toString()).toBe('x');
    expect(vfs.read('/docs/other/../sub/a.txt/').toString()).toBe('x');
    expect(vfs.list('/docs/sub').entries.map((e) => e.path)).toEqual(['/docs/sub/a.txt']);
  });

  test.each(['read', 'stat', 'exists', 'list', 'write', 'mkdir', 'delete'] as const)('%s refuses a path that climbs out', (op) => {
    const vfs = new Vfs();
    const call = () => (op === 'write' ? vfs.write('/../x', 'x') : vfs[op]('/../x'));
    expect(call).toThrow(ToolFailure);
    expect(call).toThrow(/climbs above the VFS root/);
  });

  it('refuses a move from or to a path that climbs out', () => {
    const vfs = new Vfs();
    vfs.write('/a', 'x');
    expect(() => vfs.move('/a', '/../a')).toThrow(/climbs above/);
    expect(() => vfs.move('/../a', '/b')).toThrow(/climbs above/);
    expect(vfs.read('/a').toString()).toBe('x');
  });
});

describe('path helpers', () => {
  it('parentOf, baseName, isWithin', () => {
    expect([parentOf('/'), parentOf('/a'), parentOf('/a/b')]).toEqual(['/', '/', '/a']);
    expect([baseName('/a/b.txt'), baseName('/a')]).toEqual(['b.txt', 'a']);
    expect(isWithin('/docs/a', '/docs')).toBe(true);
    expect(isWithin('/docs', '/docs')).toBe(true);
    expect(isWithin('/docsecret', '/docs')).toBe(false);
    expect(isWithin('/anything', '/')).toBe(true);
  });
});
