// A runner that is not built in, registered from outside the package: the test and the runner import
// only the published entry point ('arium', i.e. dist/src/index.js), as a user's code would.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createEngine, DEFAULT_RUNNERS, type Engine, type EngineOptions, type Runner, type RunnerDefinition, TOOL_META_SCHEMA } from 'arium';
import { afterEach, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ESM example without types, as a user's runner may be.
import { templateRunner as untyped } from '../examples/runners/template-runner.mjs';
import { definition, type TempProject, tempProject } from './support/project.js';

const templateRunner = untyped as RunnerDefinition;

const greet = definition({
  id: 'text.greet',
  runner: 'tmpl-runner',
  entry: 'greet.tmpl',
  schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
  permissions: ['exec.tmpl', 'vfs.read:/people/**'],
});

let project: TempProject;
let engine: Engine | null = null;

async function open(files: Record<string, string>, options: EngineOptions = {}): Promise<Engine> {
  project = tempProject(files, 'arium-plugin-');
  engine = await createEngine({ workspace: project.workspace, project: 'p', watch: false, persist: false, runners: [templateRunner], ...options });
  return engine;
}

afterEach(async () => {
  await engine?.close();
  engine = null;
  project?.remove();
});

describe('a runner from outside the package', () => {
  it('loads its tools and runs them end to end, reading the VFS through the checked view', async () => {
    const e = await open({ 'greet.json': greet, 'greet.tmpl': 'Hello, {{name}}! {{file:/people/note.txt}}' });
    expect(e.problems()).toEqual([]);
    expect(e.tool('text.greet')?.runner).toBe('tmpl-runner');
    e.vfs.write('/people/note.txt', 'Welcome back.');
    const r = await e.call('text.greet', { name: 'Ada' });
    expect(r).toMatchObject({ ok: true, data: { text: 'Hello, Ada! Welcome back.' } });
    expect(r.meta.logs).toEqual([expect.objectContaining({ level: 'info', message: 'rendered greet.tmpl' })]);
    const status = await e.status();
    expect(status.runners['tmpl-runner']).toMatchObject({ available: true, calls: 1, cached: 1 });
    expect(Object.keys(status.runners)).toEqual(['builtin', 'js-runner', 'py-runner', 'macro', 'code', 'wasm-runner', 'tmpl-runner']);
  });

  it('prepares a tool before the call’s clock starts: a slow ready() does not count against timeout_ms', async () => {
    let readied = 0;
    const slowReady: RunnerDefinition = {
      ...templateRunner,
      create: (context) => {
        const inner = templateRunner.create(context) as Runner;
        const runner: Runner = {
          name: inner.name,
          interruptible: inner.interruptible,
          run: (ctx) => inner.run(ctx),
          status: () => inner.status(),
          close: () => inner.close(),
          ready: async () => {
            readied++;
            await new Promise((resolve) => setTimeout(resolve, 400));
          },
        };
        return runner;
      },
    };
    const e = await open({ 'greet.json': greet, 'greet.tmpl': 'Hello, {{name}}!' }, { runners: [slowReady] });
    const r = await e.call('text.greet', { name: 'Ada' }, { timeout_ms: 150 });
    expect(r).toMatchObject({ ok: true, data: { text: 'Hello, Ada!' } });
    expect(readied).toBe(1);
  });

  it('is held to the permissions the tool declares and the caller is granted', async () => {
    const e = await open({ 'greet.json': greet, 'greet.tmpl': '{{file:/secrets/key}}' });
    e.vfs.write('/secrets/key', 'k');
    const outside = await e.call('text.greet', { name: 'x' });
    expect(outside).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    const ungranted = await e.call('text.greet', { name: 'x' }, { grants: ['vfs.read'] });
    expect(ungranted).toMatchObject({ ok: false, error: { code: 'DENIED', stage: 'permission' } });
    expect((ungranted as { error: { message: string } }).error.message).toContain('exec.tmpl');
  });

  it('commits what its tools write, and nothing when they fail', async () => {
    const e = await open({
      'save.json': definition({
        id: 'text.save',
        runner: 'tmpl-runner',
        entry: 'save.tmpl',
        schema: { type: 'object' },
        permissions: ['exec.tmpl', 'vfs.write:/out/**'],
      }),
      'save.tmpl': '=> /out/{{who}}.txt\nHi {{who}}, {{missing}}',
      'ok.json': definition({
        id: 'text.ok',
        runner: 'tmpl-runner',
        entry: 'ok.tmpl',
        schema: { type: 'object' },
        permissions: ['exec.tmpl', 'vfs.write:/out/**'],
      }),
      'ok.tmpl': '=> /out/done.txt\nall {{n}} done',
    });
    const failed = await e.call('text.save', { who: 'ada' });
    expect(failed).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR', stage: 'execution' } });
    const written = await e.call('text.ok', { n: 3 });
    expect(written).toMatchObject({ ok: true, data: { path: '/out/done.txt', bytes: 10 } });
    expect(e.vfs.read('/out/done.txt').toString()).toBe('all 3 done');
    expect(e.vfs.exists('/out/ada.txt')).toBe(false);
  });

  it('serves concurrent callers, every write landing once', async () => {
    const e = await open({
      'put.json': definition({
        id: 'text.put',
        runner: 'tmpl-runner',
        entry: 'put.tmpl',
        schema: { type: 'object' },
        permissions: ['exec.tmpl', 'vfs.write'],
      }),
      'put.tmpl': '=> /out/{{i}}.txt\n{{i}}',
    });
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => e.call('text.put', { i })));
    expect(results.every((r) => r.ok)).toBe(true);
    expect(e.vfs.list('/out').entries.length).toBe(40);
    for (let i = 0; i < 40; i++) expect(e.vfs.read(`/out/${i}.txt`).toString()).toBe(String(i));
  });

  it('checks its tools with its own extensions and permission, and reads its own arium.json key', async () => {
    project = tempProject(
      {
        'wrong-ext.json': definition({ id: 'a.ext', runner: 'tmpl-runner', entry: 'a.txt', permissions: ['exec.tmpl'] }),
        'a.txt': 'x',
        'no-perm.json': definition({ id: 'a.perm', runner: 'tmpl-runner', entry: 'big.tmpl', permissions: [] }),
        'typo.json': definition({ id: 'a.typo', runner: 'tmpl-runnr', entry: 'big.tmpl', permissions: ['exec.tmpl'] }),
        'big.json': definition({ id: 'a.big', runner: 'tmpl-runner', entry: 'big.tmpl', permissions: ['exec.tmpl'] }),
        'big.tmpl': '{{text}}{{text}}',
      },
      'arium-plugin-',
    );
    writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ template_max_bytes: 10 }));
    engine = await createEngine({ workspace: project.workspace, project: 'p', watch: false, persist: false, runners: [templateRunner] });
    const problems = Object.fromEntries(engine.problems().map((p) => [p.file, p.message]));
    expect(problems['tools/wrong-ext.json']).toContain('"entry" of a tmpl-runner tool must end in .tmpl');
    expect(problems['tools/no-perm.json']).toContain('runner "tmpl-runner" needs the permission "exec.tmpl"');
    expect(problems['tools/typo.json']).toMatch(/runner.*tmpl-runner/);
    expect(await engine.call('a.big', { text: '12345' })).toMatchObject({ ok: true, data: { text: '1234512345' } });
    expect(await engine.call('a.big', { text: '123456' })).toMatchObject({ ok: false, error: { code: 'LIMIT_EXCEEDED' } });
    // The key is the runner's: without the runner, arium.json does not pass.
    await expect(createEngine({ workspace: project.workspace, project: 'p', watch: false, persist: false })).rejects.toThrow(/template_max_bytes/);
  });

  it('adds nothing to an engine that was not given it', async () => {
    const e = await open({ 'greet.json': greet, 'greet.tmpl': 'x' }, { runners: [] });
    expect(e.tool('text.greet')).toBeUndefined();
    expect(e.problems()[0]?.message).toContain('runner');
    expect(TOOL_META_SCHEMA.properties.runner.enum).toEqual(['builtin', 'js-runner', 'py-runner', 'macro', 'code', 'wasm-runner']);
    expect(DEFAULT_RUNNERS.map((d) => d.name)).toEqual(['builtin', 'js-runner', 'py-runner', 'macro', 'code', 'wasm-runner']);
  });
});

