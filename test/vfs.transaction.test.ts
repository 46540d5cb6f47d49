import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ToolFailure } from '../src/errors.js';
import { createEngine, type Engine, isRetryable, type RunContext, type Runner, type ToolErrorEvent, type ToolResultEvent } from '../src/index.js';
import { VfsState } from '../src/vfs/state.js';
import type { Transaction } from '../src/vfs/transaction.js';
import { failure } from './support/project.js';
import { seededState } from './support/state.js';

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function names(txn: Pick<Transaction, 'list'>, path: string): string[] {
  return txn.list(path).entries.map((e) => `${e.name}${e.type === 'directory' ? '/' : ''}`);
}

function memoryState(quota: ConstructorParameters<typeof VfsState>[0]['quota'] = {}): VfsState {
  return new VfsState({ dir: null, quota });
}

/** Every path of a tree with its type and content hash: equal fingerprints, equal trees. */
function fingerprint(vfs: { list: Transaction['list']; read: Transaction['read'] }): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of vfs.list('/', { recursive: true }).entries) {
    out[e.path] = e.type === 'directory' ? 'dir' : createHash('sha256').update(vfs.read(e.path)).digest('hex').slice(0, 16);
  }
  return out;
}

describe('transaction overlay', () => {
  it('reads its own writes while the committed tree stays as it was until commit', () => {
    const state = seededState();
    const txn = state.begin();
    txn.write('/keep.txt', 'changed\n');
    txn.write('/new/deep/file.txt', 'new\n');
    expect(txn.read('/keep.txt').toString()).toBe('changed\n');
    expect(txn.read('/new/deep/file.txt').toString()).toBe('new\n');
    expect(txn.stat('/new/deep/file.txt')).toMatchObject({ type: 'file', size: 4 });
    expect(txn.typeOf('/new/deep')).toBe('directory');
    expect(state.vfs.read('/keep.txt').toString()).toBe('keep\n');
    expect(state.vfs.exists('/new')).toBe(false);
    state.commit(txn);
    expect(state.vfs.read('/keep.txt').toString()).toBe('changed\n');
    expect(state.vfs.read('/new/deep/file.txt').toString()).toBe('new\n');
  });

  it('appends to what it wrote itself, and to committed content', () => {
    const state = seededState();
    const txn = state.begin();
    txn.write('/keep.txt', 'more\n', { append: true });
    txn.write('/keep.txt', 'again\n', { append: true });
    expect(txn.read('/keep.txt').toString()).toBe('keep\nmore\nagain\n');
    state.commit(txn);
    expect(state.vfs.read('/keep.txt').toString()).toBe('keep\nmore\nagain\n');
  });

  it('hides a deleted folder entirely, and a folder recreated in its place holds only the new files', () => {
    const state = seededState();
    const txn = state.begin();
    expect(txn.delete('/d', { recursive: true })).toEqual({ deleted: 3, bytes: 4 });
    expect(txn.exists('/d')).toBe(false);
    expect(txn.exists('/d/x.txt')).toBe(false);
    expect(failure(() => txn.read('/d/x.txt')).code).toBe('NOT_FOUND');
    expect(names(txn, '/')).toEqual(['empty/', 'keep.txt', 'src/']);
    txn.write('/d/z.txt', 'z\n');
    expect(names(txn, '/d')).toEqual(['z.txt']);
    expect(txn.exists('/d/x.txt')).toBe(false);
    state.commit(txn);
    expect(state.vfs.list('/d').entries.map((e) => e.name)).toEqual(['z.txt']);
  });

  it('deletes a file then writes it again with new content', () => {
    const state = seededState();
    const txn = state.begin();
    txn.delete('/keep.txt');
    expect(txn.exists('/keep.txt')).toBe(false);
    expect(txn.write('/keep.txt', 'reborn\n', { exclusive: true })).toMatchObject({ created: true, previous: null });
    state.commit(txn);
    expect(state.vfs.read('/keep.txt').toString()).toBe('reborn\n');
  });

  it('refuses what a filesystem refuses, with the same codes as the committed VFS', () => {
    const state = seededState();
    const txn = state.begin();
    expect(failure(() => txn.delete('/d')).code).toBe('NOT_EMPTY');
    expect(failure(() => txn.delete('/nope')).code).toBe('NOT_FOUND');
    expect(failure(() => txn.write('/keep.txt/inner', 'x')).code).toBe('NOT_A_DIRECTORY');
    expect(failure(() => txn.write('/missing/f.txt', 'x', { parents: false })).code).toBe('NOT_FOUND');
    expect(failure(() => txn.write('/src', 'x')).code).toBe('IS_A_DIRECTORY');
    expect(failure(() => txn.write('/keep.txt', 'x', { exclusive: true })).code).toBe('ALREADY_EXISTS');
    expect(failure(() => txn.mkdir('/keep.txt')).code).toBe('ALREADY_EXISTS');
    expect(failure(() => txn.read('/src')).code).toBe('IS_A_DIRECTORY');
    expect(failure(() => txn.list('/keep.txt')).code).toBe('NOT_A_DIRECTORY');
    expect(failure(() => txn.read('/../etc/passwd')).code).toBe('INVALID_PATH');
    expect(txn.ops).toEqual([]);
  });

  it('moves a folder with everything below it, including files the call wrote there', () => {
    const state = seededState();
    const txn = state.begin();
    txn.write('/src/sub/c.txt', 'gamma\n');
    txn.mkdir('/src/sub/deeper');
    expect(txn.move('/src', '/lib/src2')).toEqual({ from: '/src', to: '/lib/src2', overwritten: false });
    expect(txn.exists('/src')).toBe(false);
    expect(txn.list('/lib', { recursive: true }).entries.map((e) => e.path)).toEqual([
      '/lib/src2',
      '/lib/src2/a.txt',
      '/lib/src2/sub',
      '/lib/src2/sub/b.txt',
      '/lib/src2/sub/c.txt',
      '/lib/src2/sub/deeper',
    ]);
    expect(txn.read('/lib/src2/sub/b.txt').toString()).toBe('beta\n');
    expect(state.vfs.exists('/src/a.txt')).toBe(true);
    const expected = fingerprint(txn);
    state.commit(txn);
    expect(fingerprint(state.vfs)).toEqual(expected);
    expect(state.vfs.exists('/src')).toBe(false);
  });

  it('refuses to move a folder into itself or over a folder that contains it', () => {
    const state = seededState();
    const txn = state.begin();
    const into = failure(() => txn.move('/src', '/src/sub/inside'));
    expect(into.code).toBe('INVALID_PATH');
    expect(into.message).toContain('Cannot move /src into itself');
    const over = failure(() => txn.move('/src/sub', '/src', { overwrite: true }));
    expect(over.code).toBe('INVALID_PATH');
    expect(over.message).toContain('contains it');
    const root = failure(() => txn.move('/src', '/', { overwrite: true }));
    expect(root.code).toBe('INVALID_PATH');
    // The committed VFS refuses the same moves with the same codes.
    expect(failure(() => state.vfs.move('/src/sub', '/src', { overwrite: true })).code).toBe('INVALID_PATH');
    expect(txn.ops).toEqual([]);
    expect(state.vfs.read('/src/sub/b.txt').toString()).toBe('beta\n');
  });

  it('moves onto an existing path only with overwrite, and only file over file or folder over folder', () => {
    const state = seededState();
    const txn = state.begin();
    expect(failure(() => txn.move('/keep.txt', '/d/x.txt')).code).toBe('ALREADY_EXISTS');
    expect(failure(() => txn.move('/keep.txt', '/src', { overwrite: true })).code).toBe('IS_A_DIRECTORY');
    expect(failure(() => txn.move('/src', '/keep.txt', { overwrite: true })).code).toBe('NOT_A_DIRECTORY');
    expect(txn.move('/keep.txt', '/d/x.txt', { overwrite: true }).overwritten).toBe(true);
    expect(txn.move('/src', '/d', { overwrite: true }).overwritten).toBe(true);
    expect(names(txn, '/d')).toEqual(['a.txt', 'sub/']);
    state.commit(txn);
    expect(state.vfs.list('/', { recursive: true }).entries.map((e) => e.path)).toEqual(['/d', '/d/a.txt', '/d/sub', '/d/sub/b.txt', '/empty']);
  });

  it('lists committed and uncommitted entries merged, sorted, with their own sizes', () => {
    const state = seededState();
    const txn = state.begin();
    txn.write('/d/c.txt', 'ccc\n');
    txn.write('/d/y.txt', 'longer y\n');
    txn.delete('/d/x.txt');
    txn.mkdir('/d/e');
    txn.write('/d/e/f.txt', 'f');
    expect(txn.list('/d').entries).toEqual([
      { path: '/d/c.txt', name: 'c.txt', type: 'file', size: 4 },
      { path: '/d/e', name: 'e', type: 'directory', size: 0 },
      { path: '/d/y.txt', name: 'y.txt', type: 'file', size: 9 },
    ]);
    expect(txn.list('/d', { recursive: true }).entries.map((e) => e.path)).toEqual(['/d/c.txt', '/d/e', '/d/e/f.txt', '/d/y.txt']);
    const limited = txn.list('/', { recursive: true, limit: 3 });
    expect(limited.truncated).toBe(true);
    expect(limited.entries).toHaveLength(3);
    expect(names(txn, '/empty')).toEqual([]);
  });

  it('enforces quotas on what the call adds, counting what it removed', () => {
    const state = memoryState({ max_bytes: 100, max_files: 4 });
    const setup = state.begin();
    setup.write('/a', 'x'.repeat(60));
    state.commit(setup);
    const txn = state.begin();
    const over = failure(() => txn.write('/b', 'y'.repeat(41)));
    expect(over.code).toBe('QUOTA_EXCEEDED');
    expect(over.details).toMatchObject({ limit: 'max_bytes', max: 100 });
    expect(over.message).toContain('over its quota of 100');
    expect(txn.exists('/b')).toBe(false);
    txn.write('/b', 'y'.repeat(40));
    expect(failure(() => txn.write('/c', 'z')).code).toBe('QUOTA_EXCEEDED');
    txn.delete('/a');
    txn.write('/c', 'z'.repeat(60));
    expect(failure(() => txn.write('/d/e/f', '')).details).toMatchObject({ limit: 'max_files' });
    txn.write('/d/e', '');
    state.commit(txn);
    expect(state.vfs.usage()).toEqual({ bytes: 100, files: 4, dirs: 1 });
  });

  it('checks quotas again at commit, against what others committed meanwhile', () => {
    const state = memoryState({ max_bytes: 100 });
    const first = state.begin();
    const second = state.begin();
    first.write('/a', 'x'.repeat(60));
    second.write('/b', 'y'.repeat(60));
    state.commit(first);
    const error = failure(() => state.commit(second));
    expect(error.code).toBe('QUOTA_EXCEEDED');
    expect(state.vfs.exists('/b')).toBe(false);
    expect(state.vfs.usage()).toEqual({ bytes: 60, files: 1, dirs: 0 });
  });
});

