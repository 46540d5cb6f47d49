/**
 * Tool packs through the CLI, in-process: installed from a folder, an npm tarball and a git URL, listed,
 * updated (a widening update held back until an explicit yes), removed, built with `arium pack` and
 * added back, and a domain bundle installed as a pack. Every pack tool is called for real.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Json, parseJson, runCli, tempWorkspace } from './cli.helpers.js';

const FIXTURES = fileURLToPath(new URL('../examples/packs/', import.meta.url));
const P = ['--workspace', 'ws', '--project', 'p'];

let ws: ReturnType<typeof tempWorkspace>;
let project: string;
beforeEach(() => {
  ws = tempWorkspace();
  project = join(ws.workspace, 'p');
});
afterEach(() => ws.cleanup());

const cli = (args: string[], options?: Parameters<typeof runCli>[2]) => runCli(ws.root, args, options);
const lock = (): Json => JSON.parse(readFileSync(join(project, 'arium-lock.json'), 'utf8'));
const grants = (): string[] => JSON.parse(readFileSync(join(project, 'arium.json'), 'utf8')).grants;

/** A copy of a fixture pack the test may change, as an author changes their pack. */
function source(name: string): string {
  const dir = join(ws.root, 'src', name);
  cpSync(join(FIXTURES, name), dir, { recursive: true });
  return dir;
}

async function callUpper(id = 'textkit.upper'): Promise<Json> {
  return parseJson(await cli(['call', id, '{"text":"shout"}', ...P, '--json']));
}

