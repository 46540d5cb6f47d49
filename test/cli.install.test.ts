/**
 * `arium install` and `arium doctor` for a project whose Python tool imports a pinned package: the
 * demo project's own wheel (workspace/demo/wheels, built from workspace/demo/python-src) installed
 * from a local folder with no package index, as a user without one would, and the tool run with it.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Json, parseJson, runCli, tempWorkspace } from './cli.helpers.js';

const DEMO = fileURLToPath(new URL('../workspace/demo/', import.meta.url));
const P = ['--workspace', 'ws', '--project', 'p'];
const python = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();

let ws: ReturnType<typeof tempWorkspace>;
let project: string;
beforeEach(() => {
  ws = tempWorkspace();
  project = join(ws.workspace, 'p');
  for (const file of ['demo-readability.json', 'demo_readability.py']) cpSync(join(DEMO, 'tools', file), join(project, 'tools', file));
  cpSync(join(DEMO, 'requirements.txt'), join(project, 'requirements.txt'));
});
afterEach(() => ws.cleanup());

const cli = (args: string[]) => runCli(ws.root, args);
const check = (report: Json, name: string) => report.checks.find((c: Json) => c.name === name);

describe('the demo’s wheel', () => {
  it('is rebuilt byte for byte from its source, so requirements.txt’s hash is the source’s', () => {
    const copy = join(ws.root, 'demo');
    mkdirSync(join(copy, 'wheels'), { recursive: true });
    cpSync(join(DEMO, 'python-src'), join(copy, 'python-src'), { recursive: true });
    const line = execFileSync(python, [join(copy, 'python-src', 'build_wheel.py')], { encoding: 'utf8' }).trim();
    const pinned = readFileSync(join(DEMO, 'requirements.txt'), 'utf8').replace(/\\\n\s*/g, '');
    expect(pinned).toContain(line);
    expect(readFileSync(join(copy, 'wheels', 'readingease-1.0.0-py3-none-any.whl'))).toEqual(
      readFileSync(join(DEMO, 'wheels', 'readingease-1.0.0-py3-none-any.whl')),
    );
  });
});

describe('arium install for Python tools', () => {
  it('doctor says the environment is missing; install from a folder of wheels; doctor says ready; the tool runs', async () => {
    const before = parseJson(await cli(['doctor', ...P, '--json']));
    expect(check(before, 'python env')).toMatchObject({ ok: false, fix: 'arium install --project p' });
    expect(check(before, 'python env').detail).toContain('arium install');
    expect(check(before, 'js packages')).toMatchObject({ ok: true });

    const refused = await cli(['call', ...P, 'demo.readability', '{"path":"/notes/a.md"}', '--json']);
    expect(parseJson(refused).error.message).toContain('arium install');

    const r = await cli(['install', ...P, '--find-links', join(DEMO, 'wheels'), '--no-index']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/installed a Python 3\.\d+\.\d+ environment in [\d.]+ s → .*python-env \(readingease==1\.0\.0\)/);

    mkdirSync(join(ws.workspace, 'q', 'tools'), { recursive: true });
    cpSync(join(DEMO, 'requirements.txt'), join(ws.workspace, 'q', 'requirements.txt'));
    const after = parseJson(await cli(['doctor', ...P, '--json']));
    expect(check(after, 'python env')).toMatchObject({ ok: true });
    const states = after.projects.map((p: Json) => [p.project, p.js.state, p.python.state]);
    expect(states).toEqual([
      ['p', 'unpinned', 'ready'],
      ['q', 'unpinned', 'missing'],
    ]);
    expect((await cli(['doctor', ...P])).out).toContain('q: js packages unpinned, python env missing');
    expect(check(after, 'python env').detail).toMatch(/^ready: 1 package\(s\) for Python 3/);

    await cli(['call', ...P, 'fs.write', JSON.stringify({ path: '/notes/a.md', content: 'The cat sat on the mat. It was happy.' })]);
    const called = parseJson(await cli(['call', ...P, 'demo.readability', '{"path":"/notes/a.md"}', '--json']));
    expect(called.data).toEqual({ path: '/notes/a.md', words: 9, sentences: 2, syllables: 10, score: expect.any(Number), grade: 'very easy' });

    const again = parseJson(await cli(['install', ...P, '--find-links', join(DEMO, 'wheels'), '--no-index', '--json']));
    expect(again).toMatchObject({ project: 'p', js: null, python: { changed: false, packages: [{ name: 'readingease', version: '1.0.0' }] } });
  }, 60_000);

  it('takes find_links from arium.json, relative to the project, and queues two installs of one process', async () => {
    cpSync(join(DEMO, 'wheels'), join(project, 'wheels'), { recursive: true });
    writeFileSync(join(project, 'arium.json'), JSON.stringify({ pip: { find_links: ['wheels'], no_index: true } }));
    const [a, b] = await Promise.all([cli(['install', ...P, '--json']), cli(['install', ...P, '--json'])]);
    const reports = [parseJson(a), parseJson(b)];
    expect(reports.map((x) => x.python.changed).sort()).toEqual([false, true]);
    expect(new Set(reports.map((x) => x.python.path)).size).toBe(1);
  }, 60_000);

  it('a wheel it cannot find fails with pip’s words and the fix, and leaves no environment', async () => {
    const r = await cli(['install', ...P, '--find-links', join(ws.root, 'empty'), '--no-index']);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('readingease');
    expect(r.err).toMatch(/No matching distribution|Could not find a version/);
    expect(r.err).toContain(`pip looked in: find-links ${join(ws.root, 'empty')}, no index`);
    expect(existsSync(join(project, '.arium', 'python-env'))).toBe(false);
  }, 60_000);

  it('an unhashed pin is refused before anything runs, saying how to make hashes', async () => {
    writeFileSync(join(project, 'requirements.txt'), 'readingease==1.0.0\n');
    const r = await cli(['install', ...P, '--find-links', join(DEMO, 'wheels'), '--no-index']);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('has no --hash');
    expect(r.err).toContain('pip hash');
    expect(existsSync(join(project, '.arium', 'python-env'))).toBe(false);
  });

  it('arium.json’s pip settings are checked: a misspelt key is a config error naming it', async () => {
    writeFileSync(join(project, 'arium.json'), JSON.stringify({ pip: { findlinks: ['wheels'] } }));
    const r = await cli(['install', ...P]);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('findlinks');
  });
});