describe('transaction isolation', () => {
  /** Two calls at once: one writes /one.txt and rewrites /keep.txt, two writes /two.txt and deletes /src. */
  function twoCalls() {
    const state = seededState();
    const one = state.begin();
    const two = state.begin();
    one.write('/one.txt', '1');
    one.write('/keep.txt', 'one was here');
    two.write('/two.txt', '2');
    two.delete('/src', { recursive: true });
    return { state, one, two };
  }

  it('two calls running at once never see each other’s uncommitted writes', () => {
    const { state, one, two } = twoCalls();
    expect(one.exists('/two.txt')).toBe(false);
    expect(one.exists('/src/a.txt')).toBe(true);
    expect(two.exists('/one.txt')).toBe(false);
    expect(two.read('/keep.txt').toString()).toBe('keep\n');
    expect(names(one, '/')).toEqual(['d/', 'empty/', 'keep.txt', 'one.txt', 'src/']);
    expect(names(two, '/')).toEqual(['d/', 'empty/', 'keep.txt', 'two.txt']);
    state.commit(one);
    // Two read /keep.txt and /one.txt, which one changed before two committed: two acted on a state that is gone.
    const error = failure(() => state.commit(two));
    expect(error.code).toBe('CONFLICT');
    expect(error.details?.reason).toBe('read changed');
    expect(['/keep.txt', '/one.txt']).toContain(error.details?.path);
    expect(state.vfs.list('/').entries.map((e) => e.name)).toEqual(['d', 'empty', 'keep.txt', 'one.txt', 'src']);
    expect(state.vfs.read('/keep.txt').toString()).toBe('one was here');
  });

  it('calls that read nothing the other changed both commit', () => {
    const { state, one, two } = twoCalls();
    state.commit(one);
    state.commit(two);
    expect(state.vfs.list('/').entries.map((e) => e.name)).toEqual(['d', 'empty', 'keep.txt', 'one.txt', 'two.txt']);
    expect(state.vfs.read('/keep.txt').toString()).toBe('one was here');
  });

  it('an abandoned transaction leaves nothing behind', () => {
    const state = seededState();
    const before = fingerprint(state.vfs);
    const txn = state.begin();
    txn.write('/ghost.txt', 'boo');
    txn.delete('/d', { recursive: true });
    txn.move('/src', '/moved');
    expect(fingerprint(state.vfs)).toEqual(before);
    expect(fingerprint(state.begin())).toEqual(before);
  });
});

