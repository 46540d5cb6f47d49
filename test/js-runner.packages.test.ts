import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';
import { dependencyStatus, installProject } from '../src/install.js';
import { definition, type TempProject, tempProject } from './support/project.js';

/**
 * JS tools importing npm packages: the project's package.json installed by `installProject` (npm, into
 * the project's .arium folder), each tool bundled with esbuild for the isolate. Real packages from the
 * npm registry (or npm's cache): yaml (ES modules), @sindresorhus/slugify (ES modules with a tree of
 * dependencies), semver (CommonJS), fs-extra (needs Node's fs: refused, naming the chain).
 */

const PACKAGES = { yaml: '2.8.1', '@sindresorhus/slugify': '2.2.1', semver: '7.7.2', 'fs-extra': '11.3.0' };

let project: TempProject;
const bundles = () => join(project.dir, '.arium', 'js-bundles');
const bundleFolders = () => (existsSync(bundles()) ? readdirSync(bundles()).filter((n) => !n.endsWith('.json')) : []);

const USES_PACKAGES = `import { parse } from 'yaml';
import slugify from '@sindresorhus/slugify';
import semver from 'semver';
import { shout } from './lib/shout.js';
export default async function run(input) {
  return { doc: parse(input.text), slug: slugify(input.title), fits: semver.satisfies(input.version, '^2.0.0'), loud: shout(input.title) };
}
`;

const open = (options: { warmUp?: boolean } = {}) =>
  createEngine({ workspace: project.workspace, project: 'p', persist: false, watch: false, warmUp: options.warmUp ?? false });

beforeAll(async () => {
  project = tempProject({
    'lib/shout.js': 'export const shout = (s) => s.toUpperCase() + "!";\n',
    'pkg.js': USES_PACKAGES,
    'pkg.json': definition({ id: 't.pkg', entry: 'pkg.js' }),
    'needs-fs.js': "import fse from 'fs-extra';\nexport default async function run() { return typeof fse.readJson; }\n",
    'needs-fs.json': definition({ id: 't.needs-fs', entry: 'needs-fs.js' }),
    'engine-only.js': "import { z } from 'zod';\nexport default async function run() { return z.string().parse('x'); }\n",
    'engine-only.json': definition({ id: 't.engine-only', entry: 'engine-only.js' }),
    'plain.js': 'export default async function run(input) { return input; }\n',
    'plain.json': definition({ id: 't.plain', entry: 'plain.js' }),
  });
  writeFileSync(join(project.dir, 'package.json'), JSON.stringify({ name: 'p-tools', private: true, dependencies: PACKAGES }, null, 2));
}, 60_000);

afterAll(() => project?.remove());

describe('installing a project’s packages', () => {
  it('a project that pins nothing has nothing to install', async () => {
    const other = tempProject();
    try {
      expect(await installProject({ workspace: other.workspace, project: 'p' })).toEqual({ project: 'p', js: null, python: null });
      expect((await dependencyStatus({ workspace: other.workspace, project: 'p' })).js.state).toBe('unpinned');
    } finally {
      other.remove();
    }
  });

  it('before the install, a tool importing a package is a load problem saying to run arium install', async () => {
    expect((await dependencyStatus({ workspace: project.workspace, project: 'p' })).js.state).toBe('missing');
    const engine = await open({ warmUp: true });
    try {
      await engine.refresh();
      const problem = engine.problems().find((p) => p.id === 't.pkg');
      expect(problem?.message).toContain('import problem: tools/pkg.js imports yaml, @sindresorhus/slugify, semver');
      expect(problem?.message).toContain('arium install');
      const call = await engine.call('t.pkg', {});
      expect(call.ok).toBe(false);
      if (!call.ok) expect(call.error).toMatchObject({ code: 'TOOL_ERROR', message: expect.stringContaining('arium install') });
      // A tool without packages is untouched.
      expect((await engine.call('t.plain', { a: 1 })).ok).toBe(true);
    } finally {
      await engine.close();
    }
  });

  it('installs with npm into the state folder, writes the lock file, and does nothing the second time', async () => {
    const first = await installProject({ workspace: project.workspace, project: 'p', offline: true });
    expect(first.js).toMatchObject({ changed: true, lock_written: true, path: join(project.dir, '.arium', 'js-packages') });
    expect(first.js?.packages).toBeGreaterThanOrEqual(6);
    expect(existsSync(join(project.dir, 'package-lock.json'))).toBe(true);
    expect(existsSync(join(project.dir, 'node_modules'))).toBe(false);
    expect((await dependencyStatus({ workspace: project.workspace, project: 'p' })).js.state).toBe('ready');
    const again = await installProject({ workspace: project.workspace, project: 'p', offline: true });
    expect(again.js).toMatchObject({ changed: false, lock_written: false });
  }, 120_000);
});

