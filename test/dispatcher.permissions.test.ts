import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import type { Engine, EngineEvent, ErrResult, SecurityEvent, ToolResult } from '../src/index.js';
import { GrantSet, globToRegExp } from '../src/permissions.js';
import { definition, FakeRunner, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

let project: TempProject;
let fake: FakeRunner;

beforeEach(() => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'docs-reader.json': definition({ id: 'docs.reader', permissions: ['exec.js', 'vfs.read:/docs/**'] }),
    'reader.json': definition({ id: 'any.reader', permissions: ['exec.js', 'vfs.read'] }),
    'writer.json': definition({ id: 'any.writer', permissions: ['exec.js', 'vfs.write'] }),
  });
  const readPath = (ctx: Parameters<ConstructorParameters<typeof FakeRunner>[0][string]>[0]) =>
    ctx.vfs.read((ctx.input as { path: string }).path).toString();
  fake = new FakeRunner({
    'docs.reader': readPath,
    'any.reader': readPath,
    'any.writer': (ctx) => ctx.vfs.write((ctx.input as { path: string }).path, 'x').path,
  });
});

afterEach(() => project.remove());

async function withEngine(grants: readonly string[], fn: (engine: Engine, events: EngineEvent[]) => Promise<void>): Promise<void> {
  const engine = await openEngine(project, { grants, runners: [fake] });
  try {
    // Seed through the host API, which is not permission-checked.
    engine.vfs.write('/docs/a.md', '# a');
    engine.vfs.write('/docs/sub/b.md', '# b');
    engine.vfs.write('/docsecret.txt', 'secret');
    engine.vfs.write('/secret.txt', 'secret');
    engine.vfs.write('/out/keep.txt', 'keep');
    await fn(engine, recordEvents(engine));
  } finally {
    await engine.close();
  }
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

const security = (events: EngineEvent[]) => events.filter((e): e is SecurityEvent => e.type === 'SecurityEvent');

describe('the permission gate: declared ⊆ granted', () => {
  // tool, input, engine grants, expected missing permission (null: the call passes the gate)
  const GATE: Array<[string, Record<string, unknown>, string[], string | null]> = [
    ['fs.read', { path: '/docs/a.md' }, ['vfs.read'], null],
    ['fs.read', { path: '/docs/a.md' }, ['vfs.write'], 'vfs.read'],
    ['fs.read', { path: '/docs/a.md' }, [], 'vfs.read'],
    ['fs.write', { path: '/out/x', content: '' }, ['vfs.read'], 'vfs.write'],
    ['fs.move', { from: '/out/keep.txt', to: '/out/moved.txt' }, ['vfs.write'], 'vfs.read'],
    ['fs.move', { from: '/out/keep.txt', to: '/out/moved.txt' }, ['vfs.read'], 'vfs.write'],
    ['any.reader', { path: '/docs/a.md' }, ['vfs.read'], 'exec.js'],
    ['any.reader', { path: '/docs/a.md' }, ['vfs.read', 'exec.py'], 'exec.js'],
    ['any.reader', { path: '/docs/a.md' }, ['vfs.read', 'exec.js'], null],
    // A scoped grant passes the gate for an unscoped declaration (the run-time check then bounds it)...
    ['fs.read', { path: '/docs/a.md' }, ['vfs.read:/docs/**'], null],
    // ...but not when the declared and granted scopes cannot overlap.
    ['docs.reader', { path: '/docs/a.md' }, ['exec.js', 'vfs.read:/out/**'], 'vfs.read:/docs/**'],
    ['docs.reader', { path: '/docs/sub/b.md' }, ['exec.js', 'vfs.read:/docs/sub/**'], null],
  ];

  test.each(GATE)('%s %j with grants %j → missing %s', async (tool, input, grants, missing) => {
    await withEngine(grants, async (engine, events) => {
      const result = await engine.call(tool, input);
      if (missing === null) {
        expect(result.ok ? null : result.error).toBeNull();
        expect(security(events)).toEqual([]);
        return;
      }
      const error = failed(result);
      expect([error.stage, error.code, error.retryable]).toEqual(['permission', 'DENIED', false]);
      expect(error.details).toEqual({ permission: missing, granted: grants });
      expect(error.message).toContain(`needs "${missing}"`);
      // Exactly one SecurityEvent, for this run, between the invocation and the error.
      const [event, ...more] = security(events);
      expect(more).toEqual([]);
      expect(event).toMatchObject({
        type: 'SecurityEvent',
        run_id: result.meta.run_id,
        trace_id: result.meta.trace_id,
        tool,
        action: 'denied',
        permission: missing,
      });
      expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'SecurityEvent', 'ToolErrorEvent']);
      expect(fake.started).toEqual([]);
    });
  });
});

