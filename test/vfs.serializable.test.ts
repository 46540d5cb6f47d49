import { createHash } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Engine, EngineOptions, RunContext, ToolErrorEvent, ToolResultEvent } from '../src/index.js';
import type { VfsState } from '../src/vfs/state.js';
import type { Transaction } from '../src/vfs/transaction.js';
import { deferred, definition, FakeRunner, failure, openEngine, recordEvents, type TempProject, tempProject } from './support/project.js';
import { seededState } from './support/state.js';

type Tree = Pick<Transaction, 'list' | 'read' | 'stat'>;

/** Every path with its type, size and content hash: equal fingerprints, equal trees. */
function fingerprint(tree: Tree): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of tree.list('/', { recursive: true }).entries) {
    out[e.path] =
      e.type === 'directory'
        ? 'dir'
        : `${e.size}:${tree.stat(e.path).size}:${createHash('sha256').update(tree.read(e.path)).digest('hex').slice(0, 12)}`;
  }
  return out;
}

/** Commits `change` as another call would, while the transactions under test are open. */
function otherCall(state: VfsState, change: (txn: Transaction) => void): void {
  const txn = state.begin();
  change(txn);
  state.commit(txn);
}

describe('a transaction reads the tree as it was when it began', () => {
  it('whatever other calls commit meanwhile: contents, stats, folders, moves and deletes', () => {
    const state = seededState();
    const before = fingerprint(state.vfs);
    const txn = state.begin();
    otherCall(state, (t) => {
      t.write('/keep.txt', 'changed, and longer than before\n');
      t.delete('/d', { recursive: true });
      t.move('/src', '/moved');
      t.write('/new/deep/file.txt', 'new');
      t.mkdir('/empty/inner');
    });
    otherCall(state, (t) => {
      t.write('/d/x.txt', 'a new /d with another x');
      t.write('/keep.txt', 'changed twice');
    });
    expect(fingerprint(txn)).toEqual(before);
    expect(txn.read('/keep.txt').toString()).toBe('keep\n');
    expect(txn.read('/d/x.txt').toString()).toBe('x\n');
    expect(txn.exists('/moved')).toBe(false);
    expect(txn.exists('/new')).toBe(false);
    expect(txn.list('/empty').entries).toEqual([]);
    expect(failure(() => txn.read('/new/deep/file.txt')).code).toBe('NOT_FOUND');
    expect(txn.list('/d').entries.map((e) => `${e.name}:${e.size}`)).toEqual(['x.txt:2', 'y.txt:2']);
    // Its own writes still go over that view, and only they.
    txn.write('/src/sub/c.txt', 'mine');
    expect(txn.list('/src/sub').entries.map((e) => e.name)).toEqual(['b.txt', 'c.txt']);
    expect(state.vfs.read('/keep.txt').toString()).toBe('changed twice');
  });

  it('one that only read commits whatever changed: it saw one consistent tree', () => {
    const state = seededState();
    const reader = state.begin();
    expect(reader.read('/keep.txt').toString()).toBe('keep\n');
    otherCall(state, (t) => t.write('/keep.txt', 'changed'));
    expect(reader.read('/keep.txt').toString()).toBe('keep\n');
    expect(() => state.commit(reader)).not.toThrow();
    expect(state.open).toBe(0);
  });

  it('ended transactions stop collecting what others change (nothing leaks)', () => {
    const state = seededState();
    const a = state.begin();
    const b = state.begin();
    expect(state.open).toBe(2);
    state.end(a);
    state.end(a);
    b.write('/b.txt', 'b');
    state.commit(b);
    expect(state.open).toBe(0);
    state.change((t) => t.write('/host.txt', 'h'));
    expect(state.open).toBe(0);
  });
});

