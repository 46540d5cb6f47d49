import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinRunner } from '../runners/builtin/definition.js';
import type { Engine, SecurityEvent } from '../src/index.js';
import { DEFAULT_GRANTS } from '../src/index.js';
import { runCli, tempWorkspace } from './cli.helpers.js';
import { execProject, execUnavailable, realPython, which } from './support/exec.js';

// system.exec end to end: real programs (the real Python interpreter, git) in the real sandbox, over a
// copy of the VFS; what they write comes back through the call's transaction.

const why = await execUnavailable();
const python = realPython();
const git = which('git');
const cc = which('cc');
if (why) console.log(`builtins.exec: skipped, ${why}`);
if (!python) console.log('builtins.exec: Python tests skipped, no python3 here');
if (!git) console.log('builtins.exec: git test skipped, git is not installed');
if (!cc) console.log('builtins.exec: compiler test skipped, cc is not installed');

type Data = Record<string, unknown> & { exit_code: number; stdout: string; stderr: string; changes: Array<Record<string, unknown>> };

describe.runIf(why === null && python !== null)('system.exec', () => {
  const py = python as string;
  let engine: Engine;
  let close: () => Promise<void>;
  beforeAll(async () => {
    ({ engine, close } = await execProject({ allow: [py, ...(git ? ['git'] : []), ...(cc ? [cc] : []), 'true', 'false'] }));
  });
  afterAll(() => close());

  const run = async (input: Record<string, unknown>) => {
    const result = await engine.call<Data>('system.exec', input);
    if (!result.ok) throw new Error(`system.exec failed: ${JSON.stringify(result.error)}`);
    return result.data;
  };

  it('runs a script that reads a VFS file and writes another: the new file lands in the VFS, with its diff', async () => {
    engine.vfs.write('/job/in.txt', 'hello\n');
    const data = await run({ argv: [py, '-c', 'open("out.txt", "w").write(open("in.txt").read().upper())'], cwd: '/job' });
    expect(data.exit_code).toBe(0);
    expect(engine.vfs.read('/job/out.txt').toString()).toBe('HELLO\n');
    expect(data.changes).toEqual([expect.objectContaining({ path: '/job/out.txt', change: 'created', size: 6, added: 1, removed: 0 })]);
    expect(data.changes[0]?.diff).toContain('+HELLO');
  });

  it('brings back changes, deletions and new folders, and sees the VFS as it is now on the next call', async () => {
    engine.vfs.write('/edit/a.txt', 'one\n');
    engine.vfs.write('/edit/sub/b.txt', 'b\n');
    engine.vfs.write('/edit/sub/c.txt', 'c\n');
    const script = [
      'import os, shutil',
      'open("a.txt", "a").write("two\\n")',
      'os.remove("sub/b.txt")',
      'os.makedirs("new/deep")',
      'open("new/deep/n.txt", "w").write("n")',
    ].join('\n');
    const data = await run({ argv: [py, '-c', script], cwd: '/edit' });
    expect(engine.vfs.read('/edit/a.txt').toString()).toBe('one\ntwo\n');
    expect(engine.vfs.exists('/edit/sub/b.txt')).toBe(false);
    expect(engine.vfs.read('/edit/sub/c.txt').toString()).toBe('c\n');
    expect(engine.vfs.read('/edit/new/deep/n.txt').toString()).toBe('n');
    const byPath = Object.fromEntries(data.changes.map((c) => [c.path, c.change]));
    expect(byPath).toMatchObject({ '/edit/a.txt': 'modified', '/edit/sub/b.txt': 'deleted', '/edit/new/deep/n.txt': 'created' });
    // A change made by the host between calls is what the next call sees (the mirror follows the VFS).
    engine.vfs.write('/edit/a.txt', 'host\n');
    const again = await run({ argv: [py, '-c', 'print(open("a.txt").read(), end="")'], cwd: '/edit' });
    expect(again.stdout).toBe('host\n');
  });

  it('brings back what replaced a deleted folder, and nothing of what the folder held', async () => {
    engine.vfs.write('/opaque/d/old.txt', 'old');
    const script = 'import shutil, os\nshutil.rmtree("d")\nos.mkdir("d")\nopen("d/new.txt", "w").write("new")';
    await run({ argv: [py, '-c', script], cwd: '/opaque' });
    expect(engine.vfs.exists('/opaque/d/old.txt')).toBe(false);
    expect(engine.vfs.read('/opaque/d/new.txt').toString()).toBe('new');
  });

  it('gives stdin, the allowed environment additions, and a fixed environment of its own', async () => {
    const data = await run({
      argv: [py, '-c', 'import os, sys; print(sys.stdin.read().strip(), os.environ.get("TZ"), sorted(os.environ))'],
      stdin: 'from stdin\n',
      env: { TZ: 'UTC' },
    });
    expect(data.stdout).toBe("from stdin UTC ['GIT_CONFIG_COUNT', 'GIT_CONFIG_KEY_0', 'GIT_CONFIG_VALUE_0', 'HOME', 'LANG', 'PATH', 'PWD', 'TZ']\n");
  });

  it('refuses an environment variable outside the safe set (INVALID_INPUT)', async () => {
    const result = await engine.call('system.exec', { argv: [py, '-c', 'pass'], env: { LD_PRELOAD: '/tmp/x.so' } });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatchObject({ code: 'INVALID_INPUT', stage: 'validation' });
  });

  it('a failing command: its exit code in a successful result, and what it wrote kept', async () => {
    engine.vfs.write('/fail/keep.txt', 'k');
    const data = await run({ argv: [py, '-c', 'open("partial.txt", "w").write("x"); raise SystemExit(3)'], cwd: '/fail' });
    expect(data.exit_code).toBe(3);
    expect(engine.vfs.read('/fail/partial.txt').toString()).toBe('x');
  });

  it('with check: true a non-zero exit fails the call (TOOL_ERROR) and nothing it wrote lands', async () => {
    engine.vfs.write('/checked/keep.txt', 'k');
    const result = await engine.call('system.exec', {
      argv: [py, '-c', 'import sys; open("partial.txt", "w").write("x"); print("bad", file=sys.stderr); sys.exit(4)'],
      cwd: '/checked',
      check: true,
    });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatchObject({ code: 'TOOL_ERROR', details: { exit_code: 4, stderr: 'bad\n' } });
    expect(engine.vfs.exists('/checked/partial.txt')).toBe(false);
  });

  it('bounds stdout and says so', async () => {
    const data = await run({ argv: [py, '-c', 'import sys; sys.stdout.write("x" * 1_000_000)'] });
    expect(data.stdout.length).toBe(256 * 1024);
    expect(data).toMatchObject({ stdout_truncated: true, stdout_bytes: 1_000_000, stderr_truncated: false });
    expect(data.output_note).toContain('output cut');
  });

  it('shows read paths read-only and keeps nothing written outside cwd', async () => {
    engine.vfs.write('/lib/data.txt', 'data');
    engine.vfs.write('/single.txt', 'one file');
    engine.vfs.write('/work2/x.txt', 'x');
    const script = [
      'print(open("/vfs/lib/data.txt").read())',
      'print(open("/vfs/single.txt").read())',
      'try:\n    open("/vfs/lib/data.txt", "w").write("changed")\nexcept OSError as e:\n    print("refused", e.errno)',
      'open("/tmp/scratch.txt", "w").write("gone")',
    ].join('\n');
    const data = await run({ argv: [py, '-c', script], cwd: '/work2', read: ['/lib', '/single.txt'] });
    expect(data.stdout).toBe('data\none file\nrefused 30\n');
    expect(engine.vfs.read('/lib/data.txt').toString()).toBe('data');
    expect(engine.vfs.exists('/tmp/scratch.txt')).toBe(false);
    expect(data.changes).toEqual([]);
  });

  it('runs four calls at once, each on its own copy', async () => {
    for (let i = 0; i < 4; i++) engine.vfs.write(`/par/${i}/n.txt`, String(i));
    const results = await Promise.all(
      [0, 1, 2, 3].map((i) =>
        run({
          argv: [py, '-c', 'import time; n = int(open("n.txt").read()); time.sleep(0.2); open("sq.txt", "w").write(str(n * n))'],
          cwd: `/par/${i}`,
        }),
      ),
    );
    expect(results.map((r) => r.exit_code)).toEqual([0, 0, 0, 0]);
    for (let i = 0; i < 4; i++) expect(engine.vfs.read(`/par/${i}/sq.txt`).toString()).toBe(String(i * i));
  });

  it('a call sees the VFS as it began; a change to what it read, committed meanwhile, makes its commit CONFLICT', async () => {
    engine.vfs.write('/moving/v.txt', 'old');
    const twice = 'import time, sys; a = open("v.txt").read(); time.sleep(1); b = open("v.txt").read(); print(a, b)';
    const reader = engine.call<Data>('system.exec', { argv: [py, '-c', twice], cwd: '/moving' });
    const writer = engine.call<Data>('system.exec', { argv: [py, '-c', `${twice}\nopen("seen.txt", "w").write(b)`], cwd: '/moving' });
    // Both have their copy before the first timer runs (their set-up awaits nothing but settled promises).
    await new Promise((resolve) => setTimeout(resolve, 50));
    engine.vfs.write('/moving/v.txt', 'new');
    const fast = await run({ argv: [py, '-c', 'print(open("v.txt").read())'], cwd: '/moving' });
    expect(fast.stdout).toBe('new\n');
    // The copy under a running call never changes; a call that changed nothing commits nothing, so it succeeds.
    const read = await reader;
    expect(read.ok && read.data.stdout).toBe('old old\n');
    const wrote = await writer;
    expect(wrote.ok).toBe(false);
    if (!wrote.ok) expect(wrote.error).toMatchObject({ code: 'CONFLICT', details: { reason: 'read changed' } });
    expect(engine.vfs.exists('/moving/seen.txt')).toBe(false);
  });

  it.runIf(git !== null)('runs git: init, commit, and the repository lands in the VFS', async () => {
    engine.vfs.write('/repo/README.md', '# hi\n');
    const env = { GIT_AUTHOR_NAME: 'A', GIT_AUTHOR_EMAIL: 'a@example.com', GIT_COMMITTER_NAME: 'A', GIT_COMMITTER_EMAIL: 'a@example.com' };
    const init = await run({ argv: ['git', 'init', '-q', '-b', 'main'], cwd: '/repo', env });
    expect(init.stderr).toBe('');
    expect(init.exit_code).toBe(0);
    const add = await run({ argv: ['git', 'add', '.'], cwd: '/repo', env });
    expect(add.stderr).toBe('');
    expect(add.exit_code).toBe(0);
    const commit = await run({ argv: ['git', 'commit', '-q', '-m', 'first'], cwd: '/repo', env });
    expect(commit.stderr).toBe('');
    const log = await run({ argv: ['git', 'log', '--format=%s'], cwd: '/repo', env });
    expect(log.stdout).toBe('first\n');
    expect(engine.vfs.read('/repo/.git/HEAD').toString()).toBe('ref: refs/heads/main\n');
  });

  it.runIf(cc !== null)('compiles and runs C: the binary comes back, and runs in a later call', async () => {
    engine.vfs.write('/c/hello.c', '#include <stdio.h>\nint main(void) { puts("hello from C"); return 0; }\n');
    const build = await run({ argv: [cc as string, '-o', 'hello', 'hello.c'], cwd: '/c', check: true });
    expect(build.changes).toEqual([expect.objectContaining({ path: '/c/hello', change: 'created', diff: null })]);
    expect(engine.vfs.read('/c/hello').subarray(0, 4).toString('latin1')).toBe('\x7fELF');
    // The built program is not on the allowlist: it runs only through an allowlisted one.
    const denied = await engine.call('system.exec', { argv: ['/vfs/c/hello'], cwd: '/c' });
    expect(denied.ok).toBe(false);
    const ran = await run({
      argv: [py, '-c', 'import subprocess; print(subprocess.run(["./hello"], capture_output=True, text=True).stdout, end="")'],
      cwd: '/c',
    });
    expect(ran.stdout, ran.stderr).toBe('hello from C\n');
  });

  it('a cwd the caller may not read whole is DENIED before anything runs', async () => {
    engine.vfs.write('/mixed/open/a.txt', 'a');
    engine.vfs.write('/mixed/secret.txt', 's');
    const result = await engine.call(
      'system.exec',
      { argv: ['true'], cwd: '/mixed' },
      { grants: ['sys.exec', 'vfs.read:/mixed/open/**', 'vfs.write'] },
    );
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatchObject({ code: 'DENIED', details: { permission: 'vfs.read' } });
  });
});

