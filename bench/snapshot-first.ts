import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine } from '../src/index.js';
import { median } from './stats.js';

/**
 * The first durable snapshot of a large tree of small files: 10,000 files of 200 bytes in 100 folders
 * of 100, against git's first commit of the same tree. The target: ≤ 0.5 s. The runs are
 * interleaved (Arium, git, git with every fsync, Arium, …) so that a busy moment of the shared machine
 * falls on all of them alike.
 *
 * Arium: a new project, the tree imported from a host folder (not timed), then `engine.snapshot()`
 * timed: when it returns the snapshot survives a crash. The close that follows is timed too, since it
 * is where objects a snapshot journaled are synced into the store (the checkpoint), so a cost moved
 * out of the snapshot shows up there. git: `git init && git add -A && git commit` in a folder holding
 * the tree (written beforehand, not timed); by default git does not fsync loose objects (its
 * `core.fsync` default leaves them out), so the same commit with `core.fsync=all` is timed as well.
 */

const FOLDERS = 100;
const FILES_PER_FOLDER = 100;
const FILE_BYTES = 200;
const RUNS = 3;
const GIT = '/usr/bin/git';

const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

function content(folder: number, file: number): string {
  return `folder ${folder} file ${file} `.padEnd(FILE_BYTES - 1, 'abcdefghijklmnopqrstuvwxyz').concat('\n');
}

function writeTree(dir: string): void {
  for (let d = 0; d < FOLDERS; d++) {
    const folder = join(dir, `d${String(d).padStart(3, '0')}`);
    mkdirSync(folder, { recursive: true });
    for (let f = 0; f < FILES_PER_FOLDER; f++) writeFileSync(join(folder, `f${String(f).padStart(3, '0')}.txt`), content(d, f));
  }
}

async function ariumRun(root: string): Promise<{ snapshot: number; close: number }> {
  const host = join(root, 'host');
  writeTree(host);
  mkdirSync(join(root, 'p', 'tools'), { recursive: true });
  const engine = await createEngine({ workspace: root, project: 'p', watch: false });
  let closed = false;
  try {
    const report = engine.importFrom(host, '/');
    if (report.files !== FOLDERS * FILES_PER_FOLDER) throw new Error(`imported ${report.files} files`);
    const t0 = performance.now();
    const info = engine.snapshot({ label: 'first' });
    const snapshot = performance.now() - t0;
    if (info.files !== FOLDERS * FILES_PER_FOLDER) throw new Error(`the snapshot holds ${info.files} files`);
    const t1 = performance.now();
    await engine.close();
    closed = true;
    return { snapshot, close: performance.now() - t1 };
  } finally {
    if (!closed) await engine.close();
  }
}

function gitRun(root: string, fsyncAll: boolean): number {
  const repo = join(root, 'repo');
  writeTree(repo);
  const config = ['-c', 'user.name=bench', '-c', 'user.email=bench@example.invalid', '-c', 'commit.gpgsign=false'];
  if (fsyncAll) config.push('-c', 'core.fsync=all');
  const git = (...args: string[]) => {
    const r = spawnSync(GIT, [...config, ...args], { cwd: repo, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr}`);
  };
  const t0 = performance.now();
  git('init', '-q');
  git('add', '-A');
  git('commit', '-q', '-m', 'first');
  return performance.now() - t0;
}

function stats(samples: number[]): Record<string, unknown> {
  return {
    min: round(Math.min(...samples)),
    median: round(median(samples)),
    max: round(Math.max(...samples)),
    runs: samples.map((s) => round(s)),
  };
}

export async function benchSnapshotFirst(): Promise<Record<string, unknown>> {
  const arium: number[] = [];
  const ariumClose: number[] = [];
  const git: number[] = [];
  const gitDurable: number[] = [];
  const fresh = () => mkdtempSync(join(tmpdir(), 'arium-bench-first-'));
  for (let run = 0; run < RUNS; run++) {
    for (const step of ['arium', 'git', 'git-fsync'] as const) {
      const root = fresh();
      try {
        if (step === 'arium') {
          const r = await ariumRun(root);
          arium.push(r.snapshot);
          ariumClose.push(r.close);
        } else if (step === 'git') {
          git.push(gitRun(root, false));
        } else {
          gitDurable.push(gitRun(root, true));
        }
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    }
  }
  return {
    tree: { files: FOLDERS * FILES_PER_FOLDER, folders: FOLDERS, file_bytes: FILE_BYTES },
    arium_first_snapshot_ms: { ...stats(arium), target: 500 },
    arium_close_after_ms: stats(ariumClose),
    git_init_add_commit_ms: stats(git),
    git_with_core_fsync_all_ms: stats(gitDurable),
    ratio_arium_to_git_median: round(median(arium) / median(git), 2),
    ratio_arium_to_git_fsync_all_median: round(median(arium) / median(gitDurable), 2),
  };
}
