import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Engine, ErrResult, ToolResult, ToolResultEvent } from '../src/index.js';
import { openEngine, recordEvents, type TempProject, tempProject } from './support/project.js';

/** shell.run: real scripts (just-bash in a child process) over a real VFS, through engine.call. */

interface ShellChange {
  path: string;
  type: 'file' | 'directory';
  change: 'created' | 'modified' | 'deleted';
  size?: number;
  diff?: string | null;
  added?: number;
  removed?: number;
  diff_note?: string;
}

interface ShellData {
  exit_code: number;
  stdout: string;
  stderr: string;
  stdout_bytes: number;
  stderr_bytes: number;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  changes: ShellChange[];
  changes_truncated: boolean;
  notes?: string[];
}

let project: TempProject;
let engine: Engine;

beforeEach(async () => {
  project = tempProject();
  engine = await openEngine(project);
  engine.vfs.write('/a.txt', 'x1\ny\nx1\nx2\nz\n');
  engine.vfs.write('/docs/one.md', '# one\nhello world\n');
  engine.vfs.write('/docs/two.md', '# two\nTODO: write it\n');
  engine.vfs.write('/docs/notes.txt', 'not markdown\n');
  engine.vfs.write('/docs/sub/three.md', '# three\nTODO: this too\n');
  engine.vfs.write(
    '/data/users.json',
    JSON.stringify({
      users: [
        { name: 'ada', age: 36 },
        { name: 'bob', age: 41 },
      ],
    }),
  );
});

afterEach(async () => {
  await engine.close();
  project.remove();
});