describe('tools importing packages', () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await open();
  });
  afterAll(async () => {
    await engine?.close();
  });

  it('runs a tool that imports ES-module, CommonJS and dependency-tree packages; the first call reports the bundle time', async () => {
    const input = { text: 'a: 1\nlist: [x, y]\n', title: 'Déjà vu', version: '2.3.4' };
    const first = await engine.call('t.pkg', input);
    if (!first.ok) throw new Error(first.error.message);
    expect(first.data).toEqual({ doc: { a: 1, list: ['x', 'y'] }, slug: 'deja-vu', fits: true, loud: 'DÉJÀ VU!' });
    expect(first.meta.bundle).toMatchObject({ bytes: expect.any(Number), built_ms: expect.any(Number) });
    const second = await engine.call('t.pkg', { ...input, version: '1.0.0' });
    expect(second.ok && second.data).toMatchObject({ fits: false });
    expect(second.meta.bundle).not.toHaveProperty('built_ms');
    expect(bundleFolders()).toHaveLength(1);
  });

  it('refuses a package that needs a Node built-in as a load problem naming the import chain', async () => {
    const call = await engine.call('t.needs-fs', {});
    expect(call.ok).toBe(false);
    if (call.ok) return;
    expect(call.error.code).toBe('TOOL_ERROR');
    expect(call.error.message).toMatch(/tools\/needs-fs\.js → fs-extra → .*"[a-z]+" is a Node built-in/);
    const checked = await open({ warmUp: true });
    try {
      await checked.refresh();
      expect(checked.problems().find((p) => p.id === 't.needs-fs')?.message).toMatch(/^import problem: tools\/needs-fs\.js → fs-extra/);
      expect(checked.problems().find((p) => p.id === 't.pkg')).toBeUndefined();
    } finally {
      await checked.close();
    }
  });

  it('takes packages only from the project’s installation, never from folders above it', async () => {
    // zod is installed for the engine itself (an ancestor's node_modules when the workspace sits in Arium's folder), not for this project.
    const call = await engine.call('t.engine-only', {});
    expect(call.ok).toBe(false);
    if (!call.ok) expect(call.error.message).toContain('"zod" could not be found in the project\'s installed packages');
  });

  it('refuses a relative import that leaves the tools folder', async () => {
    writeFileSync(join(project.workspace, 'outside.js'), 'export const secret = 42;\n');
    project.write(
      'escape.js',
      "import semver from 'semver';\nimport { secret } from '../../outside.js';\nexport default async function run() { return [secret, semver.valid('1.0.0')]; }\n",
    );
    project.write('escape.json', definition({ id: 't.escape', entry: 'escape.js' }));
    await engine.refresh();
    const call = await engine.call('t.escape', {});
    expect(call.ok).toBe(false);
    if (!call.ok) expect(call.error.message).toMatch(/outside\.js" leads outside the tools folder/);
  });

  it('rebuilds when a file of the tool changes, and reuses the bundle after a restart', async () => {
    project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "!!!";\n');
    const changed = await engine.call('t.pkg', { text: 'a: 1', title: 'hi', version: '2.0.0' });
    expect(changed.ok && changed.data).toMatchObject({ loud: 'HI!!!' });
    expect(changed.meta.bundle).toHaveProperty('built_ms');
    const folders = bundleFolders();
    const restarted = await open();
    try {
      const call = await restarted.call('t.pkg', { text: 'a: 1', title: 'hi', version: '2.0.0' });
      expect(call.ok && call.data).toMatchObject({ loud: 'HI!!!' });
      expect(call.meta.bundle).not.toHaveProperty('built_ms');
      expect(bundleFolders()).toEqual(folders);
    } finally {
      await restarted.close();
    }
  });

  it('with warm-up on, builds at load and after an edit off the call’s clock, and the first call after each build reports it', async () => {
    const warm = await open({ warmUp: true });
    try {
      project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "¿";\n');
      await warm.refresh();
      const first = await warm.call('t.pkg', { text: 'a: 1', title: 'hi', version: '2.0.0' });
      expect(first.ok && first.data).toMatchObject({ loud: 'HI¿' });
      expect(first.meta.bundle).toMatchObject({ built_ms: expect.any(Number) });
      const again = await warm.call('t.pkg', { text: 'a: 1', title: 'hi', version: '2.0.0' });
      expect(again.meta.bundle).not.toHaveProperty('built_ms');
      project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "¿¡";\n');
      // An edit the engine has not loaded yet: the call builds first, and the build is not the tool's time.
      const edited = await warm.call('t.pkg', { text: 'a: 1', title: 'hi', version: '2.0.0' }, { timeout_ms: 1000 });
      expect(edited.ok && edited.data).toMatchObject({ loud: 'HI¿¡' });
      expect(edited.meta.bundle).toMatchObject({ built_ms: expect.any(Number) });
    } finally {
      await warm.close();
    }
  });

  it('serves concurrent first calls from one build', async () => {
    project.write('lib/shout.js', 'export const shout = (s) => s.toUpperCase() + "?";\n');
    const before = new Set(bundleFolders());
    const calls = await Promise.all(Array.from({ length: 8 }, (_, i) => engine.call('t.pkg', { text: `n: ${i}`, title: 'q', version: '2.0.0' })));
    for (const [i, call] of calls.entries()) expect(call.ok && call.data).toMatchObject({ doc: { n: i }, loud: 'Q?' });
    expect(bundleFolders().filter((f) => !before.has(f))).toHaveLength(1);
  });

  it('a bundle over the cap is a load problem', async () => {
    project.write('huge.js', `export const blob = ${JSON.stringify('x'.repeat(9 * 1024 * 1024))};\n`);
    project.write(
      'big.js',
      "import semver from 'semver';\nimport { blob } from './huge.js';\nexport default async function run() { return blob.length + semver.major('1.0.0'); }\n",
    );
    project.write('big.json', definition({ id: 't.big', entry: 'big.js' }));
    await engine.refresh();
    const call = await engine.call('t.big', {});
    expect(call.ok).toBe(false);
    if (!call.ok) expect(call.error.message).toMatch(/bundle to \d+ bytes, over the cap of 8388608/);
  });

  it('a changed package.json makes the installation stale until arium install runs again', async () => {
    const manifest = join(project.dir, 'package.json');
    const original = readFileSync(manifest, 'utf8');
    const lockBefore = statSync(join(project.dir, 'package-lock.json')).size;
    writeFileSync(manifest, JSON.stringify({ name: 'p-tools', private: true, dependencies: { ...PACKAGES, ms: '2.1.3' } }, null, 2));
    try {
      expect((await dependencyStatus({ workspace: project.workspace, project: 'p' })).js.state).toBe('stale');
      const stale = await engine.call('t.pkg', { text: 'a: 1', title: 'x', version: '2.0.0' });
      expect(stale.ok).toBe(false);
      if (!stale.ok) expect(stale.error.message).toContain('run it again');
    } finally {
      writeFileSync(manifest, original);
    }
    expect(statSync(join(project.dir, 'package-lock.json')).size).toBe(lockBefore);
    const back = await engine.call('t.pkg', { text: 'a: 1', title: 'x', version: '2.0.0' });
    expect(back.ok).toBe(true);
  });
});
