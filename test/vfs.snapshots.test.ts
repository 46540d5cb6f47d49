import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';
import { ObjectStore } from '../src/store/objects.js';
import { restore } from '../src/vfs/history.js';
import { VfsState } from '../src/vfs/state.js';
import { failure } from './support/project.js';

let workspace: string;
let engine: Engine;

const open = (options: { policy?: { output_bytes: number } } = {}) => createEngine({ workspace, project: 'p', watch: false, ...options });
const objectsDir = () => join(workspace, 'p', '.arium', 'objects');

beforeEach(async () => {
  workspace = mkdtempSync(join(tmpdir(), 'arium-snap-'));
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  engine = await open();
});

afterEach(async () => {
  await engine.close();
  rmSync(workspace, { recursive: true, force: true });
});

function fingerprint(e: Engine): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of e.vfs.list('/', { recursive: true }).entries) {
    out[entry.path] = entry.type === 'directory' ? 'dir' : createHash('sha256').update(e.vfs.read(entry.path)).digest('hex');
  }
  return out;
}

/**
 * Every object the project's store holds durably (name → stored size): what a reader opening it now
 * finds in its object files, packs and journal (a snapshot's few new objects stay in its journal
 * record until the next checkpoint writes them to the object files).
 */
function objects(): Map<string, number> {
  const out = new Map<string, number>();
  if (!existsSync(objectsDir())) return out;
  const state = new VfsState({ dir: join(workspace, 'p', '.arium'), readOnly: true });
  try {
    for (const hash of state.objects.list()) out.set(hash, state.objects.size(hash));
  } finally {
    state.close();
  }
  return out;
}

/** How many deltas a stored tree is away from one stored whole (0 for a whole tree or a blob). */
function deltaDepth(hash: string): number {
  const state = new VfsState({ dir: join(workspace, 'p', '.arium'), readOnly: true });
  try {
    let depth = 0;
    for (let base = state.objects.baseOf(hash); base !== null; base = state.objects.baseOf(base)) depth++;
    return depth;
  } finally {
    state.close();
  }
}

const storeBytes = () => [...objects().values()].reduce((a, b) => a + b, 0);
const blobExists = (content: string | Buffer) =>
  objects().has(ObjectStore.hash('blob', typeof content === 'string' ? Buffer.from(content) : content));
const lines = (n: number, tag = 'line') => `${Array.from({ length: n }, (_, i) => `${tag} ${i + 1}`).join('\n')}\n`;