async function shell(input: Record<string, unknown> | string, options?: Parameters<Engine['call']>[2]): Promise<ShellData> {
  const r = await engine.call('shell.run', typeof input === 'string' ? { script: input } : input, options);
  if (!r.ok) throw new Error(`shell.run failed: ${r.error.code} ${r.error.message}`);
  return r.data as ShellData;
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 300)}`);
  return result.error;
}

const text = (path: string) => engine.vfs.read(path).toString('utf8');

describe('shell.run: scripts over the VFS', () => {
  it('runs a pipeline: cat | grep | sort | uniq -c', async () => {
    const r = await shell('cat /a.txt | grep x | sort | uniq -c');
    expect(r).toMatchObject({ exit_code: 0, stdout: '   2 x1\n   1 x2\n', stderr: '', changes: [], stdout_truncated: false });
  });

  it('expands globs against the VFS, from / and from cwd', async () => {
    expect((await shell('echo /docs/*.md')).stdout).toBe('/docs/one.md /docs/two.md\n');
    expect((await shell({ script: 'for f in *.md; do head -n 1 "$f"; done', cwd: '/docs' })).stdout).toBe('# one\n# two\n');
    // No match: bash keeps the pattern.
    expect((await shell('echo /docs/*.none')).stdout).toBe('/docs/*.none\n');
  });

  it('redirects into files with > and >>, and lists what it created and changed with diffs', async () => {
    // A redirection makes the folders it needs (as just-bash's own file system does).
    const ok = await shell('echo first > /out/log.txt; echo second >> /out/log.txt; echo more >> /a.txt; cat /out/log.txt');
    expect(ok.exit_code).toBe(0);
    expect(ok.stdout).toBe('first\nsecond\n');
    expect(text('/out/log.txt')).toBe('first\nsecond\n');
    expect(text('/a.txt')).toBe('x1\ny\nx1\nx2\nz\nmore\n');
    expect(ok.changes).toEqual([
      expect.objectContaining({ path: '/a.txt', type: 'file', change: 'modified', size: 18, added: 1, removed: 0 }),
      { path: '/out', type: 'directory', change: 'created' },
      expect.objectContaining({ path: '/out/log.txt', type: 'file', change: 'created', size: 13, added: 2, removed: 0 }),
    ]);
    expect(ok.changes[0]?.diff).toContain('+more');
    expect(ok.changes[2]?.diff).toBe('--- /dev/null\n+++ b/out/log.txt\n@@ -0,0 +1,2 @@\n+first\n+second\n');
  });

  it('finds files with find, and greps recursively', async () => {
    expect((await shell("find /docs -name '*.md' | sort")).stdout).toBe('/docs/one.md\n/docs/sub/three.md\n/docs/two.md\n');
    expect((await shell('find / -type d | sort')).stdout).toBe('/\n/data\n/docs\n/docs/sub\n');
    const grep = await shell('grep -rn TODO /docs | sort');
    expect(grep.stdout).toBe('/docs/sub/three.md:2:TODO: this too\n/docs/two.md:2:TODO: write it\n');
  });

  it('edits in place with sed -i: the file changes and the result has its diff', async () => {
    const r = await shell("sed -i 's/hello/goodbye/' /docs/one.md && cat /docs/one.md");
    expect(r.stdout).toBe('# one\ngoodbye world\n');
    expect(text('/docs/one.md')).toBe('# one\ngoodbye world\n');
    expect(r.changes).toHaveLength(1);
    expect(r.changes[0]).toMatchObject({ path: '/docs/one.md', change: 'modified', added: 1, removed: 1 });
    expect(r.changes[0]?.diff).toContain('-hello world\n+goodbye world');
  });

  it('queries JSON with jq, and writes its answer', async () => {
    const r = await shell("jq -r '.users[] | select(.age > 40) | .name' /data/users.json | tee /data/old.txt");
    expect(r.stdout).toBe('bob\n');
    expect(text('/data/old.txt')).toBe('bob\n');
    expect((await shell("jq '.users | map(.age) | add' /data/users.json")).stdout).toBe('77\n');
  });

  it('keeps going after a failing command without set -e, and stops at it with set -e', async () => {
    const plain = await shell('echo a > /f1.txt; cat /missing.txt; echo b > /f2.txt; echo done');
    expect(plain.exit_code).toBe(0);
    expect(plain.stdout).toBe('done\n');
    expect(plain.stderr).toBe('cat: /missing.txt: No such file or directory\n');
    expect(plain.changes.map((c) => c.path)).toEqual(['/f1.txt', '/f2.txt']);

    const strict = await shell('set -e; echo a > /g1.txt; cat /missing.txt; echo b > /g2.txt; echo done');
    expect(strict.exit_code).toBe(1);
    expect(strict.stdout).toBe('');
    // What ran before the failure is kept, as in bash: the call itself succeeded.
    expect(engine.vfs.exists('/g1.txt')).toBe(true);
    expect(engine.vfs.exists('/g2.txt')).toBe(false);
    expect(strict.changes.map((c) => c.path)).toEqual(['/g1.txt']);
  });

  it('with require_success, a non-zero exit fails the call and keeps nothing', async () => {
    const r = await engine.call('shell.run', { script: 'set -e; echo a > /h1.txt; false; echo b > /h2.txt', require_success: true });
    const error = failed(r);
    expect(error).toMatchObject({ code: 'TOOL_ERROR', stage: 'execution', details: { exit_code: 1 } });
    expect(error.message).toMatch(/exited with status 1; nothing it wrote was kept/);
    expect(engine.vfs.exists('/h1.txt')).toBe(false);
    // And exit 0 commits as usual.
    await shell({ script: 'echo a > /h1.txt', require_success: true });
    expect(text('/h1.txt')).toBe('a\n');
  });

  it('moves, copies and deletes files and folders, and reports each path', async () => {
    const r = await shell('cp -r /docs /copy && mv /a.txt /b.txt && rm -r /docs/sub && mkdir -p /new/deep');
    expect(r.exit_code).toBe(0);
    expect(text('/copy/sub/three.md')).toBe('# three\nTODO: this too\n');
    expect(engine.vfs.exists('/a.txt')).toBe(false);
    expect(text('/b.txt')).toBe('x1\ny\nx1\nx2\nz\n');
    expect(engine.vfs.exists('/docs/sub')).toBe(false);
    const summary = r.changes.map((c) => `${c.change} ${c.type} ${c.path}`);
    expect(summary).toEqual([
      'deleted file /a.txt',
      'created file /b.txt',
      'created directory /copy',
      'created file /copy/notes.txt',
      'created file /copy/one.md',
      'created directory /copy/sub',
      'created file /copy/sub/three.md',
      'created file /copy/two.md',
      'deleted directory /docs/sub',
      'deleted file /docs/sub/three.md',
      'created directory /new',
      'created directory /new/deep',
    ]);
    expect(r.changes.find((c) => c.path === '/docs/sub/three.md')?.diff).toContain('-TODO: this too');
  });

  it('takes cwd, env and stdin; HOME is /', async () => {
    const r = await shell({ script: 'pwd; echo "$GREETING $HOME"; tr a-z A-Z; ls', cwd: '/docs', env: { GREETING: 'hi' }, stdin: 'shout\n' });
    expect(r.stdout).toBe('/docs\nhi /\nSHOUT\nnotes.txt\none.md\nsub\ntwo.md\n');
    const missing = failed(await engine.call('shell.run', { script: 'pwd', cwd: '/nope' }));
    expect(missing.code).toBe('NOT_FOUND');
    const file = failed(await engine.call('shell.run', { script: 'pwd', cwd: '/a.txt' }));
    expect(file.code).toBe('NOT_A_DIRECTORY');
  });

  it('omits diffs with diff: false, and does not list a file rewritten with its old bytes', async () => {
    const r = await shell({ script: 'echo new > /n.txt; cat /a.txt > /tmp.txt; mv /tmp.txt /a.txt', diff: false });
    expect(r.changes).toEqual([{ path: '/n.txt', type: 'file', change: 'created', size: 4 }]);
  });

  it('runs heredocs and functions as bash does (the script is not re-indented)', async () => {
    const script = ['greet() { echo "hello $1"; }', 'greet ada', 'cat <<EOF > /doc.txt', '  indented', 'EOF', 'cat /doc.txt'].join('\n');
    expect((await shell(script)).stdout).toBe('hello ada\n  indented\n');
  });

  it('puts the changed paths in the ToolResultEvent, as for any tool', async () => {
    const events = recordEvents(engine);
    await shell('echo x > /ev.txt');
    const result = events.find((e): e is ToolResultEvent => e.type === 'ToolResultEvent');
    expect(result?.vfs?.written).toContain('/ev.txt');
  });
});

describe('shell.run: limits', () => {
  it('stops an endless loop at the loop limit: a clear TOOL_ERROR naming the limit, nothing written', async () => {
    const r = await engine.call('shell.run', { script: 'echo start > /started.txt; while true; do :; done', max_loop_iterations: 1000 });
    const error = failed(r);
    expect(error.code).toBe('TOOL_ERROR');
    expect(error.message).toMatch(/execution limits.*while loop: too many iterations \(1000\).*raise it with "max_loop_iterations"/);
    expect(error.details).toMatchObject({ limit: 'maxLoopIterations', input: 'max_loop_iterations', exit_code: 126 });
    expect(engine.vfs.exists('/started.txt')).toBe(false);
  });

  it('runs ordinary commands on ordinary sizes as bash does: no loop count cuts seq, awk or cut short', async () => {
    engine.vfs.write('/big.txt', Array.from({ length: 300_000 }, (_, i) => `line ${i}\n`).join(''));
    const r = await shell("seq 1 400000 | wc -l; awk 'END { print NR }' /big.txt; cut -c1-4 /big.txt | wc -l; grep -c line /big.txt");
    expect(r.stdout).toBe('400000\n300000\n300000\n300000\n');
  }, 120_000);

  it('a lower max_loop_iterations bounds the commands that loop too, and the error says which input raises it', async () => {
    const error = failed(await engine.call('shell.run', { script: 'seq 1 5000 | wc -l', max_loop_iterations: 1000 }));
    expect(error).toMatchObject({ code: 'TOOL_ERROR', details: { input: 'max_loop_iterations' } });
    expect(error.message).toMatch(/seq: iteration limit exceeded \(1000\).*raise it with "max_loop_iterations"/);
  });

  it('stops a script at the command limit', async () => {
    const error = failed(await engine.call('shell.run', { script: 'for i in 1 2 3 4 5 6 7 8 9 10; do true; done', max_commands: 5 }));
    expect(error).toMatchObject({ code: 'TOOL_ERROR', details: { limit: 'maxCommandCount', input: 'max_commands' } });
  });

  it('ends an endless loop at the call timeout (TIMEOUT), kills its process, and the next call gets a new one', async () => {
    await shell('true'); // the warm process
    const before = (await engine.status()).runners.builtin?.shell as { started: number };
    const r = await engine.call(
      'shell.run',
      { script: 'echo start > /started.txt; while true; do :; done', max_loop_iterations: 100_000_000, max_commands: 100_000_000 },
      { timeout_ms: 300 },
    );
    const error = failed(r);
    expect(error).toMatchObject({ code: 'TIMEOUT', stage: 'execution' });
    expect(engine.vfs.exists('/started.txt')).toBe(false);
    // The process that ran it is gone (its end is asynchronous: wait for it, bounded).
    const workers = async () => ((await engine.status()).runners.builtin?.shell as { workers: number } | undefined)?.workers ?? 0;
    for (let i = 0; i < 100 && (await workers()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await engine.status()).runners.builtin?.shell).toMatchObject({ workers: 0, idle: 0 });
    expect((await shell('echo again')).stdout).toBe('again\n');
    expect((await engine.status()).runners.builtin?.shell).toMatchObject({ workers: 1, idle: 1, started: before.started + 1 });
  });

  it('a cancelled call stops its script (CANCELLED)', async () => {
    const controller = new AbortController();
    const call = engine.call(
      'shell.run',
      { script: 'while true; do :; done', max_loop_iterations: 100_000_000, max_commands: 100_000_000 },
      { signal: controller.signal },
    );
    setTimeout(() => controller.abort(), 200);
    expect(failed(await call).code).toBe('CANCELLED');
  });

  it('cuts a large output to the output limit and says so', async () => {
    // 10 MB on stdout (printf pads to the width), against the default output limit of 1 MiB.
    const r = await shell("printf '%10000000s' x; echo oops >&2");
    expect(r.stdout_bytes).toBe(10_000_000);
    expect(r.stdout_truncated).toBe(true);
    expect(r.stdout.length).toBeGreaterThan(500_000);
    expect(r.stdout.length).toBeLessThan(1024 * 1024);
    expect(r.stdout).toMatch(/^ +$/);
    expect(r.stderr).toBe('oops\n');
    expect(r.stderr_truncated).toBe(false);
    expect(r.notes).toEqual([`stdout: the first ${r.stdout.length} of 10000000 bytes are kept (output limit)`]);
    expect(Buffer.byteLength(JSON.stringify(r))).toBeLessThanOrEqual(1024 * 1024);
  });

  it('a script that runs out of memory fails with MEMORY_LIMIT, and its process is replaced', async () => {
    // just-bash holds a pipe's bytes several times over: 30 MB through a pipe needs far more than 128 MB.
    const r = await engine.call('shell.run', { script: "echo start > /started.txt; printf '%30000000s' x | wc -c" });
    expect(failed(r)).toMatchObject({ code: 'MEMORY_LIMIT', details: { memory_mb: 128 } });
    expect(engine.vfs.exists('/started.txt')).toBe(false);
    expect((await shell('echo fine')).stdout).toBe('fine\n');
  });

  it('a brace range past 10,000 items fails the call (TOOL_ERROR naming the limit and how to stay under it), never runs cut', async () => {
    // just-bash stops a range at 10,000 items and carries on with exit status 0.
    const loop = failed(await engine.call('shell.run', { script: 'echo start > /started.txt; for i in {1..20000}; do echo $i > /last.txt; done' }));
    expect(loop).toMatchObject({
      code: 'TOOL_ERROR',
      stage: 'execution',
      details: { limit: 'braceRangeItems', max: 10_000, items: 20_000, range: '{1..20000}' },
    });
    expect(loop.message).toMatch(/\{1\.\.20000\} gives 20000 items.*at most 10000 items per range.*nothing it wrote was kept.*Split the range.*seq/);
    expect(engine.vfs.exists('/started.txt')).toBe(false);
    expect(engine.vfs.exists('/last.txt')).toBe(false);

    const touch = failed(await engine.call('shell.run', { script: 'mkdir /many && cd /many && touch f{1..12000}' }));
    expect(touch).toMatchObject({ code: 'TOOL_ERROR', details: { limit: 'braceRangeItems', items: 12_000, range: '{1..12000}' } });
    expect(engine.vfs.exists('/many')).toBe(false);

    // A script that runs another (bash -c) is checked too, though the outer one would carry on.
    const nested = failed(await engine.call('shell.run', { script: `bash -c 'echo {1..20000}'; echo after > /after.txt` }));
    expect(nested).toMatchObject({ code: 'TOOL_ERROR', details: { limit: 'braceRangeItems', range: '{1..20000}' } });
    expect(engine.vfs.exists('/after.txt')).toBe(false);
  });

  it('brace ranges: exactly 10,000 items run, 10,001 do not, whatever the direction or step; quoted braces are text', async () => {
    expect((await shell('echo {1..10000} | wc -w')).stdout).toBe('10000\n');
    expect((await shell('echo {10000..1} | tail -c 6')).stdout).toBe('3 2 1\n');
    expect((await shell('echo {0..19998..2} | wc -w')).stdout).toBe('10000\n');
    for (const [script, items, range] of [
      ['echo {1..10001}', 10_001, '{1..10001}'],
      ['echo {10000..0}', 10_001, '{10000..0}'],
      ['echo {0..20000..2}', 10_001, '{0..20000..2}'],
      ['echo x{001..10001}y', 10_001, '{001..10001}'],
    ] as const) {
      expect(failed(await engine.call('shell.run', { script })), script).toMatchObject({
        code: 'TOOL_ERROR',
        details: { limit: 'braceRangeItems', max: 10_000, items, range },
      });
    }
    expect((await shell(`echo "{1..20000}" '{1..20000}' \\{1..20000\\}`)).stdout).toBe('{1..20000} {1..20000} {1..20000}\n');
  });

  it('a write past max_call_bytes: a command sees a full disk; a redirection stops the script (TOOL_ERROR, nothing kept)', async () => {
    await engine.close();
    engine = await openEngine(project, { vfsQuota: { max_call_bytes: 1000 } });
    engine.vfs.write('/big.txt', 'x'.repeat(2000));
    const cp = await shell('echo small > /small.txt; cp /big.txt /copy.txt; echo "cp: $?"');
    expect(cp.stdout).toBe('cp: 1\n');
    expect(cp.stderr).toMatch(/no space left on device/i);
    expect(engine.vfs.exists('/small.txt')).toBe(true);
    const redirect = failed(await engine.call('shell.run', { script: 'echo small > /small2.txt; cat /big.txt > /copy.txt; echo after' }));
    expect(redirect.code).toBe('TOOL_ERROR');
    expect(redirect.message).toMatch(/stopped the script; nothing it wrote was kept: ENOSPC/);
    expect(engine.vfs.exists('/small2.txt')).toBe(false);
  });

  it('cuts the diffs, not the call, when many files change: the later diffs are omitted with a note', async () => {
    await engine.close();
    engine = await openEngine(project, { policy: { output_bytes: 64 * 1024 } });
    const r = await shell('mkdir /many; for i in $(seq 1 100); do seq 1 200 > /many/f$i.txt; done; echo done');
    expect(r.stdout).toBe('done\n');
    expect(r.changes).toHaveLength(101);
    const files = r.changes.filter((c) => c.type === 'file');
    const withDiff = files.filter((c) => typeof c.diff === 'string');
    expect(withDiff.length).toBeGreaterThan(0);
    expect(withDiff.length).toBeLessThan(100);
    expect(files.find((c) => c.diff === null)?.diff_note).toBe('diff omitted: the output limit was reached');
    expect(r.notes).toEqual([`diffs: ${100 - withDiff.length} omitted (output limit)`]);
    expect(engine.vfs.list('/many').entries).toHaveLength(100);
    expect(Buffer.byteLength(JSON.stringify(r))).toBeLessThanOrEqual(64 * 1024);
  });
});

describe('shell.run: calls at once', () => {
  it('eight calls in parallel, each writing its own file: all land', async () => {
    engine.vfs.mkdir('/par');
    const again = await Promise.all(
      Array.from({ length: 8 }, (_, i) => engine.call('shell.run', { script: `echo "call ${i}" > /par/f${i}.txt; cat /par/f${i}.txt` })),
    );
    for (const [i, r] of again.entries()) {
      expect(r.ok).toBe(true);
      expect((r as { data: ShellData }).data.stdout).toBe(`call ${i}\n`);
      expect(text(`/par/f${i}.txt`)).toBe(`call ${i}\n`);
    }
    // One process stays warm; the others ended with their calls.
    expect((await engine.status()).runners.builtin?.shell).toMatchObject({ idle: 1 });
  });

  it('two calls incrementing the same counter: one loses the race, runs again, and nothing is lost', async () => {
    engine.vfs.write('/counter.txt', '0\n');
    // Both read the counter well within the 2 s the first one sleeps (the second call's process starts
    // meanwhile): the first commits, the second's commit is refused, and its second run reads 1.
    const script = 'n=$(cat /counter.txt); sleep 2; echo $((n + 1)) > /counter.txt; echo $n';
    const [a, b] = await Promise.all([engine.call('shell.run', { script }), engine.call('shell.run', { script })]);
    expect(a.ok && b.ok).toBe(true);
    expect(text('/counter.txt')).toBe('2\n');
    const attempts = [a.meta.attempts ?? 1, b.meta.attempts ?? 1].sort();
    expect(attempts).toEqual([1, 2]);
    const seen = [(a as { data: ShellData }).data.stdout, (b as { data: ShellData }).data.stdout].sort();
    expect(seen).toEqual(['0\n', '1\n']);
  });
});
