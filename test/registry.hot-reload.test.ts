import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Engine, RegistryChangeEvent, Runner } from '../src/index.js';
import { definition, nextEvent, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * The design target is "within a second" (chokidar on inotify plus a 40 ms debounce). Each wait below is
 * bounded generously so a loaded machine does not turn a slow event into a failure; what must never
 * happen (no event at all, or a wrong registry) still fails.
 */
const WAIT_MS = 5000;

let project: TempProject;
let engine: Engine;

beforeEach(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({ id: 'demo.echo', description: 'version 1' }),
  });
  engine = await openEngine(project, { watch: true });
});

afterEach(async () => {
  await engine.close();
  project.remove();
});

const registryEvent = (match: (e: RegistryChangeEvent) => boolean) => nextEvent(engine, 'registry', match, WAIT_MS);

describe('hot reload of the tools folder', () => {
  it('adds a tool when a file appears, and emits a RegistryChangeEvent', async () => {
    const seen = registryEvent((e) => e.added.includes('demo.new'));
    project.write('new.json', definition({ id: 'demo.new' }));
    const event = await seen;
    expect(event).toMatchObject({ type: 'RegistryChangeEvent', run_id: null, trace_id: null, added: ['demo.new'], updated: [], removed: [] });
    expect(new Date(event.at).toISOString()).toBe(event.at);
    expect(engine.tool('demo.new')?.source).toBe('tools/new.json');
  });

  it('updates a tool when its file changes', async () => {
    const seen = registryEvent((e) => e.updated.includes('demo.echo'));
    project.write('echo.json', definition({ id: 'demo.echo', description: 'version 2' }));
    await seen;
    expect(engine.tool('demo.echo')?.description).toBe('version 2');
  });

  it('updates a tool when its code changes, though its definition did not', async () => {
    const seen = registryEvent((e) => e.updated.includes('demo.echo'));
    project.write('tool.js', 'export default async function run() { return { changed: true }; }\n');
    const event = await seen;
    expect(event.added).toEqual([]);
  });

  it('picks up an editor-style save (write a hidden temp file, rename it over the definition)', async () => {
    const seen = registryEvent((e) => e.updated.includes('demo.echo'));
    const temp = project.write('.echo.json.tmp', definition({ id: 'demo.echo', description: 'renamed in' }));
    renameSync(temp, join(project.tools, 'echo.json'));
    await seen;
    expect(engine.tool('demo.echo')?.description).toBe('renamed in');
  });

  it('tells the runner which tool versions are gone (forget) and which are new (prepare)', async () => {
    const seen: string[] = [];
    const recorder: Runner = {
      name: 'js-runner',
      interruptible: true,
      run: async () => ({}),
      prepare: (tool) => seen.push(`prepare ${tool.spec.id} ${tool.spec.description}`),
      forget: (tool) => seen.push(`forget ${tool.spec.id} ${tool.spec.description}`),
      status: async () => ({ available: true }),
      close: async () => {},
    };
    await engine.close();
    engine = await openEngine(project, { watch: true, runners: [recorder] });
    const updated = registryEvent((e) => e.updated.includes('demo.echo'));
    project.write('echo.json', definition({ id: 'demo.echo', description: 'version 2' }));
    await updated;
    const removed = registryEvent((e) => e.removed.includes('demo.echo'));
    rmSync(join(project.tools, 'echo.json'));
    await removed;
    expect(seen).toEqual(['prepare demo.echo version 1', 'forget demo.echo version 1', 'prepare demo.echo version 2', 'forget demo.echo version 2']);
  });

  it('removes a tool when its file is deleted', async () => {
    const seen = registryEvent((e) => e.removed.includes('demo.echo'));
    rmSync(join(project.tools, 'echo.json'));
    await seen;
    expect(engine.tool('demo.echo')).toBeUndefined();
    const call = await engine.call('demo.echo', {});
    expect(call.ok ? null : [call.error.stage, call.error.code]).toEqual(['validation', 'UNKNOWN_TOOL']);
  });

  it('keeps serving the last good version of a half-written file, flagged stale, until it is whole again', async () => {
    const broken = registryEvent((e) => e.problems.some((p) => p.file === 'tools/echo.json'));
    project.write('echo.json', '{ "id": "demo.echo", "description": "version 2 but the edit');
    const event = await broken;
    const problem = event.problems.find((p) => p.file === 'tools/echo.json');
    expect(problem).toMatchObject({ stale: true, at: expect.stringMatching(/^1:\d+$/) });
    expect(problem?.message).toContain('malformed JSON');
    expect(problem?.message).toContain('still serving the last version that loaded');
    expect(event.removed).toEqual([]);
    expect(engine.tool('demo.echo')?.description).toBe('version 1');
    expect(engine.problems()).toEqual(event.problems);

    // Written at once, ~45 ms after chokidar reported the broken version: inside its 50 ms change throttle,
    // which drops this change. The registry's settle pass must still find it (it used to stay stale).
    const fixed = registryEvent((e) => e.updated.includes('demo.echo'));
    project.write('echo.json', definition({ id: 'demo.echo', description: 'version 2' }));
    const after = await fixed;
    expect(after.problems).toEqual([]);
    expect(engine.tool('demo.echo')?.description).toBe('version 2');
    expect(engine.problems()).toEqual([]);
  });

  it('treats an emptied file as half-written too', async () => {
    const broken = registryEvent((e) => e.problems.some((p) => p.file === 'tools/echo.json'));
    writeFileSync(join(project.tools, 'echo.json'), '');
    const problem = (await broken).problems.find((p) => p.file === 'tools/echo.json');
    expect(problem?.stale).toBe(true);
    expect(problem?.message).toContain('the file is empty');
    expect(engine.tool('demo.echo')).toBeDefined();
  });

  it('reports a new file that never loaded, without serving it and without stale', async () => {
    const seen = registryEvent((e) => e.problems.some((p) => p.file === 'tools/half.json'));
    project.write('half.json', '{ "id": "demo.half", ');
    const problem = (await seen).problems.find((p) => p.file === 'tools/half.json');
    expect(problem?.stale).toBeUndefined();
    expect(problem?.message).toContain('malformed JSON');
    expect(engine.tool('demo.half')).toBeUndefined();
    expect(engine.tool('demo.echo')).toBeDefined();
  });

  it('a file added later that reuses a serving id never takes it over, even when its name sorts first', async () => {
    const dup = registryEvent((e) => e.problems.some((p) => p.file === 'tools/aa-echo.json'));
    project.write('aa-echo.json', definition({ id: 'demo.echo', description: 'the newcomer' }));
    const problem = (await dup).problems.find((p) => p.file === 'tools/aa-echo.json');
    expect(problem).toMatchObject({ id: 'demo.echo', at: '/id' });
    expect(problem?.message).toBe('duplicate id "demo.echo": already defined by tools/echo.json; the file already serving it keeps it');
    expect(engine.tool('demo.echo')).toMatchObject({ description: 'version 1', source: 'tools/echo.json' });
    // Still so after an explicit re-read, and after the serving file changes.
    await engine.refresh();
    expect(engine.tool('demo.echo')?.source).toBe('tools/echo.json');
    const changed = registryEvent((e) => e.updated.includes('demo.echo'));
    project.write('echo.json', definition({ id: 'demo.echo', description: 'version 2' }));
    await changed;
    expect(engine.tool('demo.echo')).toMatchObject({ description: 'version 2', source: 'tools/echo.json' });
    // When the serving file gives the id up, the newcomer gets it on that same reload.
    const handover = registryEvent((e) => e.updated.includes('demo.echo') && e.added.includes('demo.renamed'));
    project.write('echo.json', definition({ id: 'demo.renamed' }));
    const event = await handover;
    expect(event.problems).toEqual([]);
    expect(engine.tool('demo.echo')).toMatchObject({ description: 'the newcomer', source: 'tools/aa-echo.json' });
  });

  it('at the first load, of two files with one id the first in name order wins', async () => {
    await engine.close();
    project.write('aa-echo.json', definition({ id: 'demo.echo', description: 'first by name' }));
    engine = await openEngine(project, { watch: true });
    expect(engine.tool('demo.echo')).toMatchObject({ description: 'first by name', source: 'tools/aa-echo.json' });
    expect(engine.problems()).toEqual([
      {
        file: 'tools/echo.json',
        id: 'demo.echo',
        at: '/id',
        message: 'duplicate id "demo.echo": already defined by tools/aa-echo.json; the first file (in name order) wins',
      },
    ]);
  });

  it('hands an id over when the file that owned it is deleted and a duplicate remains', async () => {
    const dup = registryEvent((e) => e.problems.some((p) => p.file === 'tools/zz-echo.json'));
    project.write('zz-echo.json', definition({ id: 'demo.echo', description: 'the duplicate' }));
    expect((await dup).problems.find((p) => p.file === 'tools/zz-echo.json')?.message).toContain('duplicate id "demo.echo"');
    expect(engine.tool('demo.echo')?.description).toBe('version 1');

    const handover = registryEvent((e) => e.updated.includes('demo.echo'));
    rmSync(join(project.tools, 'echo.json'));
    const event = await handover;
    expect(event.problems).toEqual([]);
    expect(engine.tool('demo.echo')).toMatchObject({ description: 'the duplicate', source: 'tools/zz-echo.json' });
  });
});