describe('snapshot, log, restore through the API', () => {
  it('a snapshot records the tree with its label, message and counts, and survives a restart', async () => {
    engine.vfs.write('/docs/a.md', 'hello\n');
    engine.vfs.write('/bin/x.dat', Buffer.from([0, 1, 2]));
    engine.vfs.mkdir('/empty');
    const snap = engine.snapshot({ label: 'v1', message: 'first version' });
    expect(snap).toMatchObject({ label: 'v1', message: 'first version', files: 2, dirs: 3, bytes: 9 });
    expect(snap.id).toMatch(/^[0-9a-f]{12}$/);
    expect(snap.root).toMatch(/^[0-9a-f]{64}$/);
    expect(Date.parse(snap.at)).not.toBeNaN();
    const second = engine.snapshot();
    expect(second).toMatchObject({ label: null, message: null, root: snap.root });
    expect(second.id).not.toBe(snap.id);
    expect(engine.snapshots()).toEqual([snap, second]);
    await engine.close();
    engine = await open();
    expect(engine.snapshots()).toEqual([snap, second]);
  });

  it('restore brings the tree back (files, binary, empty folders) and saves the live tree first, so it can be undone', async () => {
    engine.vfs.write('/docs/a.md', 'version 1\n');
    engine.vfs.write('/bin/x.dat', Buffer.from([0, 255, 0]));
    engine.vfs.mkdir('/empty/inner');
    const v1 = engine.snapshot({ label: 'v1' });
    const fp1 = fingerprint(engine);
    engine.vfs.write('/docs/a.md', 'version 2\n');
    engine.vfs.write('/docs/new.md', 'new\n');
    engine.vfs.delete('/bin', { recursive: true });
    engine.vfs.delete('/empty', { recursive: true });
    engine.vfs.mkdir('/only-in-2');
    const fp2 = fingerprint(engine);

    const result = engine.restore('v1');
    expect(fingerprint(engine)).toEqual(fp1);
    expect(result.restored).toEqual(v1);
    expect(result.backup).toMatchObject({ label: 'before-restore', message: `live tree before restoring ${v1.id}` });
    expect(result).toMatchObject({ written: 2, deleted: 2 });

    const undo = engine.restore(result.backup?.id as string);
    expect(fingerprint(engine)).toEqual(fp2);
    // The live tree equalled a snapshot (v1) when undoing: no second backup.
    expect(undo.backup).toBeNull();
    expect(engine.snapshots().map((s) => s.label)).toEqual(['v1', 'before-restore']);

    // Restored state is durable like any other change.
    await engine.close();
    engine = await open();
    expect(fingerprint(engine)).toEqual(fp2);
  });

  it('restoring the snapshot the tree already equals changes nothing and takes no backup', () => {
    engine.vfs.write('/a.txt', 'a');
    engine.snapshot({ label: 'here' });
    expect(engine.restore('here')).toMatchObject({ backup: null, written: 0, deleted: 0 });
    expect(engine.snapshots()).toHaveLength(1);
  });

  it('finds snapshots by id, unique prefix, label (the newest) and "latest"', () => {
    engine.vfs.write('/a.txt', '1');
    const one = engine.snapshot({ label: 'same' });
    engine.vfs.write('/a.txt', '2');
    engine.snapshot({ label: 'same' });
    engine.vfs.write('/a.txt', '3');
    const check = (ref: string, expected: string) => {
      engine.restore(ref);
      expect(engine.vfs.read('/a.txt').toString()).toBe(expected);
    };
    check(one.id, '1');
    check('same', '2');
    check(one.id.slice(0, 6), '1');
    // The newest snapshot is now the backup the first restore took of the live tree, which held "3".
    check('latest', '3');
  });

  it('unknown snapshot ids and ambiguous prefixes are NOT_FOUND with a message that says what to do', async () => {
    engine.vfs.write('/a.txt', 'a');
    const real = engine.snapshot();
    const unknown = failure(() => engine.restore('nope'));
    expect(unknown.code).toBe('NOT_FOUND');
    expect(unknown.message).toBe('Unknown snapshot: no snapshot has the id or label "nope" (list them with vfs.log / arium log)');
    expect(unknown.details).toEqual({ snapshot: 'nope', known: 1 });
    expect(failure(() => engine.diff('nope', 'live')).code).toBe('NOT_FOUND');
    expect(failure(() => engine.restore('live')).code).toBe('NOT_FOUND');
    // Two snapshots whose ids share a prefix (written into the log as a crafted pair).
    await engine.close();
    const log = join(workspace, 'p', '.arium', 'snapshots.jsonl');
    const record = JSON.parse(readFileSync(log, 'utf8').trim()) as { id: string };
    writeFileSync(
      log,
      `${[real, { ...record, id: 'abcd00000001', label: 'x1' }, { ...record, id: 'abcd00000002', label: 'x2' }].map((r) => JSON.stringify(r)).join('\n')}\n`,
    );
    engine = await open();
    const ambiguous = failure(() => engine.restore('abcd'));
    expect(ambiguous.code).toBe('NOT_FOUND');
    expect(ambiguous.message).toContain('the prefix "abcd" matches 2 snapshots; give more characters');
    expect(failure(() => engine.restore('abc')).message).toContain('no snapshot has the id or label "abc"');
    expect(engine.restore('abcd00000002').restored.label).toBe('x2');
  });

  it('a call still running when the tree is restored commits on the restored tree, or fails with CONFLICT', () => {
    const state = new VfsState({ dir: null });
    const setup = state.begin();
    setup.write('/keep/a.txt', 'a');
    state.commit(setup);
    const base = state.snapshot({ label: 'base' });
    const later = state.begin();
    later.write('/dir/x.txt', 'x');
    state.commit(later);
    const writesRoot = state.begin();
    writesRoot.write('/new.txt', 'new');
    const writesIntoDir = state.begin();
    writesIntoDir.write('/dir/y.txt', 'y');
    restore(state, base.id);
    state.commit(writesRoot);
    expect(state.vfs.read('/new.txt').toString()).toBe('new');
    const conflict = failure(() => state.commit(writesIntoDir));
    expect(conflict.code).toBe('CONFLICT');
    expect(state.vfs.exists('/dir')).toBe(false);
  });
});