describe('commit conflicts', () => {
  it.each([
    [
      'a write into a folder another call deleted',
      (t: Transaction) => t.delete('/d', { recursive: true }),
      (t: Transaction) => {
        t.write('/fine.txt', 'would be fine alone');
        t.write('/d/new.txt', 'n');
      },
    ],
    [
      'a move of a file another call moved away',
      (t: Transaction) => t.move('/keep.txt', '/k1.txt'),
      (t: Transaction) => t.move('/keep.txt', '/k2.txt'),
    ],
    [
      'a move onto a path another call created',
      (t: Transaction) => t.write('/taken.txt', 't'),
      (t: Transaction) => t.move('/keep.txt', '/taken.txt'),
    ],
    ['a folder where another call put a file', (t: Transaction) => t.write('/thing', 'file'), (t: Transaction) => t.write('/thing/inner.txt', 'x')],
  ])('%s fails with CONFLICT (retryable) and changes nothing', (_name, winner, loser) => {
    const state = seededState();
    const first = state.begin();
    const second = state.begin();
    winner(first);
    loser(second);
    state.commit(first);
    const before = fingerprint(state.vfs);
    const error = failure(() => state.commit(second));
    expect(error.code).toBe('CONFLICT');
    expect(error.stage).toBe('execution');
    expect(isRetryable(error.code)).toBe(true);
    expect(error.message).toMatch(/^Another call changed \/\S+ after this call read it; nothing was changed/);
    expect(error.details?.reason).toBe('read changed');
    expect(fingerprint(state.vfs)).toEqual(before);
    expect(state.vfs.exists('/fine.txt')).toBe(false);
  });

  it('of two appends to one file running at once, the later commit is refused: it read the old end', () => {
    const state = seededState();
    const first = state.begin();
    const second = state.begin();
    first.write('/keep.txt', 'one\n', { append: true });
    second.write('/keep.txt', 'two\n', { append: true });
    second.write('/fresh.log', 'a\n', { append: true });
    second.write('/fresh.log', 'b\n', { append: true });
    expect(second.read('/fresh.log').toString()).toBe('a\nb\n');
    state.commit(second);
    expect(failure(() => state.commit(first)).details).toMatchObject({ reason: 'read changed', path: '/keep.txt' });
    expect(state.vfs.read('/keep.txt').toString()).toBe('keep\ntwo\n');
    expect(state.vfs.read('/fresh.log').toString()).toBe('a\nb\n');
  });

  it('two calls that each create the same file exclusively: the second fails with CONFLICT', () => {
    const state = seededState();
    const first = state.begin();
    const second = state.begin();
    first.write('/lock.txt', 'first', { exclusive: true });
    second.write('/lock.txt', 'second', { exclusive: true });
    state.commit(first);
    expect(failure(() => state.commit(second)).code).toBe('CONFLICT');
    expect(state.vfs.read('/lock.txt').toString()).toBe('first');
  });

  it('a delete of something another call deleted first is refused: run again, it would find nothing', () => {
    const state = seededState();
    const first = state.begin();
    const second = state.begin();
    first.delete('/keep.txt');
    second.delete('/keep.txt');
    second.write('/after.txt', 'a');
    state.commit(first);
    expect(failure(() => state.commit(second)).details).toMatchObject({ reason: 'read changed', path: '/keep.txt' });
    expect(state.vfs.exists('/keep.txt')).toBe(false);
    expect(state.vfs.exists('/after.txt')).toBe(false);
  });

  it('replaying ops still refuses what no longer applies when nothing was read (a host change)', () => {
    const state = seededState();
    const first = state.begin();
    first.delete('/d', { recursive: true });
    state.commit(first);
    const error = failure(() =>
      state.change((txn) => {
        // What a call computed earlier, replayed on a tree where /d is gone: the ops refuse it themselves.
        txn.ops.push({ op: 'write', path: '/d/new.txt', data: Buffer.from('n') });
      }),
    );
    expect(error.code).toBe('CONFLICT');
    expect(error.message).toContain("The call's changes conflict with a change committed while it ran");
    expect(state.vfs.exists('/d')).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------------
// Atomic calls through the engine, with a fake runner standing in for the JS runner.

type Behaviour = (ctx: RunContext) => Promise<unknown>;

class FakeRunner implements Runner {
  readonly name = 'js-runner' as const;
  readonly interruptible = true;
  readonly behaviours = new Map<string, Behaviour>();

  async run(ctx: RunContext): Promise<unknown> {
    const mode = (ctx.input as { mode: string }).mode;
    const behaviour = this.behaviours.get(mode);
    if (!behaviour) throw new Error(`no behaviour ${mode}`);
    return behaviour(ctx);
  }

  async status() {
    return { available: true };
  }

  async close(): Promise<void> {}
}

/** Writes, overwrites, deletes, creates a folder and moves: every kind of change a call can make. */
function scribble(ctx: RunContext): void {
  ctx.vfs.write('/out/new.txt', 'new');
  ctx.vfs.write('/keep.txt', 'overwritten');
  ctx.vfs.delete('/old.txt');
  ctx.vfs.mkdir('/made/dir');
  ctx.vfs.move('/m', '/m2');
}

let workspace: string;
let engine: Engine;
let runner: FakeRunner;
const late: unknown[] = [];

beforeEach(async () => {
  workspace = mkdtempSync(join(tmpdir(), 'arium-txn-'));
  const tools = join(workspace, 'p', 'tools');
  mkdirSync(tools, { recursive: true });
  writeFileSync(join(tools, 'fake.js'), 'export default async function run() {}\n');
  const tool = (id: string, extra: Record<string, unknown> = {}) =>
    writeFileSync(
      join(tools, `${id}.json`),
      JSON.stringify({
        id,
        name: id,
        description: 'fake',
        runner: 'js-runner',
        entry: 'fake.js',
        schema: { type: 'object', properties: { mode: { type: 'string' } }, required: ['mode'] },
        permissions: ['exec.js', 'vfs.read', 'vfs.write'],
        ...extra,
      }),
    );
  tool('fake.tool', { output_schema: { type: 'object', properties: { ok: { const: true } }, required: ['ok'] }, limits: { output_bytes: 2048 } });
  runner = new FakeRunner();
  late.length = 0;
  engine = await createEngine({ workspace, project: 'p', watch: false, runners: [runner] });
  expect(engine.problems()).toEqual([]);
  engine.vfs.write('/keep.txt', 'keep');
  engine.vfs.write('/old.txt', 'old');
  engine.vfs.write('/m/inner.txt', 'inner');
  engine.vfs.write('/bin.dat', Buffer.from([0, 1, 2, 255]));
});

afterEach(async () => {
  await engine.close();
  rmSync(workspace, { recursive: true, force: true });
});

function liveFingerprint(e: Engine): Record<string, string> {
  return fingerprint(e.vfs);
}

describe('atomic calls', () => {
  const failing: Array<[string, Behaviour, string, Record<string, unknown>]> = [
    [
      'the runner throws a tool error after writing',
      async (ctx) => {
        scribble(ctx);
        throw new ToolFailure('execution', 'TOOL_ERROR', 'tool blew up');
      },
      'TOOL_ERROR',
      {},
    ],
    [
      'the runner throws something that is not a ToolFailure',
      async (ctx) => {
        scribble(ctx);
        throw new TypeError('undefined is not a function');
      },
      'INTERNAL',
      {},
    ],
    [
      'the output violates output_schema',
      async (ctx) => {
        scribble(ctx);
        return { ok: 'nope' };
      },
      'INVALID_OUTPUT',
      {},
    ],
    [
      'the output is too large',
      async (ctx) => {
        scribble(ctx);
        return { ok: true, blob: 'x'.repeat(10_000) };
      },
      'OUTPUT_LIMIT',
      {},
    ],
    [
      'the call times out',
      async (ctx) => {
        scribble(ctx);
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
        return { ok: true };
      },
      'TIMEOUT',
      { timeout_ms: 100 },
    ],
    [
      'a VFS operation fails half way',
      async (ctx) => {
        scribble(ctx);
        ctx.vfs.write('/keep.txt/under-a-file', 'x');
        return { ok: true };
      },
      'NOT_A_DIRECTORY',
      {},
    ],
    [
      'the call goes over a quota half way',
      async (ctx) => {
        scribble(ctx);
        ctx.vfs.write('/huge', Buffer.alloc(65 * 1024 * 1024));
        return { ok: true };
      },
      'QUOTA_EXCEEDED',
      {},
    ],
    [
      'a VFS operation is denied half way',
      async (ctx) => {
        ctx.vfs.write('/out/allowed.txt', 'allowed');
        ctx.vfs.write('/secret/x', 'x');
        return { ok: true };
      },
      'DENIED',
      { grants: ['exec.js', 'vfs.read', 'vfs.write:/out/**'] },
    ],
  ];

  it.each(failing)('%s: the VFS is exactly as it was, now and after a restart', async (_name, behaviour, code, options) => {
    runner.behaviours.set('go', behaviour);
    const before = liveFingerprint(engine);
    const errors: ToolErrorEvent[] = [];
    engine.events.on('event', (event) => {
      if (event.type === 'ToolErrorEvent') errors.push(event);
    });
    const result = await engine.call('fake.tool', { mode: 'go' }, options);
    expect(result.ok ? null : result.error.code).toBe(code);
    expect(errors.map((e) => e.error.code)).toEqual([code]);
    expect(liveFingerprint(engine)).toEqual(before);
    await engine.close();
    engine = await createEngine({ workspace, project: 'p', watch: false, runners: [runner] });
    expect(liveFingerprint(engine)).toEqual(before);
  });

  it('a call that succeeds commits every change at once and says what it changed', async () => {
    runner.behaviours.set('go', async (ctx) => {
      scribble(ctx);
      return { ok: true };
    });
    const results: ToolResultEvent[] = [];
    engine.events.on('event', (event) => {
      if (event.type === 'ToolResultEvent') results.push(event);
    });
    const result = await engine.call('fake.tool', { mode: 'go' });
    expect(result.ok).toBe(true);
    expect(engine.vfs.read('/out/new.txt').toString()).toBe('new');
    expect(engine.vfs.read('/keep.txt').toString()).toBe('overwritten');
    expect(engine.vfs.exists('/old.txt')).toBe(false);
    expect(engine.vfs.stat('/made/dir').type).toBe('directory');
    expect(engine.vfs.read('/m2/inner.txt').toString()).toBe('inner');
    expect(results[0]?.vfs).toEqual({
      written: ['/out/new.txt', '/keep.txt'],
      deleted: ['/old.txt'],
      created_dirs: ['/made/dir'],
      moved: [{ from: '/m', to: '/m2' }],
    });
  });

  it('a call cancelled by its caller leaves nothing', async () => {
    const started = deferred<void>();
    runner.behaviours.set('go', async (ctx) => {
      scribble(ctx);
      started.resolve();
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
      return { ok: true };
    });
    const before = liveFingerprint(engine);
    const controller = new AbortController();
    const pending = engine.call('fake.tool', { mode: 'go' }, { signal: controller.signal });
    await started.promise;
    controller.abort();
    const result = await pending;
    expect(result.ok ? null : result.error.code).toBe('CANCELLED');
    expect(liveFingerprint(engine)).toEqual(before);
  });

  it('calls running at once do not see each other’s writes, and the loser of a conflict changes nothing', async () => {
    const bothWrote = { a: deferred<void>(), b: deferred<void>() };
    const seen: Record<string, boolean> = {};
    runner.behaviours.set('delete-m', async (ctx) => {
      ctx.vfs.delete('/m', { recursive: true });
      ctx.vfs.write('/a.txt', 'a');
      bothWrote.a.resolve();
      await bothWrote.b.promise;
      seen.aSeesB = ctx.vfs.exists('/b.txt');
      return { ok: true };
    });
    runner.behaviours.set('write-into-m', async (ctx) => {
      ctx.vfs.write('/b.txt', 'b');
      ctx.vfs.write('/m/added.txt', 'added');
      bothWrote.b.resolve();
      await bothWrote.a.promise;
      seen.bSeesA = ctx.vfs.exists('/a.txt');
      seen.bSeesM = ctx.vfs.exists('/m/inner.txt');
      // Let the other call commit first.
      await new Promise((resolve) => setTimeout(resolve, 30));
      return { ok: true };
    });
    // One run each: this test is about the loser's first run; re-runs are tested in vfs.serializable.test.ts.
    await engine.close();
    engine = await createEngine({ workspace, project: 'p', watch: false, runners: [runner], policy: { max_attempts: 1 } });
    const [a, b] = await Promise.all([engine.call('fake.tool', { mode: 'delete-m' }), engine.call('fake.tool', { mode: 'write-into-m' })]);
    expect(seen).toEqual({ aSeesB: false, bSeesA: false, bSeesM: true });
    expect(a.ok).toBe(true);
    expect(b.ok ? null : b.error).toMatchObject({ code: 'CONFLICT', retryable: true, stage: 'execution' });
    expect(engine.vfs.exists('/a.txt')).toBe(true);
    expect(engine.vfs.exists('/b.txt')).toBe(false);
    expect(engine.vfs.exists('/m')).toBe(false);
  });

  it('work a tool left running after it returned cannot touch the VFS', async () => {
    const done = deferred<void>();
    runner.behaviours.set('go', async (ctx) => {
      ctx.vfs.write('/inside.txt', 'in time');
      setTimeout(() => {
        for (const op of [() => ctx.vfs.write('/late.txt', 'too late'), () => ctx.vfs.read('/keep.txt'), () => ctx.vfs.delete('/keep.txt')]) {
          try {
            op();
            late.push('no error');
          } catch (error) {
            late.push(error);
          }
        }
        done.resolve();
      }, 20);
      return { ok: true };
    });
    const result = await engine.call('fake.tool', { mode: 'go' });
    expect(result.ok).toBe(true);
    await done.promise;
    expect(late).toHaveLength(3);
    for (const error of late) {
      expect(error).toBeInstanceOf(ToolFailure);
      expect((error as ToolFailure).code).toBe('CANCELLED');
    }
    expect((late[0] as ToolFailure).message).toBe('The call has ended; write is no longer possible');
    expect(engine.vfs.read('/inside.txt').toString()).toBe('in time');
    expect(engine.vfs.exists('/late.txt')).toBe(false);
    expect(engine.vfs.read('/keep.txt').toString()).toBe('keep');
  });

  it('a tool still running after its timeout cannot write either', async () => {
    const done = deferred<unknown>();
    runner.behaviours.set('go', async (ctx) => {
      await new Promise((resolve) => setTimeout(resolve, 150));
      try {
        ctx.vfs.write('/after-timeout.txt', 'x');
        done.resolve('no error');
      } catch (error) {
        done.resolve(error);
      }
      return { ok: true };
    });
    const result = await engine.call('fake.tool', { mode: 'go' }, { timeout_ms: 50 });
    expect(result.ok ? null : result.error.code).toBe('TIMEOUT');
    expect(await done.promise).toMatchObject({ code: 'CANCELLED' });
    expect(engine.vfs.exists('/after-timeout.txt')).toBe(false);
  });

  it('a failing builtin call leaves nothing either', async () => {
    const before = liveFingerprint(engine);
    const result = await engine.call('fs.move', { from: '/m', to: '/m/inside' });
    expect(result.ok ? null : result.error.code).toBe('INVALID_PATH');
    const denied = await engine.call('fs.write', { path: '/x.txt', content: 'x' }, { grants: ['vfs.read'] });
    expect(denied.ok ? null : denied.error.code).toBe('DENIED');
    expect(liveFingerprint(engine)).toEqual(before);
  });
});
