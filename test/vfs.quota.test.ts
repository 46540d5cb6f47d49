import { afterEach, describe, expect, it } from 'vitest';
import type { Engine, ErrResult, ToolResult, VfsQuota } from '../src/index.js';
import { deferred, definition, FakeRunner, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

async function open(vfsQuota: Partial<VfsQuota>, behaviours: ConstructorParameters<typeof FakeRunner>[0] = {}) {
  const files: Record<string, string> = { 'tool.js': TRIVIAL_JS };
  for (const id of Object.keys(behaviours)) files[`${id}.json`] = definition({ id, permissions: ['exec.js', 'vfs.read', 'vfs.write'] });
  project = tempProject(files);
  engine = await openEngine(project, { vfsQuota, runners: [new FakeRunner(behaviours)] });
  return engine;
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

/** Everything observable about the tree: refused changes must leave it exactly as it was. */
function tree(engine: Engine) {
  return {
    usage: engine.vfs.usage(),
    entries: engine.vfs.list('/', { recursive: true }).entries.map((e) => [e.path, e.type, e.size]),
  };
}

const write = (engine: Engine, path: string, content: string, extra: Record<string, unknown> = {}) =>
  engine.call('fs.write', { path, content, ...extra });

describe('QUOTA_EXCEEDED', () => {
  it('on total bytes, counting what a file replaces', async () => {
    const engine = await open({ max_bytes: 100 });
    expect((await write(engine, '/a.txt', 'a'.repeat(60))).ok).toBe(true);
    const before = tree(engine);
    const error = failed(await write(engine, '/b.txt', 'b'.repeat(50)));
    expect(error).toMatchObject({ stage: 'execution', code: 'QUOTA_EXCEEDED', retryable: false });
    expect(error.details).toEqual({ path: '/b.txt', limit: 'max_bytes', max: 100 });
    expect(error.message).toContain('over its quota of 100');
    expect(tree(engine)).toEqual(before);
    // Replacing 60 bytes with 90 adds only 30.
    expect((await write(engine, '/a.txt', 'a'.repeat(90))).ok).toBe(true);
    expect(engine.vfs.usage().bytes).toBe(90);
    // Appending past the quota changes nothing.
    const after = tree(engine);
    expect(failed(await write(engine, '/a.txt', 'a'.repeat(20), { append: true })).code).toBe('QUOTA_EXCEEDED');
    expect(tree(engine)).toEqual(after);
    expect(engine.vfs.read('/a.txt').length).toBe(90);
  });

  it('on the size of one file', async () => {
    const engine = await open({ max_file_bytes: 10 });
    const error = failed(await write(engine, '/big.bin', 'x'.repeat(11)));
    expect(error.details).toEqual({ path: '/big.bin', limit: 'max_file_bytes', max: 10 });
    expect(engine.vfs.exists('/big.bin')).toBe(false);
  });

  it('on the number of files and folders, counting the parents a write creates', async () => {
    const engine = await open({ max_files: 3 });
    expect((await write(engine, '/a', '1')).ok).toBe(true);
    expect((await write(engine, '/b', '2')).ok).toBe(true);
    const before = tree(engine);
    const error = failed(await write(engine, '/dir/c', '3'));
    expect(error.details).toEqual({ path: '/dir/c', limit: 'max_files', max: 3 });
    expect(tree(engine)).toEqual(before);
    expect(engine.vfs.exists('/dir')).toBe(false);
    expect(failed(await engine.call('fs.mkdir', { path: '/x/y' })).code).toBe('QUOTA_EXCEEDED');
    expect(tree(engine)).toEqual(before);
    expect((await engine.call('fs.mkdir', { path: '/x' })).ok).toBe(true);
    expect(engine.vfs.usage().files).toBe(3);
  });

  it('on path length and name length, before anything is touched', async () => {
    const engine = await open({ max_path_length: 32, max_name_length: 8 });
    const before = tree(engine);
    const long = failed(await write(engine, '/abcdefg/abcdefg/abcdefg/abcdefg/x', 'x'));
    expect([long.stage, long.code]).toEqual(['execution', 'QUOTA_EXCEEDED']);
    expect(long.details).toMatchObject({ limit: 'max_path_length', max: 32 });
    const name = failed(await write(engine, '/abcdefghi', 'x'));
    expect(name.details).toMatchObject({ limit: 'max_name_length', max: 8 });
    expect(failed(await engine.call('fs.mkdir', { path: '/ok/abcdefghi' })).code).toBe('QUOTA_EXCEEDED');
    expect(tree(engine)).toEqual(before);
  });

  it('counts moved folders that need new parents', async () => {
    const engine = await open({ max_files: 2 });
    expect((await write(engine, '/a', '1')).ok).toBe(true);
    const before = tree(engine);
    expect(failed(await engine.call('fs.move', { from: '/a', to: '/p/q/a' })).code).toBe('QUOTA_EXCEEDED');
    expect(tree(engine)).toEqual(before);
  });

  it('gives room back when files are deleted', async () => {
    const engine = await open({ max_bytes: 10, max_files: 2 });
    expect((await write(engine, '/a', 'x'.repeat(10))).ok).toBe(true);
    expect(failed(await write(engine, '/b', 'y')).code).toBe('QUOTA_EXCEEDED');
    expect((await engine.call('fs.delete', { path: '/a' })).ok).toBe(true);
    expect(engine.vfs.usage()).toMatchObject({ bytes: 0, files: 0 });
    expect((await write(engine, '/b', 'y'.repeat(10))).ok).toBe(true);
  });

  it('refuses a whole call when its writes together pass the quota: none of them remains', async () => {
    const engine = await open(
      { max_bytes: 100 },
      {
        'two.writes': (ctx) => {
          ctx.vfs.write('/first.txt', 'x'.repeat(60));
          ctx.vfs.write('/second.txt', 'x'.repeat(60));
          return 'unreachable';
        },
      },
    );
    const error = failed(await engine.call('two.writes', {}));
    expect([error.stage, error.code]).toEqual(['execution', 'QUOTA_EXCEEDED']);
    expect(error.details).toMatchObject({ path: '/second.txt', limit: 'max_bytes' });
    expect(tree(engine)).toEqual({ usage: { bytes: 0, files: 0, dirs: 0 }, entries: [] });
  });

  it('refuses the later of two concurrent calls that each fit but not together', async () => {
    const gate = deferred();
    const engine = await open(
      { max_bytes: 100 },
      {
        'slow.write': async (ctx) => {
          ctx.vfs.write('/slow.txt', 's'.repeat(60));
          await gate.promise;
          return 'slow';
        },
        'fast.write': (ctx) => {
          ctx.vfs.write('/fast.txt', 'f'.repeat(60));
          return 'fast';
        },
      },
    );
    const slow = engine.call('slow.write', {});
    expect(await engine.call('fast.write', {})).toMatchObject({ ok: true });
    const before = tree(engine);
    gate.resolve();
    const error = failed(await slow);
    expect([error.stage, error.code]).toEqual(['execution', 'QUOTA_EXCEEDED']);
    expect(tree(engine)).toEqual(before);
    expect(engine.vfs.exists('/slow.txt')).toBe(false);
  });

  it('on what one call writes in all (max_call_bytes), also over the same file again and again', async () => {
    const engine = await open(
      { max_call_bytes: 1000 },
      {
        rewrite: (ctx) => {
          for (let i = 0; i < 20; i++) ctx.vfs.write('/same.txt', String(i).repeat(100));
          return 'done';
        },
        fits: (ctx) => {
          for (let i = 0; i < 9; i++) ctx.vfs.write('/same.txt', String(i).repeat(100));
          return 'done';
        },
      },
    );
    const before = tree(engine);
    const error = failed(await engine.call('rewrite', {}));
    expect(error).toMatchObject({ stage: 'execution', code: 'QUOTA_EXCEEDED', details: { path: '/same.txt', limit: 'max_call_bytes', max: 1000 } });
    expect(error.message).toContain('This call would have written 1200 bytes in all, over the 1000 one call may write (max_call_bytes)');
    expect(tree(engine)).toEqual(before);
    // The bound is per call: the next call starts from nothing, and the host's own changes are not bounded by it.
    expect(await engine.call('fits', {})).toMatchObject({ ok: true });
    expect(await engine.call('fits', {})).toMatchObject({ ok: true });
    engine.vfs.write('/host.bin', Buffer.alloc(5000));
    expect(engine.vfs.stat('/host.bin').size).toBe(5000);
    expect(failed(await write(engine, '/big.txt', 'b'.repeat(1001)))).toMatchObject({ code: 'QUOTA_EXCEEDED', details: { limit: 'max_call_bytes' } });
  });
});