describe('restore inside a call', () => {
  it('is part of the call: when the call fails after restoring, nothing of the restore remains', async () => {
    engine.vfs.write('/a.txt', 'v1\n');
    engine.snapshot({ label: 'v1' });
    engine.vfs.write('/a.txt', 'v2\n');
    engine.vfs.write('/b.txt', 'new\n');
    const before = fingerprint(engine);
    await engine.close();
    engine = await open({ policy: { output_bytes: 64 } }); // the restore's result cannot fit
    const result = await engine.call('vfs.restore', { snapshot: 'v1' });
    expect(result.ok ? null : result.error.code).toBe('OUTPUT_LIMIT');
    expect(fingerprint(engine)).toEqual(before);
    await engine.close();
    engine = await open();
    expect(fingerprint(engine)).toEqual(before);
  });

  it('commits only onto the tree it was computed against, else CONFLICT', () => {
    const state = new VfsState({ dir: null });
    const setup = state.begin();
    setup.write('/a.txt', 'a');
    state.commit(setup);
    const basis = state.changes;
    const restoring = state.begin();
    restoring.write('/a.txt', 'as in the snapshot');
    restoring.basis = basis;
    const other = state.begin();
    other.write('/elsewhere.txt', 'x');
    state.commit(other);
    expect(failure(() => state.commit(restoring))).toMatchObject({ code: 'CONFLICT', message: expect.stringContaining('retry the restore') });
    expect(state.vfs.read('/a.txt').toString()).toBe('a');
  });
});

describe('snapshot builtins', () => {
  it('vfs.snapshot, vfs.log, vfs.diff and vfs.restore work through calls, and restore says how to undo', async () => {
    engine.vfs.write('/src/a.txt', 'one\n');
    const snap = await engine.call('vfs.snapshot', { label: 'v1', message: 'start' });
    expect(snap.ok ? snap.data : snap.error).toMatchObject({ label: 'v1', message: 'start', files: 1, dirs: 1 });
    engine.vfs.write('/src/a.txt', 'two\n');
    await engine.call('vfs.snapshot', { label: 'v2' });
    const log = await engine.call('vfs.log', { limit: 1 });
    expect(log.ok ? log.data : log.error).toMatchObject({ total: 2, snapshots: [{ label: 'v2' }] });
    const diff = await engine.call('vfs.diff', { from: 'v1', to: 'v2' });
    expect(diff.ok ? diff.data : diff.error).toMatchObject({
      from: { ref: 'v1', snapshot: { label: 'v1' } },
      to: { ref: 'v2', snapshot: { label: 'v2' } },
      files: [{ path: '/src/a.txt', status: 'modified', lines_added: 1, lines_removed: 1 }],
    });
    engine.vfs.write('/src/a.txt', 'three\n');
    const restored = await engine.call('vfs.restore', { snapshot: 'v1' });
    if (!restored.ok) throw new Error(restored.error.message);
    const data = restored.data as { backup: { id: string }; undo: string };
    expect(data.undo).toBe(`restore snapshot ${data.backup.id}`);
    expect(engine.vfs.read('/src/a.txt').toString()).toBe('one\n');
    const undone = await engine.call('vfs.restore', { snapshot: data.backup.id });
    expect(undone.ok).toBe(true);
    expect(engine.vfs.read('/src/a.txt').toString()).toBe('three\n');
  });

  it('unknown ids are NOT_FOUND results', async () => {
    const result = await engine.call('vfs.restore', { snapshot: 'deadbeef' });
    expect(result.ok ? null : result.error).toMatchObject({
      code: 'NOT_FOUND',
      stage: 'execution',
      retryable: false,
      message: 'Unknown snapshot: no snapshot has the id or label "deadbeef" (list them with vfs.log / arium log)',
    });
    const diff = await engine.call('vfs.diff', { from: 'deadbeef' });
    expect(diff.ok ? null : diff.error.code).toBe('NOT_FOUND');
  });

  it('whole-tree operations need their permission on / itself', async () => {
    engine.vfs.write('/docs/a.txt', 'a');
    engine.snapshot({ label: 'v1' });
    for (const [tool, input, grants] of [
      ['vfs.snapshot', {}, ['vfs.read:/docs/**']],
      ['vfs.diff', {}, ['vfs.read:/docs/**']],
      ['vfs.restore', { snapshot: 'v1' }, ['vfs.read', 'vfs.write:/docs/**']],
    ] as const) {
      const result = await engine.call(tool, input, { grants: [...grants] });
      expect(result.ok ? null : result.error.code).toBe('DENIED');
    }
    expect(engine.snapshots()).toHaveLength(1);
  });
});

