import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CliIo } from '../src/cli/io.js';
import { main } from '../src/cli/main.js';

let root: string;
let workspace: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'arium-cli-'));
  workspace = join(root, 'ws');
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
});

afterEach(() => rmSync(root, { recursive: true, force: true }));

async function cli(args: string[], stdin = ''): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const io: CliIo = {
    stdout: { write: (t: string) => (out += t) },
    stderr: { write: (t: string) => (err += t) },
    readStdin: async () => stdin,
    env: {},
    isTTY: false,
    cwd: root,
  };
  const code = await main(args, io);
  return { code, out, err };
}

const P = ['--workspace', 'ws', '--project', 'p'];

describe('arium CLI', () => {
  it('prints help, and refuses unknown commands and options with a hint', async () => {
    expect((await cli(['--help'])).out).toContain('Commands:');
    const unknown = await cli(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain('unknown command "frobnicate"');
    const badFlag = await cli(['tools', '--colour']);
    expect(badFlag.code).toBe(2);
    expect(badFlag.err).toContain('Unknown option --colour');
    const noValue = await cli(['tools', '--project']);
    expect(noValue.err).toContain('--project needs a value');
    expect((await cli(['call', '--help'])).out).toContain('usage: arium call <id>');
  });

  it('lists builtins and project tools, and reports bad definition files', async () => {
    writeFileSync(join(workspace, 'p', 'tools', 'broken.json'), '{ "id": ');
    const human = await cli(['tools', ...P]);
    expect(human.code).toBe(0);
    expect(human.out).toContain('fs.read');
    expect(human.out).toContain('tools/broken.json');
    const json = JSON.parse((await cli(['tools', ...P, '--json'])).out);
    expect(json.tools.map((t: { id: string }) => t.id)).toContain('vfs.snapshot');
    expect(json.problems[0].file).toBe('tools/broken.json');
  });

  it('calls a tool with inline JSON, a file and stdin; exit code 1 when the tool fails', async () => {
    const write = await cli(['call', 'fs.write', '{"path":"/a.txt","content":"hi\\n"}', ...P, '--json']);
    expect(write.code).toBe(0);
    expect(JSON.parse(write.out).data.created).toBe(true);
    writeFileSync(join(root, 'in.json'), '{"path":"/a.txt"}');
    const read = await cli(['call', 'fs.read', '@in.json', ...P, '--json']);
    expect(JSON.parse(read.out).data.content).toBe('hi\n');
    const piped = await cli(['call', 'fs.stat', '-', ...P, '--json'], '{"path":"/a.txt"}');
    expect(JSON.parse(piped.out).data.size).toBe(3);
    const missing = await cli(['call', 'fs.read', '{"path":"/nope"}', ...P]);
    expect(missing.code).toBe(1);
    expect(missing.out).toContain('NOT_FOUND');
    const denied = await cli(['call', 'fs.write', '{"path":"/b","content":"x"}', ...P, '--grant', 'vfs.read', '--json']);
    expect(denied.code).toBe(1);
    expect(JSON.parse(denied.out).error).toMatchObject({ stage: 'permission', code: 'DENIED' });
  });

  it('says where bad JSON input is', async () => {
    const bad = await cli(['call', 'fs.read', '{path:', ...P]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('The input argument is not valid JSON');
    const noFile = await cli(['call', 'fs.read', '@missing.json', ...P]);
    expect(noFile.err).toContain('Cannot read the input file');
    expect((await cli(['call', ...P])).err).toContain('needs a tool id');
  });

  it('exits 3 with a clear message for a missing project or a bad grant', async () => {
    const missing = await cli(['tools', '--workspace', 'ws', '--project', 'nope']);
    expect(missing.code).toBe(3);
    expect(missing.err).toContain('Project "nope" not found');
    const grant = await cli(['tools', ...P, '--grant', 'vfs.fly']);
    expect(grant.code).toBe(3);
    expect(grant.err).toContain('Unknown permission "vfs.fly"');
  });

  it('init creates a loadable project and refuses to overwrite one', async () => {
    const made = await cli(['init', 'fresh', '--workspace', 'ws']);
    expect(made.code).toBe(0);
    expect(existsSync(join(workspace, 'fresh', 'tools', 'upper.js'))).toBe(true);
    const tools = JSON.parse((await cli(['tools', '--workspace', 'ws', '--project', 'fresh', '--json'])).out);
    expect(tools.problems).toEqual([]);
    expect(tools.tools.map((t: { id: string }) => t.id)).toEqual(expect.arrayContaining(['text.upper', 'text.words']));
    const again = await cli(['init', 'fresh', '--workspace', 'ws']);
    expect(again.code).toBe(2);
    expect(again.err).toContain('already exists');
    expect((await cli(['init', '../evil', '--workspace', 'ws'])).err).toContain('Invalid project name');
  });

  it('snapshots, logs, diffs and restores across separate invocations (the state persists)', async () => {
    await cli(['call', 'fs.write', '{"path":"/doc.txt","content":"one\\n"}', ...P]);
    const snap = await cli(['snapshot', '--label', 'v1', ...P, '--json']);
    expect(snap.code).toBe(0);
    const id = JSON.parse(snap.out).id as string;
    await cli(['call', 'fs.write', '{"path":"/doc.txt","content":"two\\n"}', ...P]);
    const diff = await cli(['diff', 'v1', ...P]);
    expect(diff.out).toContain('M /doc.txt');
    expect(diff.out).toContain('-one');
    expect(diff.out).toContain('+two');
    expect((await cli(['diff', 'v1', ...P, '--stat'])).out).not.toContain('+two');
    const log = JSON.parse((await cli(['log', ...P, '--json'])).out);
    expect(log.snapshots[0].id).toBe(id);
    const restored = await cli(['restore', 'v1', ...P]);
    expect(restored.out).toContain('undoes this');
    const read = await cli(['call', 'fs.read', '{"path":"/doc.txt"}', ...P, '--json']);
    expect(JSON.parse(read.out).data.content).toBe('one\n');
    const unknown = await cli(['restore', 'nope', ...P]);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain('Unknown snapshot');
    expect((await cli(['gc', ...P])).out).toContain('kept');
  });

  it('imports and exports host folders', async () => {
    mkdirSync(join(root, 'src'));
    writeFileSync(join(root, 'src', 'x.txt'), 'x');
    expect((await cli(['import', 'src', '/in', ...P])).out).toContain('imported 1 files');
    expect((await cli(['export', '/in', 'out', ...P])).code).toBe(0);
    expect(readFileSync(join(root, 'out', 'x.txt'), 'utf8')).toBe('x');
    const again = await cli(['export', '/in', 'out', ...P]);
    expect(again.code).toBe(1);
    expect(again.err).toContain('not empty');
  });

  it('doctor reports the machine without throwing', async () => {
    const report = JSON.parse((await cli(['doctor', ...P, '--json'])).out);
    const names = report.checks.map((c: { name: string }) => c.name);
    expect(names).toEqual(expect.arrayContaining(['node', 'isolated-vm', 'python', 'bubblewrap', 'user namespaces']));
    expect(report.checks.find((c: { name: string }) => c.name === 'node').ok).toBe(true);
    expect(report.engine.runners.builtin.available).toBe(true);
  });

  it('the real bin runs the demo end to end', () => {
    // `npm test` builds before running vitest; build here only when run on its own without dist/.
    if (!existsSync(join('dist', 'src', 'cli', 'main.js'))) {
      execFileSync(process.execPath, [join('node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { stdio: 'ignore' });
    }
    mkdirSync(join(workspace, 'demo', 'tools'), { recursive: true });
    const r = spawnSync(process.execPath, ['bin/arium.js', 'demo', '--workspace', workspace, '--no-color'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('+- ship it');
    expect(r.stdout).toMatch(/Events: \d+ ToolInvocationEvent/);
    expect(r.stdout).toContain('SecurityEvent');
  }, 60_000);
});