describe('path scopes at run time', () => {
  // path, expected (null: allowed), with grants vfs.read:/docs/**
  const SCOPED: Array<[string, string | null]> = [
    ['/docs/a.md', null],
    ['/docs/sub/b.md', null],
    ['docs/a.md', null],
    ['/docs/./sub/../a.md', null],
    ['/secret.txt', '/secret.txt'],
    ['/docsecret.txt', '/docsecret.txt'],
    ['/docs/../secret.txt', '/secret.txt'],
    ['/out/keep.txt', '/out/keep.txt'],
  ];

  test.each(SCOPED)('fs.read %s with vfs.read:/docs/** → %s', async (path, denied) => {
    await withEngine(['vfs.read:/docs/**'], async (engine, events) => {
      const result = await engine.call('fs.read', { path });
      if (denied === null) {
        expect(result.ok ? null : result.error).toBeNull();
        expect(security(events)).toEqual([]);
        return;
      }
      const error = failed(result);
      expect([error.stage, error.code]).toEqual(['permission', 'DENIED']);
      expect(error.details).toEqual({ permission: 'vfs.read', operation: 'read', path: denied });
      expect(error.message).toContain('the caller was not granted it for this path');
      expect(security(events)).toEqual([
        expect.objectContaining({ action: 'denied', permission: 'vfs.read', operation: `read ${denied}`, run_id: result.meta.run_id }),
      ]);
    });
  });

  it('lists the scoped folder itself, and nothing outside it', async () => {
    await withEngine(['vfs.read:/docs/**'], async (engine) => {
      expect(await engine.call('fs.list', { path: '/docs' })).toMatchObject({ ok: true });
      expect(failed(await engine.call('fs.list', { path: '/' })).code).toBe('DENIED');
    });
  });

  it('bounds a tool by what it declared, even when the caller was granted more', async () => {
    await withEngine(['vfs.read', 'exec.js'], async (engine, events) => {
      expect(await engine.call('docs.reader', { path: '/docs/a.md' })).toMatchObject({ ok: true, data: '# a' });
      const result = await engine.call('docs.reader', { path: '/secret.txt' });
      const error = failed(result);
      expect([error.stage, error.code]).toEqual(['permission', 'DENIED']);
      expect(error.message).toContain('the tool did not declare it for this path');
      expect(security(events)).toHaveLength(1);
    });
  });

  it('emits exactly one SecurityEvent for a run-time denial inside a sandboxed tool', async () => {
    await withEngine(['vfs.read:/docs/**', 'vfs.write:/out/**', 'exec.js'], async (engine, events) => {
      const result = await engine.call('any.writer', { path: '/docs/evil.md' });
      const error = failed(result);
      expect([error.stage, error.code]).toEqual(['permission', 'DENIED']);
      expect(security(events)).toEqual([
        expect.objectContaining({ tool: 'any.writer', action: 'denied', permission: 'vfs.write', operation: 'write /docs/evil.md' }),
      ]);
      expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'SecurityEvent', 'ToolErrorEvent']);
      expect(engine.vfs.exists('/docs/evil.md')).toBe(false);
    });
  });

  it('emits one SecurityEvent when fs.move is refused on its target', async () => {
    await withEngine(['vfs.read', 'vfs.write:/out/**'], async (engine, events) => {
      const error = failed(await engine.call('fs.move', { from: '/out/keep.txt', to: '/docs/keep.txt' }));
      expect(error.details).toMatchObject({ permission: 'vfs.write', path: '/docs/keep.txt' });
      expect(security(events)).toHaveLength(1);
      expect(engine.vfs.exists('/out/keep.txt')).toBe(true);
    });
  });
});