describe('diffs', () => {
  const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);

  function scenario(): string {
    engine.vfs.write('/src/a.ts', lines(10));
    engine.vfs.write('/src/b.ts', 'unchanged\n');
    engine.vfs.write('/img/logo.png', PNG);
    engine.vfs.write('/old/name.txt', 'same content\n');
    engine.vfs.write('/del.txt', 'gone 1\ngone 2\n');
    const id = engine.snapshot({ label: 'before' }).id;
    engine.vfs.write('/src/a.ts', lines(10).replace('line 3\n', 'LINE 3\n'));
    engine.vfs.write('/src/c.ts', 'export const c = 1;\n');
    engine.vfs.delete('/del.txt');
    engine.vfs.move('/old/name.txt', '/new/name.txt');
    engine.vfs.write('/img/logo.png', Buffer.concat([PNG, Buffer.from([0, 1])]));
    return id;
  }

  it('reports added, modified, deleted and renamed files with unified patches and statistics', () => {
    const id = scenario();
    const d = engine.diff(id, 'live');
    expect(d.from).toMatchObject({ ref: id, snapshot: { label: 'before' } });
    expect(d.to).toEqual({ ref: 'live', snapshot: null });
    expect(d.files.map((f) => [f.path, f.status, f.from ?? null])).toEqual([
      ['/del.txt', 'deleted', null],
      ['/img/logo.png', 'modified', null],
      ['/new/name.txt', 'renamed', '/old/name.txt'],
      ['/src/a.ts', 'modified', null],
      ['/src/c.ts', 'added', null],
    ]);
    const byPath = new Map(d.files.map((f) => [f.path, f]));
    expect(byPath.get('/src/a.ts')?.patch).toBe(
      '--- a/src/a.ts\n+++ b/src/a.ts\n@@ -1,6 +1,6 @@\n line 1\n line 2\n-line 3\n+LINE 3\n line 4\n line 5\n line 6\n',
    );
    expect(byPath.get('/src/c.ts')?.patch).toContain('--- /dev/null\n+++ b/src/c.ts\n@@ -0,0 +1,1 @@\n+export const c = 1;');
    expect(byPath.get('/del.txt')).toMatchObject({ lines_removed: 2, size_before: 14, size_after: 0 });
    expect(byPath.get('/new/name.txt')).toMatchObject({ patch: null, size_before: 13, size_after: 13, lines_added: 0 });
    expect(d.stats).toEqual({ files_changed: 5, added: 1, modified: 2, deleted: 1, renamed: 1, lines_added: 2, lines_removed: 3 });
    expect(d.note).toBeUndefined();
  });

  it('summarizes binary files instead of dumping them', () => {
    const id = scenario();
    const logo = engine.diff(id, 'live').files.find((f) => f.path === '/img/logo.png');
    expect(logo).toMatchObject({ binary: true, patch: null, note: 'binary content (12 → 14 bytes)', lines_added: 0, lines_removed: 0 });
  });

  it('filters by path glob, matching a rename by either path', () => {
    const id = scenario();
    const src = engine.diff(id, 'live', { path: '/src/**' });
    expect(src.files.map((f) => f.path)).toEqual(['/src/a.ts', '/src/c.ts']);
    expect(src.stats).toMatchObject({ files_changed: 2, added: 1, modified: 1, lines_added: 2, lines_removed: 1 });
    expect(engine.diff(id, 'live', { path: '/old/**' }).files.map((f) => f.path)).toEqual(['/new/name.txt']);
    expect(engine.diff(id, 'live', { path: '/*.txt' }).files.map((f) => f.path)).toEqual(['/del.txt']);
    const bad = failure(() => engine.diff(id, 'live', { path: 'src/**' }));
    expect(bad).toMatchObject({ code: 'INVALID_INPUT', stage: 'validation' });
    expect(bad.message).toContain('must be an absolute VFS glob such as /src/**');
  });

  it('stat_only leaves the patches out but keeps the counts', () => {
    const id = scenario();
    const full = engine.diff(id, 'live');
    const stat = engine.diff(id, 'live', { stat_only: true });
    expect(stat.files.every((f) => f.patch === null)).toBe(true);
    expect(stat.stats).toEqual(full.stats);
    expect(stat.files.map((f) => [f.path, f.lines_added, f.lines_removed])).toEqual(full.files.map((f) => [f.path, f.lines_added, f.lines_removed]));
  });

  it('a large file asked for its counts and then its patch gives the same answer, and a changed file a new one', () => {
    const lines = (tag: string) => `${Array.from({ length: 2000 }, (_, i) => `${tag} line ${i}`).join('\n')}\n`;
    engine.vfs.write('/big.txt', lines('old'));
    const id = engine.snapshot({ label: 'big' }).id;
    engine.vfs.write('/big.txt', lines('new'));
    const stat = engine.diff(id, 'live', { stat_only: true }).files[0];
    const file = engine.diff(id, 'live', { file: '/big.txt' }).files[0];
    expect([stat?.lines_added, stat?.lines_removed, stat?.patch]).toEqual([2000, 2000, null]);
    expect([file?.lines_added, file?.lines_removed]).toEqual([2000, 2000]);
    expect(file?.patch).toContain('+new line 1999');
    engine.vfs.write('/big.txt', lines('newer'));
    const again = engine.diff(id, 'live', { file: '/big.txt' }).files[0];
    expect(again?.patch).toContain('+newer line 1999');
    expect(again?.patch).not.toContain('+new line 1999');
  });

  it('compares any two of snapshots and the live tree; the default is newest snapshot → live, or empty → live', () => {
    engine.vfs.write('/a.txt', 'a\n');
    const first = engine.diff();
    expect(first.from.ref).toBe('empty');
    expect(first.files.map((f) => [f.path, f.status])).toEqual([['/a.txt', 'added']]);
    const s1 = engine.snapshot({ label: 's1' });
    engine.vfs.write('/b.txt', 'b\n');
    const s2 = engine.snapshot({ label: 's2' });
    engine.vfs.delete('/a.txt');
    expect(engine.diff().files.map((f) => [f.path, f.status])).toEqual([['/a.txt', 'deleted']]);
    expect(engine.diff('s1', 's2').files.map((f) => [f.path, f.status])).toEqual([['/b.txt', 'added']]);
    expect(engine.diff(s2.id, s1.id).files.map((f) => [f.path, f.status])).toEqual([['/b.txt', 'deleted']]);
    expect(engine.diff('live', 's1').files.map((f) => [f.path, f.status])).toEqual([
      ['/a.txt', 'added'],
      ['/b.txt', 'deleted'],
    ]);
    expect(engine.diff('s2', 's2').files).toEqual([]);
  });

  it('bounds a huge diff with a note, and says which patches were left out', () => {
    for (let i = 0; i < 12; i++) engine.vfs.write(`/big/f${String(i).padStart(2, '0')}.txt`, lines(200, `old ${i}`));
    const id = engine.snapshot().id;
    for (let i = 0; i < 12; i++) engine.vfs.write(`/big/f${String(i).padStart(2, '0')}.txt`, lines(200, `new ${i}`));
    const d = engine.diff(id, 'live', { max_patch_chars: 20_000 });
    expect(d.note).toBe('some patches were left out: the diff is capped at 20000 characters (filter by path to see them)');
    const kept = d.files.filter((f) => f.patch !== null);
    const left = d.files.filter((f) => f.patch === null);
    expect(kept.length).toBeGreaterThan(0);
    expect(left.length).toBeGreaterThan(0);
    expect(kept.reduce((n, f) => n + (f.patch?.length ?? 0), 0)).toBeLessThanOrEqual(20_000);
    for (const f of left) expect(f.note).toBe('patch left out: the diff reached its output limit');
    // Counts stay complete even where the patch was left out.
    expect(d.stats).toMatchObject({ files_changed: 12, lines_added: 2400, lines_removed: 2400 });
    // A file too large to diff line by line is summarized.
    engine.vfs.write('/huge.txt', 'x'.repeat(2 * 1024 * 1024));
    const huge = engine.diff(id, 'live', { path: '/huge.txt' }).files[0];
    expect(huge).toMatchObject({ status: 'added', patch: null, binary: false, note: 'file larger than 1048576 bytes; not diffed line by line' });
  });

  it('through vfs.diff, a huge diff still fits the output limit', async () => {
    await engine.close();
    engine = await open({ policy: { output_bytes: 32_768 } });
    for (let i = 0; i < 12; i++) engine.vfs.write(`/big/f${i}.txt`, lines(200, `old ${i}`));
    engine.snapshot({ label: 'old' });
    for (let i = 0; i < 12; i++) engine.vfs.write(`/big/f${i}.txt`, lines(200, `new ${i}`));
    const result = await engine.call('vfs.diff', {});
    if (!result.ok) throw new Error(result.error.message);
    const data = result.data as { note?: string; stats: { files_changed: number } };
    expect(data.note).toContain('some patches were left out');
    expect(data.stats.files_changed).toBe(12);
  });
});