describe('a commit is refused when another call changed what the transaction read', () => {
  const cases: Array<[string, (t: Transaction) => unknown, (t: Transaction) => void, string]> = [
    ['the content of a file it read', (t) => t.read('/keep.txt'), (t) => t.write('/keep.txt', 'new'), '/keep.txt'],
    ['a file it saw exist, now deleted', (t) => t.exists('/d/x.txt'), (t) => t.delete('/d/x.txt'), '/d/x.txt'],
    ['a file it saw missing, now created', (t) => t.exists('/later.txt'), (t) => t.write('/later.txt', 'l'), '/later.txt'],
    ['the size it stat-ed', (t) => t.stat('/src/a.txt'), (t) => t.write('/src/a.txt', 'more', { append: true }), '/src/a.txt'],
    ['a folder it listed, gaining a file', (t) => t.list('/d'), (t) => t.write('/d/z.txt', 'z'), '/d/z.txt'],
    ['a folder it listed, a file in it changing size', (t) => t.list('/d'), (t) => t.write('/d/x.txt', 'longer'), '/d/x.txt'],
    ['a folder it listed, deleted with its parent', (t) => t.list('/src/sub'), (t) => t.delete('/src', { recursive: true }), '/src/sub'],
    [
      'a folder it listed recursively, deep inside',
      (t) => t.list('/src', { recursive: true }),
      (t) => t.write('/src/sub/b.txt', 'b2'),
      '/src/sub/b.txt',
    ],
    ['a file moved away from under it', (t) => t.read('/src/sub/b.txt'), (t) => t.move('/src', '/elsewhere'), '/src/sub/b.txt'],
    ['a path a folder was moved onto', (t) => t.exists('/elsewhere/a.txt'), (t) => t.move('/src', '/elsewhere'), '/elsewhere/a.txt'],
    ['the folder it wrote into, deleted', (t) => t.write('/d/new.txt', 'n'), (t) => t.delete('/d', { recursive: true }), '/d'],
    [
      'the file it appended to',
      (t) => t.write('/keep.txt', 'mine\n', { append: true }),
      (t) => t.write('/keep.txt', 'theirs\n', { append: true }),
      '/keep.txt',
    ],
    ['a file it replaced, deleted meanwhile', (t) => t.write('/keep.txt', 'mine'), (t) => t.delete('/keep.txt'), '/keep.txt'],
    ['a file it created, created meanwhile', (t) => t.write('/later.txt', 'mine'), (t) => t.write('/later.txt', 'theirs'), '/later.txt'],
    [
      'a file it replaced asking for its previous content (a diff)',
      (t) => t.write('/keep.txt', 'mine', { previous: true }),
      (t) => t.write('/keep.txt', 'theirs'),
      '/keep.txt',
    ],
  ];

  it.each(cases)('%s', (_name, read, change, path) => {
    const state = seededState();
    const txn = state.begin();
    read(txn);
    txn.write('/result.txt', 'what it computed');
    otherCall(state, change);
    const after = fingerprint(state.vfs);
    const error = failure(() => state.commit(txn));
    expect(error).toMatchObject({ code: 'CONFLICT', stage: 'execution', details: { reason: 'read changed', path } });
    expect(error.message).toContain(`Another call changed ${path} after this call read it; nothing was changed`);
    expect(fingerprint(state.vfs)).toEqual(after);
    expect(state.open).toBe(0);
  });

  it.each(cases)('but not when the change was elsewhere: %s', (_name, read) => {
    const state = seededState();
    const txn = state.begin();
    read(txn);
    txn.write('/result.txt', 'what it computed');
    otherCall(state, (t) => {
      t.write('/unrelated/file.txt', 'u');
      t.write('/empty/other.txt', 'o');
    });
    expect(() => state.commit(txn)).not.toThrow();
    expect(state.vfs.read('/result.txt').toString()).toBe('what it computed');
  });

  it('replacing a file without reading it is no conflict with another write to it: the later commit wins', () => {
    const state = seededState();
    const txn = state.begin();
    expect(txn.write('/keep.txt', 'mine')).toMatchObject({ created: false, previous: null });
    txn.write('/d/x.txt', 'mine too');
    otherCall(state, (t) => {
      t.write('/keep.txt', 'theirs, and longer than before');
      t.write('/d/x.txt', 'theirs');
      t.write('/d/new.txt', 'a new file beside it');
    });
    expect(() => state.commit(txn)).not.toThrow();
    expect(state.vfs.read('/keep.txt').toString()).toBe('mine');
    expect(state.vfs.read('/d/x.txt').toString()).toBe('mine too');
    expect(state.vfs.read('/d/new.txt').toString()).toBe('a new file beside it');
  });

  it('a folder listed without recursion ignores changes deeper down', () => {
    const state = seededState();
    const txn = state.begin();
    txn.list('/src');
    txn.write('/count.txt', '2');
    otherCall(state, (t) => t.write('/src/sub/b.txt', 'a different size'));
    expect(() => state.commit(txn)).not.toThrow();
  });
});