describe('the tools folder itself', () => {
  /** Runs `body` with an engine on a project that has no tools folder yet; closes and removes both after. */
  async function bare(watch: boolean, body: (project: TempProject, engine: Engine) => Promise<void>): Promise<void> {
    const project = tempProject();
    rmSync(project.tools, { recursive: true });
    const engine = await openEngine(project, { watch });
    try {
      await body(project, engine);
    } finally {
      await engine.close();
      project.remove();
    }
  }

  it('picks up a tools folder made after the engine started, and its tools run', async () => {
    await bare(true, async (project, engine) => {
      expect(engine.problems()).toEqual([]);
      const seen = nextEvent(engine, 'registry', (e) => e.added.includes('demo.late'), WAIT_MS);
      // Made with its files already in it (as a rename would), then a file added afterwards.
      const staged = join(project.dir, '.staging');
      mkdirSync(staged);
      writeFileSync(join(staged, 'tool.js'), TRIVIAL_JS);
      writeFileSync(join(staged, 'late.json'), definition({ id: 'demo.late' }));
      renameSync(staged, project.tools);
      await seen;
      expect(await engine.call('demo.late', { x: 1 })).toMatchObject({ ok: true, data: { x: 1 } });
      const later = nextEvent(engine, 'registry', (e) => e.added.includes('demo.later'), WAIT_MS);
      project.write('later.json', definition({ id: 'demo.later' }));
      await later;
    });
  });

  it('drops the tools of a removed tools folder without a problem, and takes them back when it returns', async () => {
    await bare(true, async (project, engine) => {
      const added = nextEvent(engine, 'registry', (e) => e.added.includes('demo.echo'), WAIT_MS);
      project.write('tool.js', TRIVIAL_JS);
      project.write('echo.json', definition({ id: 'demo.echo' }));
      await added;
      const removed = nextEvent(engine, 'registry', (e) => e.removed.includes('demo.echo'), WAIT_MS);
      rmSync(project.tools, { recursive: true });
      expect((await removed).problems).toEqual([]);
      expect(engine.tool('demo.echo')).toBeUndefined();
      const back = nextEvent(engine, 'registry', (e) => e.added.includes('demo.echo'), WAIT_MS);
      project.write('tool.js', TRIVIAL_JS);
      project.write('echo.json', definition({ id: 'demo.echo' }));
      await back;
    });
  });

  it('says so when tools is a file, not a folder', async () => {
    await bare(true, async (project, engine) => {
      const seen = nextEvent(engine, 'registry', (e) => e.problems.some((p) => p.file === 'tools'), WAIT_MS);
      writeFileSync(project.tools, '{}');
      expect((await seen).problems).toEqual([
        { file: 'tools', message: 'tools is not a folder: tool definitions go in a folder named tools in the project' },
      ]);
    });
  });

  it('without watching, refresh() finds a tools folder made after the start', async () => {
    await bare(false, async (project, engine) => {
      project.write('tool.js', TRIVIAL_JS);
      project.write('late.json', definition({ id: 'demo.late' }));
      expect(engine.tool('demo.late')).toBeUndefined();
      await engine.refresh();
      expect(engine.tool('demo.late')?.source).toBe('tools/late.json');
    });
  });
});