describe('content-addressed store', () => {
  it('stores a blob once however many snapshots and paths hold it; a snapshot writes only what changed', () => {
    for (let i = 0; i < 20; i++) engine.vfs.write(`/a/f${i}.txt`, `content ${i}\n`);
    engine.snapshot();
    const first = objects();
    expect(first.size).toBe(20 + 2); // 20 blobs, the /a tree, the root tree
    engine.snapshot();
    engine.snapshot({ label: 'again' });
    expect(objects().size).toBe(first.size);
    // Same content at a new path: no new blob, only the trees that changed.
    engine.vfs.write('/b/copy.txt', 'content 0\n');
    engine.snapshot();
    expect(objects().size).toBe(first.size + 2); // the /b tree, a new root
    // One file changed: its blob, its folder's tree, the root.
    engine.vfs.write('/a/f3.txt', 'changed\n');
    engine.snapshot();
    expect(objects().size).toBe(first.size + 5);
    expect(blobExists('changed\n')).toBe(true);
    expect(blobExists('content 3\n')).toBe(true);
  });

  it('grows by about the size of the changed files per snapshot', () => {
    for (let i = 0; i < 50; i++) engine.vfs.write(`/data/f${i}.bin`, randomBytes(20_000));
    engine.snapshot();
    const before = storeBytes();
    expect(before).toBeGreaterThanOrEqual(50 * 20_000);
    engine.vfs.write('/data/f7.bin', randomBytes(20_000));
    engine.vfs.write('/data/f8.bin', randomBytes(20_000));
    engine.snapshot();
    const growth = storeBytes() - before;
    // The two new blobs, plus the /data tree (50 entries, about 4.5 KB whole) and the root tree, both
    // stored as what changed since their previous version.
    expect(growth).toBeGreaterThanOrEqual(40_000);
    expect(growth).toBeLessThan(40_000 + 600);
  });

  it('stores a changed folder as a delta of its last version: read back exactly, chains bounded, bases kept by gc', async () => {
    const content = (i: number, v: number) => `file ${i} version ${v}\n`.repeat(20);
    for (let i = 0; i < 100; i++) engine.vfs.write(`/data/f${String(i).padStart(3, '0')}.txt`, content(i, 0));
    const snaps: Array<{ id: string; fp: Record<string, string> }> = [];
    for (let v = 1; v <= 40; v++) {
      const i = (v * 37) % 100;
      engine.vfs.write(`/data/f${String(i).padStart(3, '0')}.txt`, content(i, v));
      if (v % 3 === 0) engine.vfs.delete(`/data/f${String((v * 11) % 100).padStart(3, '0')}.txt`);
      if (v % 7 === 0) engine.vfs.mkdir(`/data/sub${v}`);
      snaps.push({ id: engine.snapshot({ label: `v${v}` }).id, fp: fingerprint(engine) });
    }
    const depths = [...objects().keys()].map(deltaDepth).filter((depth) => depth > 0);
    // Most versions of /data (the root, with one entry, is too small to gain anything from a delta).
    expect(depths.length).toBeGreaterThanOrEqual(35);
    expect(Math.max(...depths)).toBe(16); // the chain was cut and started again
    // After a restart (no tree cached) and a gc, every version reads back exactly.
    await engine.close();
    engine = await open();
    expect(engine.gc().removed).toBe(0);
    await engine.close();
    engine = await open();
    for (const snap of [snaps[0], snaps[16], snaps[17], snaps[39]] as Array<{ id: string; fp: Record<string, string> }>) {
      engine.restore(snap.id);
      expect(fingerprint(engine)).toEqual(snap.fp);
    }
    const d = engine.diff(snaps[0]?.id, snaps[39]?.id, { stat_only: true });
    expect(d.stats.files_changed).toBeGreaterThan(30);
  });

  it('a damaged object is CORRUPT_STATE for the diff, restore or gc that needs it, which changes nothing; the rest still works', async () => {
    for (let i = 0; i < 50; i++) engine.vfs.write(`/data/f${i}.txt`, `file ${i}\n`);
    const s1 = engine.snapshot({ label: 's1' });
    engine.vfs.write('/data/f7.txt', 'changed\n');
    engine.snapshot({ label: 's2' });
    engine.vfs.write('/data/f8.txt', 'live only\n');
    await engine.close();
    const damage = (hash: string) => {
      const file = join(objectsDir(), hash.slice(0, 2), hash.slice(2));
      const bytes = readFileSync(file);
      bytes.writeUInt8(bytes.readUInt8(1) ^ 0xff, 1);
      writeFileSync(file, bytes);
    };
    // A blob only s1 holds (f7's first version).
    const blob = ObjectStore.hash('blob', Buffer.from('file 7\n'));
    damage(blob);
    engine = await open();
    const live = fingerprint(engine);
    for (const [tool, input] of [
      ['vfs.restore', { snapshot: 's1' }],
      ['vfs.diff', { from: 's1', to: 's2' }],
    ] as const) {
      const result = await engine.call(tool, input);
      expect(result.ok ? null : result.error).toMatchObject({
        code: 'CORRUPT_STATE',
        stage: 'execution',
        retryable: false,
        details: { object: blob },
      });
      expect(result.ok ? '' : result.error.message).toContain(
        `The blob object ${blob.slice(0, 12)} is corrupted (its content no longer matches its hash)`,
      );
    }
    expect(fingerprint(engine)).toEqual(live);
    expect(engine.snapshots().map((s) => s.label)).toEqual(['s1', 's2']); // no backup was taken
    expect((await engine.call('vfs.diff', { from: 's2' })).ok).toBe(true);
    expect(engine.gc().removed).toBe(0); // gc reads trees, not blobs: the damaged blob is still needed by s1
    // s1's root tree, needed by s1 alone: gc cannot tell what s1 needs, so it stops before deleting anything.
    await engine.close();
    damage(s1.root);
    engine = await open();
    const count = objects().size;
    expect(() => engine.gc()).toThrow(expect.objectContaining({ code: 'CORRUPT_STATE' }));
    expect(objects().size).toBe(count);
    engine.vfs.write('/still/works.txt', 'yes');
    expect(engine.snapshot({ label: 's3' }).files).toBe(51);
    expect(fingerprint(engine)['/still/works.txt']).toBeDefined();
  });

  it('never takes a remembered hash for the content of a file moved in from elsewhere', async () => {
    engine.vfs.write('/d/y.txt', 'A');
    engine.vfs.write('/d/x.txt', 'x');
    engine.snapshot();
    engine.vfs.write('/d/x.txt', 'x2'); // the /d folder's hash is forgotten, its files' are not
    engine.vfs.move('/d', '/e');
    engine.vfs.write('/f/y.txt', 'B');
    engine.vfs.move('/f', '/d');
    const snap = engine.snapshot({ label: 'after-moves' });
    expect(engine.diff('after-moves', 'live').files).toEqual([]);
    await engine.close();
    engine = await open();
    expect(engine.vfs.read('/d/y.txt').toString()).toBe('B');
    expect(engine.vfs.read('/e/y.txt').toString()).toBe('A');
    engine.vfs.write('/d/y.txt', 'C');
    engine.restore(snap.id);
    expect(engine.vfs.read('/d/y.txt').toString()).toBe('B');
  });
});