describe('calls that lose a race run again', () => {
  let project: TempProject;
  let engine: Engine;
  let runner: FakeRunner;
  const behaviours = new Map<string, (ctx: RunContext) => unknown>();

  async function open(defs: Record<string, Record<string, unknown>>, options: EngineOptions = {}): Promise<Engine> {
    project = tempProject(Object.fromEntries(Object.entries(defs).map(([id, fields]) => [`${id}.json`, definition({ id, ...fields })])));
    project.write('tool.js', 'export default () => null;\n');
    runner = new FakeRunner(
      Object.fromEntries(Object.keys(defs).map((id) => [id, (ctx: RunContext) => (behaviours.get(id) as (ctx: RunContext) => unknown)(ctx)])),
    );
    engine = await openEngine(project, { runners: [runner], ...options });
    return engine;
  }

  /**
   * The victim reads /n.txt, then the host changes it (as a call committing meanwhile would), then the
   * victim writes /mine.txt and runs `then`: every run loses its race.
   */
  function alwaysLoses(then: (run: number) => unknown = () => null): { runs: number } {
    const victim = { runs: 0 };
    behaviours.set('victim', async (ctx) => {
      victim.runs++;
      ctx.vfs.read('/n.txt');
      engine.vfs.write('/n.txt', String(victim.runs));
      ctx.vfs.write('/mine.txt', 'x');
      await then(victim.runs);
      return null;
    });
    return victim;
  }

  beforeEach(() => behaviours.clear());
  afterEach(async () => {
    await engine?.close();
    project?.remove();
  });

  const RW = { permissions: ['exec.js', 'vfs.read', 'vfs.write'] };

  it('the loser runs again on the new state; the events and meta say how many runs it took, its logs are the last run’s', async () => {
    await open({ victim: RW, other: RW });
    engine.vfs.write('/n.txt', '0');
    const victimRead = deferred();
    const otherDone = deferred();
    let runs = 0;
    behaviours.set('victim', async (ctx) => {
      runs++;
      const n = Number(ctx.vfs.read('/n.txt').toString());
      ctx.log('info', `run ${runs} read ${n}`);
      if (runs === 1) {
        victimRead.resolve();
        await otherDone.promise;
      }
      ctx.vfs.write('/n.txt', String(n + 1));
      return { saw: n };
    });
    behaviours.set('other', (ctx) => {
      ctx.vfs.write('/n.txt', '10');
      return null;
    });
    const events = recordEvents(engine);
    const victim = engine.call('victim', {});
    await victimRead.promise;
    expect((await engine.call('other', {})).ok).toBe(true);
    otherDone.resolve();
    const result = await victim;
    expect(result).toMatchObject({ ok: true, data: { saw: 10 }, meta: { attempts: 2, logs: [{ level: 'info', message: 'run 2 read 10' }] } });
    expect(engine.vfs.read('/n.txt').toString()).toBe('11');
    const done = events.filter((e): e is ToolResultEvent => e.type === 'ToolResultEvent');
    expect(done.map((e) => [e.tool, e.attempts])).toEqual([
      ['other', 1],
      ['victim', 2],
    ]);
    expect((await engine.status()).transactions).toBe(0);
  });

  it.each([
    ['the tool’s limits', { victim: { ...RW, limits: { max_attempts: 1 } } }, {}],
    ['the engine’s policy', { victim: RW }, { policy: { max_attempts: 1 } }],
    [
      'a tool with effects outside the VFS (sys.exec)',
      { victim: { permissions: [...RW.permissions, 'sys.exec'] } },
      { grants: ['exec.js', 'vfs.read', 'vfs.write', 'sys.exec'] },
    ],
  ])('with one run allowed by %s, the loser gets CONFLICT and nothing of it lands', async (_name, defs, options) => {
    await open(defs, options as EngineOptions);
    const victim = alwaysLoses();
    engine.vfs.write('/n.txt', '0');
    const events = recordEvents(engine);
    const result = await engine.call('victim', {});
    expect(result.ok ? null : result.error).toMatchObject({ code: 'CONFLICT', retryable: true, details: { reason: 'read changed', path: '/n.txt' } });
    expect(victim.runs).toBe(1);
    expect(engine.vfs.exists('/mine.txt')).toBe(false);
    expect(events.filter((e): e is ToolErrorEvent => e.type === 'ToolErrorEvent').map((e) => e.attempts)).toEqual([1]);
  });

  it('a tool replacing a file that another call replaces meanwhile runs once, and its write lands last', async () => {
    await open({ writer: { permissions: ['exec.js', 'vfs.write'] } });
    engine.vfs.write('/shared.txt', 'start');
    const wrote = deferred();
    const release = deferred();
    let runs = 0;
    behaviours.set('writer', async (ctx) => {
      runs++;
      expect(ctx.vfs.write('/shared.txt', 'from the tool')).toMatchObject({ created: false });
      wrote.resolve();
      await release.promise;
      return null;
    });
    const writer = engine.call('writer', {});
    await wrote.promise;
    expect((await engine.call('fs.write', { path: '/shared.txt', content: 'from fs.write' })).ok).toBe(true);
    release.resolve();
    const result = await writer;
    expect(result.ok).toBe(true);
    expect(result.meta.attempts).toBeUndefined();
    expect(runs).toBe(1);
    expect(engine.vfs.read('/shared.txt').toString()).toBe('from the tool');
  });

  it('runs at most max_attempts times, then CONFLICT', async () => {
    await open({ victim: { ...RW, limits: { max_attempts: 3 } } });
    engine.vfs.write('/n.txt', '0');
    // The host commits outside the dispatcher: not even the last run, which holds the gate, escapes it.
    const victim = alwaysLoses();
    const events = recordEvents(engine);
    const result = await engine.call('victim', {});
    expect(result.ok ? null : result.error.code).toBe('CONFLICT');
    expect(victim.runs).toBe(3);
    expect(events.filter((e): e is ToolErrorEvent => e.type === 'ToolErrorEvent').map((e) => e.attempts)).toEqual([3]);
    expect(engine.vfs.exists('/mine.txt')).toBe(false);
  });

  it('the timeout covers every run together', async () => {
    await open({ victim: { ...RW, limits: { max_attempts: 100, timeout_ms: 300 } } });
    engine.vfs.write('/n.txt', '0');
    const victim = alwaysLoses(() => new Promise((resolve) => setTimeout(resolve, 20)));
    const events = recordEvents(engine);
    const result = await engine.call('victim', {});
    expect(result.ok ? null : result.error.code).toBe('TIMEOUT');
    const attempts = events.filter((e): e is ToolErrorEvent => e.type === 'ToolErrorEvent').map((e) => e.attempts)[0] as number;
    expect(attempts).toBeGreaterThan(1);
    expect(attempts).toBeLessThan(100);
    expect(victim.runs).toBe(attempts);
    expect(engine.vfs.exists('/mine.txt')).toBe(false);
  });

  it('a call cancelled while it runs again stops and leaves nothing', async () => {
    await open({ victim: RW });
    engine.vfs.write('/n.txt', '0');
    const controller = new AbortController();
    const victim = alwaysLoses((run) => {
      if (run === 2) controller.abort();
    });
    const result = await engine.call('victim', {}, { signal: controller.signal });
    expect(result.ok ? null : result.error.code).toBe('CANCELLED');
    expect(victim.runs).toBe(2);
    expect(engine.vfs.exists('/mine.txt')).toBe(false);
    expect((await engine.status()).transactions).toBe(0);
  });

  it('the last run holds the gate: another call that finishes meanwhile commits after it, so it cannot lose again', async () => {
    await open({ victim: { ...RW, limits: { max_attempts: 3 } }, other: RW });
    engine.vfs.write('/n.txt', '0');
    const log: string[] = [];
    let runs = 0;
    let release = deferred();
    const reading = [deferred(), deferred(), deferred()];
    behaviours.set('victim', async (ctx) => {
      const run = runs++;
      const n = ctx.vfs.read('/n.txt').toString();
      reading[run]?.resolve();
      await release.promise;
      ctx.vfs.write('/victim.txt', n);
      log.push(`victim run ${run + 1} saw ${n}`);
      return { saw: n };
    });
    let others = 0;
    behaviours.set('other', (ctx) => {
      others++;
      ctx.vfs.write('/n.txt', `other ${others}`);
      log.push(`other ${others} ran`);
      return null;
    });
    const victim = engine.call('victim', {});
    const committed: Array<Promise<unknown>> = [];
    for (let run = 0; run < 3; run++) {
      await reading[run]?.promise;
      // Another call changes what the victim read, and its run ends before the victim's does.
      const other = engine.call('other', {}).then((r) => log.push(`other committed: ${r.ok}`));
      committed.push(other);
      while (log.filter((l) => l.endsWith(' ran')).length < run + 1) await new Promise((resolve) => setTimeout(resolve, 1));
      if (run < 2) await other;
      const go = release;
      release = deferred();
      go.resolve();
    }
    const result = await victim;
    await Promise.all(committed);
    expect(result).toMatchObject({ ok: true, data: { saw: 'other 2' }, meta: { attempts: 3 } });
    // The third other call ran before the victim's last run ended, but committed only after it.
    expect(log.slice(-3)).toEqual(['other 3 ran', 'victim run 3 saw other 2', 'other committed: true']);
    expect(engine.vfs.read('/n.txt').toString()).toBe('other 3');
    expect(engine.vfs.read('/victim.txt').toString()).toBe('other 2');
  });
});