// The gate and the refusals come before any sandbox: they run everywhere, root or not, bubblewrap or not.
describe('system.exec before anything runs', () => {
  let engine: Engine;
  let close: () => Promise<void>;

  beforeAll(async () => {
    ({ engine, close } = await execProject({ allow: ['true'] }));
  });
  afterAll(() => close());

  it('a program not on the allowlist is DENIED (stage permission) with exactly one SecurityEvent', async () => {
    const security: SecurityEvent[] = [];
    engine.events.on('security', (event) => security.push(event));
    const result = await engine.call('system.exec', { argv: ['/usr/bin/id'] });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatchObject({ code: 'DENIED', stage: 'permission', details: { program: '/usr/bin/id' } });
    expect(security).toEqual([expect.objectContaining({ tool: 'system.exec', action: 'intrusion', operation: 'exec /usr/bin/id' })]);
  });

  it('a caller without sys.exec is DENIED at the gate, and the default grants do not hold it', async () => {
    expect(DEFAULT_GRANTS).not.toContain('sys.exec');
    const result = await engine.call('system.exec', { argv: ['true'] }, { grants: DEFAULT_GRANTS });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatchObject({ code: 'DENIED', stage: 'permission', details: { permission: 'sys.exec' } });
  });

  it('an engine with the default grants (none named) may not run it, even with an allowlist', async () => {
    const { engine: plain, close: closePlain } = await execProject({ allow: ['true'] }, { grants: undefined });
    try {
      expect(plain.grants).not.toContain('sys.exec');
      const result = await plain.call('system.exec', { argv: ['true'] });
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.error).toMatchObject({ code: 'DENIED', stage: 'permission' });
    } finally {
      await closePlain();
    }
  });

  it.runIf(why === null)('arium doctor says whether system.exec can run, and what its allowlist resolved to', async () => {
    const [good] = (await builtinRunner.probe?.({ config: { exec: { allow: ['true', 'no-such-program-here'] } }, projectDir: process.cwd() })) ?? [];
    expect(good).toMatchObject({ name: 'system.exec', ok: false, fix: expect.stringContaining('no-such-program-here') });
    expect(good?.detail).toMatch(/can run \(bubblewrap works\); allowlist: true → \/.*\/true, no-such-program-here → missing/);
  });

  it.runIf(why === null)('arium doctor resolves the project’s relative paths (exec.allow, python) from the project, wherever it runs', async () => {
    const ws = tempWorkspace();
    try {
      const project = join(ws.workspace, 'p');
      mkdirSync(join(project, 'bin'));
      writeFileSync(join(project, 'bin', 'hello'), '#!/bin/sh\necho hello\n', { mode: 0o755 });
      symlinkSync(realPython() as string, join(project, 'bin', 'py'));
      writeFileSync(join(project, 'arium.json'), JSON.stringify({ exec: { allow: ['bin/hello'] }, python: 'bin/py' }));
      // Run from the workspace's parent: a path taken from the current folder would be missing.
      const run = await runCli(ws.root, ['--workspace', ws.workspace, '--project', 'p', 'doctor', '--json']);
      const checks = JSON.parse(run.out).checks as Array<{ name: string; ok: boolean; detail: string }>;
      expect(checks.find((c) => c.name === 'system.exec')).toMatchObject({
        ok: true,
        detail: expect.stringContaining(`bin/hello → ${join(project, 'bin', 'hello')}`),
      });
      expect(checks.find((c) => c.name === 'python')).toMatchObject({ ok: true });
    } finally {
      ws.cleanup();
    }
  });

  it('arium doctor says system.exec cannot run without bubblewrap, and how to fix it', async () => {
    const [bad] =
      (await builtinRunner.probe?.({ config: { exec: { allow: ['true'], bwrap: '/nonexistent/bwrap' } }, projectDir: process.cwd() })) ?? [];
    expect(bad).toMatchObject({ name: 'system.exec', ok: false, fix: expect.stringContaining('apt-get install bubblewrap') });
  });

  it('refuses to run (MISCONFIGURED, says to install bubblewrap), never in a weaker sandbox', async () => {
    const refusing = await execProject({ allow: ['true'], bwrap: '/nonexistent/bwrap' });
    try {
      const result = await refusing.engine.call('system.exec', { argv: ['true'] });
      expect(result.ok).toBe(false);
      if (!result.ok) {
        expect(result.error).toMatchObject({ code: 'MISCONFIGURED', retryable: false, details: { reason: 'no-bubblewrap' } });
        expect(result.error.message).toContain('bubblewrap');
        expect(result.error.details?.fix).toContain('apt-get install bubblewrap');
      }
    } finally {
      await refusing.close();
    }
  });
});
