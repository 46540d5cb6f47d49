import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';

let root: string;
let engine: Engine;

beforeEach(async () => {
  root = mkdtempSync(join(tmpdir(), 'arium-transfer-'));
  mkdirSync(join(root, 'ws', 'p', 'tools'), { recursive: true });
  mkdirSync(join(root, 'src', 'sub'), { recursive: true });
  mkdirSync(join(root, 'outside'));
  writeFileSync(join(root, 'outside', 'secret.txt'), 'top secret');
  writeFileSync(join(root, 'src', 'a.txt'), 'alpha\n');
  writeFileSync(join(root, 'src', 'sub', 'b.bin'), Buffer.from([0, 255, 1, 254]));
  engine = await createEngine({ workspace: join(root, 'ws'), project: 'p', watch: false, persist: false });
});

afterEach(async () => {
  await engine.close();
  rmSync(root, { recursive: true, force: true });
});

function failure(fn: () => unknown): { code?: string; message: string } {
  try {
    fn();
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('expected a failure');
}

describe('import', () => {
  it('copies files and folders byte for byte', () => {
    const report = engine.importFrom(join(root, 'src'), '/in');
    expect(report).toMatchObject({ files: 2, dirs: 1, bytes: 10, skipped: [] });
    expect(engine.vfs.read('/in/a.txt').toString()).toBe('alpha\n');
    expect([...engine.vfs.read('/in/sub/b.bin')]).toEqual([0, 255, 1, 254]);
  });

  it('never follows a symbolic link, to a file or a folder outside the source', () => {
    symlinkSync(join(root, 'outside', 'secret.txt'), join(root, 'src', 'link.txt'));
    symlinkSync(join(root, 'outside'), join(root, 'src', 'linkdir'));
    const report = engine.importFrom(join(root, 'src'), '/in');
    expect(report.skipped).toEqual([
      { path: 'link.txt', reason: 'symbolic link (never followed)' },
      { path: 'linkdir', reason: 'symbolic link (never followed)' },
    ]);
    expect(engine.vfs.exists('/in/link.txt')).toBe(false);
    expect(engine.vfs.exists('/in/linkdir')).toBe(false);
    const all = engine.vfs.list('/', { recursive: true }).entries.map((e) => e.path);
    expect(all.some((p) => p.includes('secret'))).toBe(false);
  });

  it('refuses a source that is itself a link, or missing, with a clear error', () => {
    symlinkSync(join(root, 'src'), join(root, 'srclink'));
    expect(failure(() => engine.importFrom(join(root, 'srclink'), '/')).message).toContain('is a symbolic link');
    expect(failure(() => engine.importFrom(join(root, 'nope'), '/')).message).toContain('does not exist');
  });

  it('skips host names the VFS cannot hold and says why', () => {
    writeFileSync(join(root, 'src', 'back\\slash.txt'), 'x');
    const report = engine.importFrom(join(root, 'src'), '/in');
    expect(report.skipped).toHaveLength(1);
    expect(report.skipped[0]?.path).toBe('back\\slash.txt');
    expect(report.skipped[0]?.reason).toContain('backslashes');
  });

  it('imports nothing when a quota would be exceeded', async () => {
    const small = await createEngine({ workspace: join(root, 'ws'), project: 'p', watch: false, persist: false, vfsQuota: { max_bytes: 8 } });
    try {
      const error = failure(() => small.importFrom(join(root, 'src'), '/in'));
      expect(error.code).toBe('QUOTA_EXCEEDED');
      expect(small.vfs.list('/').entries).toEqual([]);
    } finally {
      await small.close();
    }
  });
});

describe('export', () => {
  beforeEach(() => {
    engine.importFrom(join(root, 'src'), '/data');
  });

  it('copies a folder out byte for byte, and a single file', () => {
    const report = engine.exportTo('/data', join(root, 'out'));
    expect(report).toMatchObject({ files: 2, dirs: 1, bytes: 10 });
    expect(readFileSync(join(root, 'out', 'a.txt'), 'utf8')).toBe('alpha\n');
    expect([...readFileSync(join(root, 'out', 'sub', 'b.bin'))]).toEqual([0, 255, 1, 254]);
    engine.exportTo('/data/a.txt', join(root, 'one'));
    expect(readdirSync(join(root, 'one'))).toEqual(['a.txt']);
  });

  it('refuses a non-empty target unless overwrite', () => {
    mkdirSync(join(root, 'out'));
    writeFileSync(join(root, 'out', 'keep.txt'), 'keep');
    const refused = failure(() => engine.exportTo('/data', join(root, 'out')));
    expect(refused.code).toBe('ALREADY_EXISTS');
    expect(refused.message).toContain('(pass { overwrite: true } to write into it)');
    engine.exportTo('/data', join(root, 'out'), { overwrite: true });
    expect(readFileSync(join(root, 'out', 'keep.txt'), 'utf8')).toBe('keep');
  });

  it('never writes through a link planted in the target', () => {
    mkdirSync(join(root, 'out'));
    symlinkSync(join(root, 'outside'), join(root, 'out', 'sub'));
    symlinkSync(join(root, 'outside', 'secret.txt'), join(root, 'out', 'a.txt'));
    const error = failure(() => engine.exportTo('/data', join(root, 'out'), { overwrite: true }));
    expect(error.code).toBe('INVALID_PATH');
    expect(error.message).toContain('symbolic link');
    expect(readFileSync(join(root, 'outside', 'secret.txt'), 'utf8')).toBe('top secret');
    expect(existsSync(join(root, 'outside', 'b.bin'))).toBe(false);
  });

  it('says which VFS path is missing', () => {
    const error = failure(() => engine.exportTo('/nope', join(root, 'out')));
    expect(error.code).toBe('NOT_FOUND');
    expect(error.message).toContain('/nope');
  });
});