describe('what a runner is given', () => {
  it('is the call’s checked view only, unless its definition asks for the history capability', async () => {
    const seen: Record<string, unknown> = {};
    const probe = (name: string, capabilities?: readonly 'history'[]): RunnerDefinition => ({
      name,
      summary: 'records what it is given',
      extensions: ['.probe'],
      permission: `exec.${name.replace('-runner', '')}`,
      grantedByDefault: true,
      create: () => ({
        name,
        interruptible: false,
        ...(capabilities ? { capabilities } : {}),
        run: async (ctx) => {
          seen[name] = ctx.history === null ? null : ctx.history.snapshots.length;
          return { ok: true };
        },
        status: async () => ({ available: true }),
        close: async () => {},
      }),
    });
    const tool = (id: string, runner: string, permission: string) =>
      definition({ id, runner, entry: 'x.probe', schema: { type: 'object' }, permissions: [permission] });
    project = tempProject(
      { 'plain.json': tool('p.plain', 'plain-runner', 'exec.plain'), 'hist.json': tool('p.hist', 'hist-runner', 'exec.hist'), 'x.probe': '' },
      'arium-plugin-',
    );
    engine = await createEngine({
      workspace: project.workspace,
      project: 'p',
      watch: false,
      persist: false,
      runners: [probe('plain-runner'), probe('hist-runner', ['history'])],
    });
    engine.snapshot({ label: 'one' });
    expect(await engine.call('p.plain', {})).toMatchObject({ ok: true });
    expect(await engine.call('p.hist', {})).toMatchObject({ ok: true });
    expect(seen).toEqual({ 'plain-runner': null, 'hist-runner': 1 });
  });
});