describe('folder operations under a pattern scope', () => {
  // "vfs.write:/docs/*.md" matches a folder named /docs/notes.md, but not the files inside it.
  const GRANTS = ['vfs.read', 'vfs.write:/docs/*.md'];

  it('refuses to delete a folder holding paths the caller may not write', async () => {
    await withEngine(GRANTS, async (engine, events) => {
      engine.vfs.write('/docs/notes.md/secret.txt', 'keep me');
      expect(failed(await engine.call('fs.write', { path: '/docs/notes.md/secret.txt', content: 'x' })).code).toBe('DENIED');
      const result = await engine.call('fs.delete', { path: '/docs/notes.md', recursive: true });
      const error = failed(result);
      expect([error.stage, error.code]).toEqual(['permission', 'DENIED']);
      expect(error.details).toEqual({ permission: 'vfs.write', operation: 'delete', path: '/docs/notes.md/secret.txt' });
      expect(security(events).filter((e) => e.run_id === result.meta.run_id)).toHaveLength(1);
      expect(engine.vfs.read('/docs/notes.md/secret.txt').toString()).toBe('keep me');
    });
  });

  it('refuses to move such a folder, or to overwrite one', async () => {
    await withEngine(GRANTS, async (engine) => {
      engine.vfs.write('/docs/x.md/inner.txt', 'x');
      engine.vfs.write('/docs/y.md/other.txt', 'y');
      const move = failed(await engine.call('fs.move', { from: '/docs/x.md', to: '/docs/z.md' }));
      expect(move.details).toEqual({ permission: 'vfs.write', operation: 'move', path: '/docs/x.md/inner.txt' });
      engine.vfs.mkdir('/docs/empty.md');
      const over = failed(await engine.call('fs.move', { from: '/docs/empty.md', to: '/docs/y.md', overwrite: true }));
      expect(over.details).toEqual({ permission: 'vfs.write', operation: 'move', path: '/docs/y.md/other.txt' });
      expect(engine.vfs.exists('/docs/x.md/inner.txt') && engine.vfs.exists('/docs/y.md/other.txt')).toBe(true);
    });
  });

  it('refuses to move a folder to where its contents could not be written', async () => {
    await withEngine(['vfs.read', 'vfs.write:/docs/**', 'vfs.write:/out/*.md'], async (engine) => {
      engine.vfs.write('/docs/pack/a.txt', 'a');
      const error = failed(await engine.call('fs.move', { from: '/docs/pack', to: '/out/pack.md' }));
      expect(error.details).toEqual({ permission: 'vfs.write', operation: 'move', path: '/out/pack.md/a.txt' });
    });
  });

  it('still deletes and moves whole folders under a folder scope', async () => {
    await withEngine(['vfs.read', 'vfs.write:/out/**'], async (engine) => {
      engine.vfs.write('/out/deep/a/b.txt', 'b');
      expect(await engine.call('fs.move', { from: '/out/deep', to: '/out/moved' })).toMatchObject({ ok: true });
      expect(await engine.call('fs.delete', { path: '/out', recursive: true })).toMatchObject({ ok: true });
      expect(engine.vfs.exists('/out')).toBe(false);
    });
  });
});

describe('paths that try to leave the VFS', () => {
  const ESCAPES: string[] = [
    '/../etc/passwd',
    '../../etc/passwd',
    '/docs/../../etc/passwd',
    '/etc/passwd\u0000.md',
    'C:\\Windows\\win.ini',
    'C:/Windows/win.ini',
    '\\\\server\\share\\x',
    'file:///etc/passwd',
    '/docs/%2e%2e/%2e%2e/etc/passwd',
    '/%2E%2E/etc',
    '..\\..\\etc\\passwd',
  ];

  test.each(ESCAPES)('fs.read %j → execution INVALID_PATH and one SecurityEvent "intrusion"', async (path) => {
    await withEngine(['vfs.read'], async (engine, events) => {
      const result = await engine.call('fs.read', { path });
      const error = failed(result);
      expect([error.stage, error.code]).toEqual(['execution', 'INVALID_PATH']);
      expect(security(events)).toEqual([
        expect.objectContaining({
          type: 'SecurityEvent',
          run_id: result.meta.run_id,
          tool: 'fs.read',
          action: 'intrusion',
          permission: null,
          operation: `read ${path.length > 200 ? `${path.slice(0, 200)}…` : path}`,
        }),
      ]);
    });
  });

  it('reports an escape from inside a sandboxed tool the same way', async () => {
    await withEngine(['vfs.write', 'exec.js'], async (engine, events) => {
      const error = failed(await engine.call('any.writer', { path: '../../../tmp/pwned' }));
      expect([error.stage, error.code]).toEqual(['execution', 'INVALID_PATH']);
      expect(security(events)).toEqual([expect.objectContaining({ action: 'intrusion', tool: 'any.writer', operation: 'write ../../../tmp/pwned' })]);
    });
  });

  test.each(['/docs/a\u0007.md', '/docs/\u0085x', 'a\\b'])('a merely malformed path %j is INVALID_PATH without a SecurityEvent', async (path) => {
    await withEngine(['vfs.read'], async (engine, events) => {
      expect(failed(await engine.call('fs.read', { path })).code).toBe('INVALID_PATH');
      expect(security(events)).toEqual([]);
    });
  });
});

