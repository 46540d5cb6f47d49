import { describe, expect, it } from 'vitest';
import { ToolFailure } from '../src/errors.js';
import { Vfs } from '../src/vfs/vfs.js';

// The VFS finds nodes by walking memfs's link tree itself and stores and reads a file's buffer
// directly (src/vfs/vfs.ts); without that core it goes through memfs's fs API. The same script of
// operations, good and bad, must give the same answers, the same failures and the same tree both ways.

type Outcome = { ok: unknown } | { code: string; details: unknown };

function attempt(fn: () => unknown): Outcome {
  try {
    const value = fn();
    return { ok: Buffer.isBuffer(value) ? `bytes:${value.toString('base64')}` : strip(value) };
  } catch (error) {
    if (error instanceof ToolFailure) return { code: error.code, details: error.details };
    throw error;
  }
}

/** Times differ between two runs; everything else must match. */
function strip(value: unknown): unknown {
  if (Buffer.isBuffer(value)) return `bytes:${value.toString('base64')}`;
  if (Array.isArray(value)) return value.map(strip);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value)
        .filter(([k]) => k !== 'mtime' && k !== 'birthtime')
        .map(([k, v]) => [k, strip(v)]),
    );
  }
  return value;
}

function script(vfs: Vfs): Outcome[] {
  const out: Outcome[] = [];
  const run = (fn: () => unknown) => out.push(attempt(fn));
  run(() => vfs.write('/a/b/c.txt', 'one\n'));
  run(() => vfs.write('/a/b/c.txt', 'two\n'));
  run(() => vfs.write('/a/b/c.txt', 'three\n', { append: true }));
  run(() => vfs.read('/a/b/c.txt'));
  run(() => vfs.peek('/a/b/c.txt'));
  run(() => vfs.write('/a/b/c.txt', 'x', { exclusive: true }));
  run(() => vfs.write('/a/b/c.txt/d.txt', 'under a file'));
  run(() => vfs.write('/a/b', 'over a folder'));
  run(() => vfs.write('/', 'the root'));
  run(() => vfs.write('/missing/x.txt', 'x', { parents: false }));
  run(() => vfs.read('/a/b'));
  run(() => vfs.read('/a/b/none.txt'));
  run(() => vfs.read('/a/b/c.txt/deeper'));
  run(() => vfs.read('/'));
  run(() => vfs.typeOf('/a'));
  run(() => vfs.typeOf('/a/b/c.txt'));
  run(() => vfs.typeOf('/a/b/c.txt/deeper'));
  run(() => vfs.typeOf('/nothing'));
  run(() => vfs.exists('/a/b/c.txt'));
  run(() => vfs.write('/empty.txt', ''));
  run(() => vfs.read('/empty.txt'));
  run(() => vfs.write('/empty.txt', Buffer.from([0, 1, 2, 255])));
  run(() => vfs.read('/empty.txt'));
  run(() => vfs.write('/empty.txt', ''));
  run(() => vfs.stat('/empty.txt'));
  run(() => vfs.move('/a/b/c.txt', '/moved/c.txt'));
  run(() => vfs.read('/moved/c.txt'));
  run(() => vfs.read('/a/b/c.txt'));
  run(() => vfs.mkdir('/a/b/c.txt'));
  run(() => vfs.write('/a/b/c.txt', 'again')); // a folder now
  run(() => vfs.list('/', { recursive: true }));
  run(() => vfs.delete('/a', { recursive: true }));
  run(() => vfs.typeOf('/a/b/c.txt'));
  run(() => vfs.usage());
  return out;
}

describe('the VFS on memfs core access and on the fs API', () => {
  it('gives the same answers, failures and tree for the same operations', () => {
    const direct = new Vfs();
    const api = new Vfs({}, { direct: false });
    const a = script(direct);
    const b = script(api);
    expect(a).toEqual(b);
    // The script reached both kinds of outcome, so the comparison is not of two empty lists.
    expect(a.filter((o) => 'code' in o).map((o) => (o as { code: string }).code)).toEqual([
      'ALREADY_EXISTS',
      'NOT_A_DIRECTORY',
      'IS_A_DIRECTORY',
      'IS_A_DIRECTORY',
      'NOT_FOUND',
      'IS_A_DIRECTORY',
      'NOT_FOUND',
      'NOT_FOUND',
      'IS_A_DIRECTORY',
      'NOT_FOUND',
      'IS_A_DIRECTORY',
    ]);
  });

  it('hands a write the previous content, and a reader a copy it may change freely', () => {
    for (const vfs of [new Vfs(), new Vfs({}, { direct: false })]) {
      vfs.write('/f.txt', 'first');
      const outcome = vfs.write('/f.txt', 'second');
      expect(outcome.previous?.toString()).toBe('first');
      const copy = vfs.read('/f.txt');
      copy.fill(0x78);
      expect(vfs.read('/f.txt').toString()).toBe('second');
      expect(vfs.peek('/f.txt').toString()).toBe('second');
    }
  });

  it('keeps a stored buffer as given: a later write replaces it, never changes it', () => {
    const vfs = new Vfs();
    const given = Buffer.from('kept as it was');
    vfs.write('/k.txt', given);
    const held = vfs.peek('/k.txt');
    vfs.write('/k.txt', 'replaced');
    vfs.write('/k.txt', ' and appended', { append: true });
    expect(held.toString()).toBe('kept as it was');
    expect(vfs.read('/k.txt').toString()).toBe('replaced and appended');
  });
});