describe('runner definitions that cannot be used', () => {
  const base = templateRunner;
  const cases: [string, RunnerDefinition, RegExp][] = [
    ['a bad name', { ...base, name: 'Tmpl Runner' }, /"name" must be/],
    ['a permission that is not exec.*', { ...base, permission: 'sys.exec' }, /"permission" must be null or "exec.<kind>"/],
    ['the permission of another runner', { ...base, permission: 'exec.js' }, /both use the permission "exec.js"/],
    ['an arium.json key of the engine', { ...base, config: { grants: { type: 'array' } } }, /"grants", which the engine reads/],
    ['an arium.json key of another runner', { ...base, config: { python: { type: 'string' } } }, /"python", which runner "py-runner" reads/],
    ['no extensions', { ...base, extensions: [] }, /at least one entry extension/],
    ['an extension without its dot', { ...base, extensions: ['tmpl'] }, /"extensions" must list/],
    ['no create', { ...base, create: undefined } as unknown as RunnerDefinition, /"create" must be a function/],
  ];
  for (const [what, bad, message] of cases) {
    it(`refuses ${what} at start-up, saying what to fix`, async () => {
      project = tempProject({}, 'arium-plugin-');
      await expect(createEngine({ workspace: project.workspace, project: 'p', watch: false, persist: false, runners: [bad] })).rejects.toThrow(
        message,
      );
    });
  }

  it('refuses a runner instance no definition names, and a definition whose runner has another name', async () => {
    project = tempProject({}, 'arium-plugin-');
    const stray = {
      name: 'ghost-runner',
      interruptible: false,
      run: async () => null,
      status: async () => ({ available: true }),
      close: async () => {},
    } as Runner;
    const options = { workspace: project.workspace, project: 'p', watch: false, persist: false };
    await expect(createEngine({ ...options, runners: [stray] })).rejects.toThrow(/no runner named "ghost-runner" is defined/);
    const liar: RunnerDefinition = { ...templateRunner, create: () => ({ ...stray, name: 'other' }) };
    await expect(createEngine({ ...options, runners: [liar] })).rejects.toThrow(/created a runner named "other"/);
    const broken: RunnerDefinition = {
      ...templateRunner,
      create: () => {
        throw new Error('no templates here');
      },
    };
    await expect(createEngine({ ...options, runners: [broken] })).rejects.toThrow(/"tmpl-runner" could not create its runner: no templates here/);
    // Nothing was left open: the project opens again at once (a durable one takes its lock).
    await expect(createEngine({ ...options, persist: true, runners: [broken] })).rejects.toThrow(/could not create/);
    engine = await createEngine({ ...options, persist: true, runners: [templateRunner] });
    expect(engine.readOnly).toBeNull();
  });

  it('refuses a grant of an exec permission no runner here uses', async () => {
    project = tempProject({}, 'arium-plugin-');
    const options = { workspace: project.workspace, project: 'p', watch: false, persist: false };
    await expect(createEngine({ ...options, grants: ['exec.tmpl'] })).rejects.toThrow(
      /Unknown permission "exec.tmpl": no runner of this engine uses it/,
    );
    engine = await createEngine({ ...options, grants: ['exec.tmpl'], runners: [templateRunner] });
    expect(engine.grants).toEqual(['exec.tmpl']);
  });

  it('grants a runner’s permission by default only when its definition says so', async () => {
    project = tempProject({}, 'arium-plugin-');
    const options = { workspace: project.workspace, project: 'p', watch: false, persist: false };
    engine = await createEngine({ ...options, runners: [templateRunner] });
    expect(engine.grants).toEqual(['vfs.read', 'vfs.write', 'exec.js', 'exec.py', 'exec.wasm', 'exec.tmpl', 'sys.info']);
    await engine.close();
    engine = await createEngine({ ...options, runners: [{ ...templateRunner, grantedByDefault: false }] });
    expect(engine.grants).not.toContain('exec.tmpl');
  });
});
