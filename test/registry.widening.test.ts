import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Engine, SecurityEvent } from '../src/index.js';
import { createEngine, EngineConfigError } from '../src/index.js';
import { definition, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * A definition rewritten while the engine runs may ask for more than the version it replaces. Each test
 * rewrites the file and calls `refresh()` (no watcher: the reload is the subject, not its timing).
 */

let project: TempProject;
let engine: Engine;
let security: SecurityEvent[];

async function open(permissions: string[], options: Parameters<typeof openEngine>[1] = {}): Promise<void> {
  project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo', permissions }) });
  engine = await openEngine(project, options);
  security = [];
  engine.events.on('security', (event) => security.push(event));
}

async function rewrite(permissions: string[], description = `asks for ${permissions.join(' ')}`): Promise<void> {
  project.write('echo.json', definition({ id: 'demo.echo', permissions, description }));
  await engine.refresh();
}

afterEach(async () => {
  await engine?.close();
  project?.remove();
});

describe('a reload that widens permissions (default: allowed, and reported)', () => {
  it('serves the wider version from the next call and emits one SecurityEvent naming old and new', async () => {
    await open(['exec.js', 'vfs.read']);
    await rewrite(['exec.js', 'vfs.read', 'vfs.write', 'exec.py']);
    expect(engine.tool('demo.echo')?.permissions).toEqual(['exec.js', 'vfs.read', 'vfs.write', 'exec.py']);
    expect(security).toHaveLength(1);
    expect(security[0]).toMatchObject({
      type: 'SecurityEvent',
      tool: 'demo.echo',
      action: 'widened',
      run_id: null,
      trace_id: null,
      permission: 'vfs.write',
      operation: 'reload tools/echo.json',
      previous_permissions: ['exec.js', 'vfs.read'],
      permissions: ['exec.js', 'vfs.read', 'vfs.write', 'exec.py'],
      added_permissions: ['vfs.write', 'exec.py'],
    });
    expect((await engine.call('demo.echo', { a: 1 })).ok).toBe(true);
    // The wider version is now the approved one: a rewrite that keeps it is no widening.
    await rewrite(['exec.js', 'vfs.read', 'vfs.write', 'exec.py'], 'same permissions, new text');
    expect(security).toHaveLength(1);
  });

  it('counts a scope made wider, but not one made narrower or a permission dropped', async () => {
    await open(['exec.js', 'vfs.write:/out/**']);
    await rewrite(['exec.js', 'vfs.write:/out/reports/**']);
    await rewrite(['exec.js']);
    expect(security).toEqual([]);
    await rewrite(['exec.js', 'vfs.write:/out/reports/**']);
    await rewrite(['exec.js', 'vfs.write']);
    expect(security.map((e) => [e.action, e.added_permissions, e.previous_permissions])).toEqual([
      ['widened', ['vfs.write:/out/reports/**'], ['exec.js']],
      ['widened', ['vfs.write'], ['exec.js', 'vfs.write:/out/reports/**']],
    ]);
  });

  it('is not reported for tools that were there at the start or that are new ids', async () => {
    await open(['exec.js', 'vfs.write']);
    project.write('other.json', definition({ id: 'demo.other', permissions: ['exec.js', 'vfs.write', 'sys.info'] }));
    await engine.refresh();
    expect(engine.tool('demo.other')).toBeDefined();
    expect(security).toEqual([]);
  });
});

describe('"permission_widening": "refuse"', () => {
  it('keeps serving the approved version, reports the refused one once, and applies it after a restart', async () => {
    await open(['exec.js', 'vfs.read'], { permissionWidening: 'refuse' });
    await rewrite(['exec.js', 'vfs.read', 'vfs.write']);
    expect(engine.tool('demo.echo')?.permissions).toEqual(['exec.js', 'vfs.read']);
    const [problem] = engine.problems();
    expect(problem).toMatchObject({ file: 'tools/echo.json', id: 'demo.echo', at: '/permissions', stale: true });
    expect(problem?.message).toContain('asks for vfs.write beyond the approved ["exec.js","vfs.read"]');
    expect(problem?.message).toContain('restart the engine to apply it (still serving the approved version)');
    await engine.refresh();
    await engine.refresh();
    expect(security.map((e) => [e.action, e.added_permissions])).toEqual([['widening_refused', ['vfs.write']]]);
    expect((await engine.call('demo.echo', { a: 1 })).ok).toBe(true);

    // Back to what was approved: served, and the problem is gone.
    await rewrite(['exec.js'], 'narrower');
    expect(engine.tool('demo.echo')?.description).toBe('narrower');
    expect(engine.problems()).toEqual([]);

    await engine.close();
    project.write('echo.json', definition({ id: 'demo.echo', permissions: ['exec.js', 'vfs.read', 'vfs.write'] }));
    engine = await openEngine(project, { permissionWidening: 'refuse' });
    expect(engine.tool('demo.echo')?.permissions).toEqual(['exec.js', 'vfs.read', 'vfs.write']);
    expect(engine.problems()).toEqual([]);
  });

  it('still refuses when the file is removed and comes back wider', async () => {
    await open(['exec.js'], { permissionWidening: 'refuse' });
    rmSync(join(project.tools, 'echo.json'));
    await engine.refresh();
    expect(engine.tool('demo.echo')).toBeUndefined();
    project.write('echo-again.json', definition({ id: 'demo.echo', permissions: ['exec.js', 'sys.exec'] }));
    await engine.refresh();
    expect(engine.tool('demo.echo')).toBeUndefined();
    const problem = engine.problems().find((p) => p.file === 'tools/echo-again.json');
    expect(problem?.message).toContain('asks for sys.exec beyond the approved ["exec.js"]');
    expect(problem?.stale).toBeUndefined();
    expect(security.map((e) => e.action)).toEqual(['widening_refused']);
  });

  it('is read from arium.json, and a wrong value is a start-up error naming the field', async () => {
    project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
    writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ permission_widening: 'refuse' }));
    engine = await openEngine(project);
    security = [];
    engine.events.on('security', (event) => security.push(event));
    await rewrite(['exec.js', 'net.fetch']);
    expect(engine.tool('demo.echo')?.permissions).toEqual(['exec.js']);
    expect(security.map((e) => e.action)).toEqual(['widening_refused']);

    writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ permission_widening: 'deny' }));
    const error = await createEngine({ workspace: project.workspace, project: project.project, watch: false, persist: false }).catch((e) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).field).toBe('arium.json permission_widening');
    writeFileSync(join(project.dir, 'arium.json'), '{}');
    // biome-ignore lint/suspicious/noExplicitAny: a JavaScript caller passing a wrong value
    const fromCode = await openEngine(project, { permissionWidening: 'maybe' as any }).catch((e) => e);
    expect((fromCode as EngineConfigError).field).toBe('permissionWidening');
  });
});