describe('narrowing grants per call', () => {
  const ENGINE = ['vfs.read:/docs/**', 'vfs.write:/out/**', 'exec.js'];

  // requested, kept
  const NARROW: Array<[string[], string[]]> = [
    [['vfs.read:/docs/**'], ['vfs.read:/docs/**']],
    [['vfs.read:/docs/sub/**'], ['vfs.read:/docs/sub/**']],
    [['vfs.read:/docs/a.md'], ['vfs.read:/docs/a.md']],
    [['vfs.read:/docs'], ['vfs.read:/docs']],
    [['vfs.read:/docs/*.md'], ['vfs.read:/docs/*.md']],
    [['vfs.read'], []],
    [['vfs.read:/**'], []],
    [['vfs.read:/docs*'], []],
    [['vfs.read:/docs*/**'], []],
    [['vfs.read:/doc?/**'], []],
    [['vfs.read:/out/**'], []],
    [['vfs.write:/docs/**'], []],
    [['sys.exec', 'net.fetch', 'exec.py'], []],
    [
      ['exec.js', 'vfs.write:/out/tmp/**'],
      ['exec.js', 'vfs.write:/out/tmp/**'],
    ],
    [[], []],
  ];

  test.each(NARROW)('narrowing to %j keeps %j', (requested, kept) => {
    expect(new GrantSet(ENGINE).narrow(requested).texts()).toEqual(kept);
  });

  it('never widens: whatever a kept scope matches, the engine grant matches too', () => {
    const scopes = [
      '/**',
      '/docs/**',
      '/docs',
      '/docs/*',
      '/docs/*.md',
      '/docs*',
      '/docs?',
      '/docs/**/a',
      '/docs/a**',
      '/d*/**',
      '/*',
      '/docs/sub/**',
    ];
    const paths = [
      '/',
      '/docs',
      '/docs/a',
      '/docs/a.md',
      '/docs/a/b',
      '/docsecret',
      '/docs2/x',
      '/doc',
      '/d/x',
      '/docs/x/a',
      '/docs/sub',
      '/docsx/a',
      '/other',
    ];
    let kept = 0;
    for (const outer of scopes) {
      const engineGrants = new GrantSet([`vfs.read:${outer}`]);
      const outerRe = globToRegExp(outer);
      for (const inner of scopes) {
        if (engineGrants.narrow([`vfs.read:${inner}`]).texts().length === 0) continue;
        kept++;
        const innerRe = globToRegExp(inner);
        for (const path of paths) {
          if (innerRe.test(path)) expect(outerRe.test(path), `${inner} kept under ${outer} matches ${path}`).toBe(true);
        }
      }
    }
    expect(kept).toBeGreaterThan(scopes.length); // the check is not vacuous
  });

  it('cannot reach outside the engine grant through a per-call grant', async () => {
    await withEngine(ENGINE, async (engine) => {
      const wide = failed(await engine.call('fs.read', { path: '/docsecret.txt' }, { grants: ['vfs.read:/docs*'] }));
      expect([wide.stage, wide.code]).toEqual(['permission', 'DENIED']);
      expect(wide.details).toMatchObject({ permission: 'vfs.read', granted: [] });
      const narrow = failed(await engine.call('fs.read', { path: '/docs/a.md' }, { grants: ['vfs.read:/docs/sub/**'] }));
      expect([narrow.stage, narrow.code]).toEqual(['permission', 'DENIED']);
      expect(await engine.call('fs.read', { path: '/docs/sub/b.md' }, { grants: ['vfs.read:/docs/sub/**'] })).toMatchObject({ ok: true });
      // Without per-call grants the engine's apply again.
      expect(await engine.call('fs.read', { path: '/docs/a.md' })).toMatchObject({ ok: true });
    });
  });

  it('keeps per-call grant sets apart, even when their texts join alike', async () => {
    await withEngine(['vfs.read', 'vfs.write'], async (engine) => {
      const both = await engine.call('fs.write', { path: '/a', content: '1' }, { grants: ['vfs.read:/a', 'vfs.write'] });
      expect(both.ok).toBe(true);
      // One grant whose scope contains a newline: it grants no vfs.write at all.
      const one = failed(await engine.call('fs.write', { path: '/a', content: '2' }, { grants: ['vfs.read:/a\nvfs.write'] }));
      expect([one.stage, one.code]).toEqual(['permission', 'DENIED']);
      expect(engine.vfs.read('/a').toString()).toBe('1');
    });
  });
});