describe('arium add', () => {
  it('shows what a pack asks for and installs nothing without an explicit yes', async () => {
    const run = await cli(['add', source('textkit'), ...P]);
    expect(run.code).toBe(3);
    expect(run.err).toContain('+ vfs.read:/text/**');
    expect(run.err).toContain('was not granted (answer yes at the terminal, or pass --yes)');
    expect(readdirSync(project).sort()).toEqual(['.arium', 'tools']);
    const no = await cli(['add', source('textkit'), ...P], { answer: () => 'n' });
    expect(no.code).toBe(3);
    expect(existsSync(join(project, 'packs'))).toBe(false);
    expect(existsSync(join(project, 'arium.json'))).toBe(false);
  });

  it('installs a folder after a yes at the terminal: namespaced tools that run, grants, lock, skills', async () => {
    const run = await cli(['add', source('textkit'), ...P], { answer: () => 'y' });
    expect(run.code, run.err).toBe(0);
    expect(run.err).toContain('Grant exec.js, vfs.read:/text/** to pack textkit? [y/N]');
    expect(run.out).toContain('added textkit 1.0.0');
    expect(await callUpper()).toMatchObject({ ok: true, data: { text: 'SHOUT' } });
    const entry = lock().packs.textkit;
    expect(entry).toMatchObject({ version: '1.0.0', source: { kind: 'folder' }, tools: ['textkit.upper'], skills: ['shout'] });
    expect(entry.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(Object.keys(entry.files)).toEqual(
      expect.arrayContaining(['arium-pack.yaml', 'tools/upper.js', 'tools/upper.json', 'skills/shout/SKILL.md']),
    );
    // The project relied on the default grants: they stay, and the pack's are added to them.
    expect(grants()).toEqual(expect.arrayContaining(['vfs.read', 'exec.js', 'vfs.read:/text/**']));
    expect(readFileSync(join(project, 'skills', 'shout', 'SKILL.md'), 'utf8')).toContain('textkit.upper');
  });

  it('installs an npm tarball made by npm pack', async () => {
    const dir = source('textkit');
    const out = join(ws.root, 'tarballs');
    mkdirSync(out);
    execFileSync('npm', ['pack', '--pack-destination', out, '--silent'], { cwd: dir, env: { ...process.env, npm_config_offline: 'true' } });
    const [tarball] = readdirSync(out);
    const run = await cli(['add', join(out, tarball as string), ...P, '--yes', '--json']);
    expect(run.code, run.err).toBe(0);
    expect(parseJson(run)).toMatchObject({ ok: true, name: 'textkit', version: '1.0.0', tools: ['textkit.upper'] });
    expect(lock().packs.textkit.source.kind).toBe('tarball');
    expect(await callUpper()).toMatchObject({ ok: true, data: { text: 'SHOUT' } });
  });

  it('installs from a git URL (a local bare repository)', async () => {
    const dir = source('textkit');
    const git = (args: string[], cwd: string) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, stdio: 'pipe' });
    git(['init', '-q', '-b', 'main'], dir);
    git(['add', '.'], dir);
    git(['commit', '-q', '-m', 'textkit'], dir);
    git(['tag', 'v1.0.0'], dir);
    const bare = join(ws.root, 'textkit.git');
    git(['clone', '-q', '--bare', dir, bare], ws.root);
    const run = await cli(['add', `git+file://${bare}#v1.0.0`, ...P, '--yes']);
    expect(run.code, run.err).toBe(0);
    expect(lock().packs.textkit.source).toEqual({ kind: 'git', ref: `file://${bare}#v1.0.0` });
    expect(Object.keys(lock().packs.textkit.files).some((f) => f.startsWith('.git'))).toBe(false);
    expect(await callUpper()).toMatchObject({ ok: true, data: { text: 'SHOUT' } });
  });

  it('installs the seed domain bundle (manifest.yaml + policies.yaml) and says what it does not map', async () => {
    const run = await cli(['add', source('example_domain'), ...P, '--yes']);
    expect(run.code, run.err).toBe(0);
    expect(run.out).toContain('added example_domain 0.1');
    expect(run.out).toContain(
      'firecrawl.crawl: its HTTP worker (http://tool-firecrawl:8080/run) is not started by a pack; serve it with an arium.json "providers" entry of kind "http" whose "manifest" is "packs/example_domain/manifest.yaml"',
    );
    expect(run.out).toContain('policies.yaml concurrency: not mapped');
    expect(lock().packs.example_domain.grants).toEqual(['exec.js', 'net.fetch']);
    const call = parseJson(await cli(['call', 'example_domain.word-count', '{"text":"one two three"}', ...P, '--json']));
    expect(call).toMatchObject({ ok: true, data: { words: 3 } });
  });

  it.each([
    ['malformed YAML', 'name: textkit\nversion: [1.0\n', /arium-pack\.yaml:\d+:\d+: not valid YAML/],
    ['a missing version', 'name: textkit\n', /arium-pack\.yaml: \/version: is required/],
    ['a bad name', 'name: Text Kit\nversion: 1.0.0\n', /\/name: must match pattern.*name: lower-case letters/],
    [
      'an unknown permission',
      'name: textkit\nversion: 1.0.0\npermissions: [exec.js, disk.format]\n',
      /\/permissions\/1: Unknown permission "disk.format"/,
    ],
    [
      'permissions narrower than the tools',
      'name: textkit\nversion: 1.0.0\npermissions: [vfs.read]\n',
      /tools\/upper\.json: the tool textkit\.upper declares "exec\.js", which the pack's manifest does not cover/,
    ],
  ])('refuses %s with where and how to fix it, leaving the project as it was', async (_, manifest, message) => {
    const dir = source('textkit');
    writeFileSync(join(dir, 'arium-pack.yaml'), manifest);
    const run = await cli(['add', dir, ...P, '--yes', '--json']);
    expect(run.code).toBe(3);
    expect(parseJson(run).error).toMatchObject({ code: 'PackError', reason: 'MANIFEST' });
    expect(run.err).toMatch(message);
    expect(readdirSync(project).sort()).toEqual(['.arium', 'tools']);
  });

  it('refuses a pack whose namespace a project tool or an installed pack already uses', async () => {
    writeFileSync(
      join(project, 'tools', 'mine.json'),
      JSON.stringify({
        id: 'textkit.mine',
        description: 'd',
        runner: 'js-runner',
        entry: 'mine.js',
        schema: { type: 'object' },
        permissions: ['exec.js'],
      }),
    );
    const clash = await cli(['add', source('textkit'), ...P, '--yes']);
    expect(clash.code).toBe(3);
    expect(clash.err).toContain(`the project's tool "textkit.mine" is in the namespace "textkit"`);
    writeFileSync(join(project, 'tools', 'mine.json'), '{}');
    expect((await cli(['add', source('textkit'), ...P, '--yes'])).code).toBe(0);
    const again = await cli(['add', source('textkit'), ...P, '--yes']);
    expect(again.err).toContain('pack "textkit" 1.0.0 is already installed; use `arium update textkit`');
  });
});

