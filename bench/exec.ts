import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { programRoot } from '../runners/builtin/exec/sandbox.js';
import { hostLayout, namespaceArgs } from '../runners/shared/bwrap.js';
import { createEngine, DEFAULT_GRANTS, type Engine } from '../src/index.js';
import { spawnTimes } from './measure.js';
import { median, percentile } from './stats.js';

/**
 * system.exec from call to result, against baselines measured in the same run: a plain spawn of `true`,
 * and a bare bubblewrap sandbox running `true` (the same namespaces and read-only system folders, no
 * overlay, no rlimits, no uid change). Then the cost of the mirror: the first call over a VFS of 10,000
 * files (every file written to the host copy), later calls (compared, nothing written), and a call after
 * one file changed. `node --no-node-snapshot dist/bench/run.js exec` runs this suite.
 */

const ms = (value: number) => Math.round(value * 100) / 100;
const stats = (times: number[]) => ({ median_ms: ms(median(times)), p95_ms: ms(percentile(times, 0.95)), n: times.length });

function realPython(): string | null {
  try {
    return execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

async function open(allow: string[]): Promise<{ engine: Engine; done(): Promise<void> }> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-exec-'));
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  writeFileSync(join(workspace, 'p', 'arium.json'), JSON.stringify({ exec: { allow } }));
  const engine = await createEngine({
    workspace,
    project: 'p',
    watch: false,
    persist: false,
    warmUp: false,
    grants: [...DEFAULT_GRANTS, 'sys.exec'],
  });
  return {
    engine,
    done: async () => {
      await engine.close();
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}

async function callTimes(engine: Engine, input: Record<string, unknown>, n: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const result = await engine.call('system.exec', input);
    times.push(performance.now() - t0);
    if (!result.ok) throw new Error(`bench call failed: ${result.error.message}`);
  }
  return times;
}

export async function benchExec(): Promise<Record<string, unknown>> {
  const python = realPython();
  const trueBin = '/usr/bin/true';
  const layout = hostLayout({ executable: trueBin, roots: [], libraries: null });
  const bare = [...namespaceArgs(true), ...layout.binds.flatMap(([from, to]) => ['--ro-bind', from, to])];
  for (const [target, path] of layout.symlinks) bare.push('--symlink', target, path);
  bare.push('--proc', '/proc', '--dev', '/dev', trueBin);

  const results: Record<string, unknown> = {};
  results.spawn_true = stats(spawnTimes(trueBin, [], 30));
  results.bwrap_true = stats(spawnTimes('bwrap', bare, 30));

  const small = await open([trueBin, ...(python ? [python] : [])]);
  try {
    small.engine.vfs.write('/job/in.txt', 'hello\n');
    await callTimes(small.engine, { argv: [trueBin], cwd: '/job' }, 3);
    results.exec_true = stats(await callTimes(small.engine, { argv: [trueBin], cwd: '/job' }, 30));
    if (python) {
      const script = 'open("out.txt", "w").write(open("in.txt").read().upper())';
      results.exec_python_script = stats(await callTimes(small.engine, { argv: [python, '-c', script], cwd: '/job' }, 20));
      const root = programRoot(python);
      const dirs = root
        ? root
            .split('/')
            .slice(1, -1)
            .flatMap((_, i, parts) => ['--perms', '0755', '--dir', `/${parts.slice(0, i + 1).join('/')}`])
        : [];
      const prefix = root ? [...dirs, '--ro-bind', root, root] : [];
      results.bwrap_python_bare = stats(spawnTimes('bwrap', [...bare.slice(0, -1), ...prefix, python, '-c', 'pass'], 10));
    } else {
      results.exec_python_script = 'no python3';
    }
  } finally {
    await small.done();
  }

  const big = await open([trueBin]);
  try {
    const content = Buffer.alloc(200, 'x');
    for (let d = 0; d < 100; d++) for (let f = 0; f < 100; f++) big.engine.vfs.write(`/big/d${d}/f${f}.txt`, content);
    const [first = 0] = await callTimes(big.engine, { argv: [trueBin], cwd: '/big' }, 1);
    results.tree_10000_first_call_ms = ms(first);
    results.tree_10000_later_calls = stats(await callTimes(big.engine, { argv: [trueBin], cwd: '/big' }, 10));
    const afterChange: number[] = [];
    for (let i = 0; i < 5; i++) {
      big.engine.vfs.write('/big/d0/f0.txt', `change ${i}`);
      afterChange.push(...(await callTimes(big.engine, { argv: [trueBin], cwd: '/big' }, 1)));
    }
    results.tree_10000_after_one_change = stats(afterChange);
    results.tree_10000_subtree_of_100 = stats(await callTimes(big.engine, { argv: [trueBin], cwd: '/big/d7' }, 10));
  } finally {
    await big.done();
  }
  return results;
}