describe('garbage collection', () => {
  it('removes objects nothing needs, never one a snapshot or the live tree needs', async () => {
    engine.vfs.write('/a.txt', 'v1\n');
    engine.vfs.write('/bin/b.dat', Buffer.from([1, 2, 3, 0]));
    engine.vfs.mkdir('/empty');
    const s1 = engine.snapshot({ label: 's1' });
    const fp1 = fingerprint(engine);
    engine.vfs.write('/a.txt', 'v2 never snapshotted\n');
    engine.diff('latest', 'live'); // writes the live tree's objects: v2 and a root nobody will keep
    engine.vfs.write('/a.txt', 'v3\n');
    engine.vfs.delete('/bin', { recursive: true });
    const s2 = engine.snapshot({ label: 's2' });
    const fp2 = fingerprint(engine);
    engine.vfs.write('/a.txt', 'v4 live only\n');
    const fpLive = fingerprint(engine);
    const stray = join(objectsDir(), 'ab', `${'c'.repeat(62)}.tmp-12345`);
    mkdirSync(join(objectsDir(), 'ab'), { recursive: true });
    writeFileSync(stray, 'half an object');
    expect(blobExists('v2 never snapshotted\n')).toBe(true);

    const progress: string[] = [];
    const report = engine.gc((phase) => progress.push(phase));
    expect(report.removed).toBe(2); // the v2 blob and the root tree that held it
    expect(report.removed_bytes).toBeGreaterThan(0);
    expect(report.kept).toBe(objects().size);
    expect(blobExists('v2 never snapshotted\n')).toBe(false);
    for (const content of ['v1\n', 'v3\n', 'v4 live only\n', Buffer.from([1, 2, 3, 0])]) expect(blobExists(content)).toBe(true);
    expect(existsSync(stray)).toBe(false);
    expect(engine.gc()).toMatchObject({ removed: 0 });

    // Everything is still there: the live tree after a restart, then every snapshot.
    await engine.close();
    engine = await open();
    expect(fingerprint(engine)).toEqual(fpLive);
    engine.restore(s1.id);
    expect(fingerprint(engine)).toEqual(fp1);
    engine.restore(s2.id);
    expect(fingerprint(engine)).toEqual(fp2);
    const backup = engine.snapshots().find((s) => s.label === 'before-restore');
    engine.restore(backup?.id as string);
    expect(fingerprint(engine)).toEqual(fpLive);
  });
});