describe('arium packs, update and remove', () => {
  it('lists packs with the version their source holds now; a widening update waits for a yes; remove takes its grants back', async () => {
    const dir = source('textkit');
    expect((await cli(['add', dir, ...P, '--yes'])).code).toBe(0);
    expect(parseJson(await cli(['packs', ...P, '--json'])).packs).toMatchObject([{ name: 'textkit', version: '1.0.0', available: null }]);

    // Version 1.1.0 adds a tool that writes, and asks for vfs.write:/text/**.
    writeFileSync(join(dir, 'arium-pack.yaml'), 'name: textkit\nversion: 1.1.0\npermissions: [exec.js, "vfs.read:/text/**", "vfs.write:/text/**"]\n');
    writeFileSync(
      join(dir, 'tools', 'save.json'),
      JSON.stringify({
        id: 'textkit.save',
        description: 'd',
        runner: 'js-runner',
        entry: 'upper.js',
        schema: { type: 'object' },
        permissions: ['exec.js', 'vfs.write:/text/**'],
      }),
    );
    const listed = await cli(['packs', ...P]);
    expect(listed.out).toContain('update available: 1.1.0 (arium update textkit)');

    const held = await cli(['update', 'textkit', ...P]);
    expect(held.code).toBe(3);
    expect(held.err).toContain('textkit 1.0.0 → 1.1.0 asks for more than the installed version was granted:');
    expect(held.err).toContain('+ vfs.write:/text/**');
    expect(held.err).not.toContain('+ exec.js');
    expect(lock().packs.textkit.version).toBe('1.0.0');
    expect(grants()).not.toContain('vfs.write:/text/**');
    expect(existsSync(join(project, 'packs', 'textkit', 'tools', 'save.json'))).toBe(false);
    expect(await callUpper()).toMatchObject({ ok: true });

    const yes = await cli(['update', 'textkit', ...P], { answer: () => 'yes' });
    expect(yes.code, yes.err).toBe(0);
    expect(yes.out).toContain('updated textkit 1.0.0 → 1.1.0');
    expect(lock().packs.textkit).toMatchObject({ version: '1.1.0', tools: ['textkit.save', 'textkit.upper'] });
    expect(grants()).toContain('vfs.write:/text/**');

    const removed = await cli(['remove', 'textkit', ...P]);
    expect(removed.code, removed.err).toBe(0);
    expect(removed.out).toContain('revoked vfs.read:/text/**, vfs.write:/text/**');
    expect(lock().packs).toEqual({});
    expect(grants()).not.toContain('vfs.write:/text/**');
    expect(existsSync(join(project, 'packs', 'textkit'))).toBe(false);
    expect(existsSync(join(project, 'skills', 'shout'))).toBe(false);
    expect(parseJson(await cli(['call', 'textkit.upper', '{"text":"x"}', ...P, '--json'])).error.code).toBe('UNKNOWN_TOOL');
    expect((await cli(['remove', 'textkit', ...P])).err).toContain('no pack "textkit" is installed; installed: none');
  });
});

describe('arium pack', () => {
  it('builds a tarball from a project’s tools that another project adds and runs', async () => {
    const other = join(ws.workspace, 'team');
    mkdirSync(join(other, 'tools'), { recursive: true });
    cpSync(join(FIXTURES, 'textkit', 'tools', 'upper.js'), join(other, 'tools', 'upper.js'));
    writeFileSync(
      join(other, 'tools', 'upper.json'),
      JSON.stringify({ id: 'upper', description: 'd', runner: 'js-runner', entry: 'upper.js', schema: { type: 'object' }, permissions: ['exec.js'] }),
    );
    const built = await cli([
      'pack',
      '--workspace',
      'ws',
      '--project',
      'team',
      '--name',
      'team',
      '--version',
      '2.0.0',
      '--out',
      'team.tgz',
      '--json',
    ]);
    expect(built.code, built.err).toBe(0);
    expect(parseJson(built)).toMatchObject({ ok: true, manifest: { name: 'team', version: '2.0.0', permissions: ['exec.js'] } });
    const added = await cli(['add', 'team.tgz', ...P, '--yes']);
    expect(added.code, added.err).toBe(0);
    expect(await callUpper('team.upper')).toMatchObject({ ok: true, data: { text: 'SHOUT' } });
    expect(Object.keys(lock().packs.team.files)).toContain('SHA256SUMS');
  });
});
