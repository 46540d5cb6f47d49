import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine, type Engine } from '../src/index.js';
import { median } from './stats.js';

/**
 * The durable VFS on a tree of 10,000 files (100 MB: 100 folders of 100 files of 10,000 bytes, 100
 * lines each), in a temporary workspace on disk. The targets: a snapshot after changing one file
 * ≤ 5 ms, a diff between two snapshots that differ in 10 files ≤ 10 ms, restoring such a snapshot
 * ≤ 50 ms, store growth per snapshot ≈ the size of the changed files. Also the cost of durability:
 * `fs.write` calls per second with `persist` true (one journal fdatasync per call) and false.
 */

const FOLDERS = 100;
const FILES_PER_FOLDER = 100;
const LINES = 100;
const LINE = 99; // + '\n' = 100 bytes a line, 10,000 a file

function fileText(folder: number, file: number, version = 0, changedLine = -1): string {
  const out: string[] = [];
  for (let l = 0; l < LINES; l++) {
    const tag = l === changedLine ? `v${version}` : 'v0';
    out.push(`f${folder}/${file} line ${l} ${tag} `.padEnd(LINE, 'abcdefghij'));
  }
  return `${out.join('\n')}\n`;
}

const pathOf = (folder: number, file: number) => `/src/d${String(folder).padStart(3, '0')}/f${String(file).padStart(3, '0')}.txt`;

/** Bytes of the object store on disk: loose objects (`ab/cdef…`) and packs (`pack/*.pack`, with their dead lists). */
function storeBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    total += entry.isDirectory() ? storeBytes(path) : statSync(path).size;
  }
  return total;
}

function time(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

function summary(samples: number[], target?: number): Record<string, number> {
  const sorted = [...samples].sort((a, b) => a - b);
  const out: Record<string, number> = {
    median: round(median(samples)),
    p90: round(sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.9))] as number),
    runs: samples.length,
  };
  if (target !== undefined) out.target = target;
  return out;
}

async function writesPerSecond(root: string, persist: boolean): Promise<Record<string, number>> {
  const name = persist ? 'writes-durable' : 'writes-memory';
  mkdirSync(join(root, name, 'tools'), { recursive: true });
  const engine = await createEngine({ workspace: root, project: name, watch: false, persist });
  try {
    const content = `${'x'.repeat(1023)}\n`;
    const inputs = Array.from({ length: 100 }, (_, i) => ({ path: `/out/f${i}.txt`, content }));
    for (let i = 0; i < 500; i++) await engine.call('fs.write', inputs[i % 100]); // warm-up
    const latencies: number[] = [];
    const end = performance.now() + 2000;
    const t0 = performance.now();
    let calls = 0;
    while (performance.now() < end) {
      const t = performance.now();
      const r = await engine.call('fs.write', inputs[calls % 100]);
      latencies.push(performance.now() - t);
      if (!r.ok) throw new Error(`bench write failed: ${r.error.message}`);
      calls++;
    }
    return { calls_per_sec: Math.round(calls / ((performance.now() - t0) / 1000)), median_us: round(median(latencies) * 1000, 1) };
  } finally {
    await engine.close();
  }
}

export async function benchVfs(): Promise<Record<string, unknown>> {
  const root = mkdtempSync(join(tmpdir(), 'arium-bench-vfs-'));
  let engine: Engine | null = null;
  try {
    // The tree goes in the way a user brings one in: written on the host, imported as one change.
    const host = join(root, 'host');
    for (let d = 0; d < FOLDERS; d++) {
      mkdirSync(join(host, 'src', `d${String(d).padStart(3, '0')}`), { recursive: true });
      for (let f = 0; f < FILES_PER_FOLDER; f++) writeFileSync(join(host, pathOf(d, f)), fileText(d, f));
    }
    mkdirSync(join(root, 'big', 'tools'), { recursive: true });
    engine = await createEngine({ workspace: root, project: 'big', watch: false });
    const objects = join(root, 'big', '.arium', 'objects');
    let e = engine;
    let report: ReturnType<Engine['importFrom']> | undefined;
    const importMs = time(() => {
      report = e.importFrom(host, '/');
    });
    let base: ReturnType<Engine['snapshot']> | undefined;
    const firstSnapshotMs = time(() => {
      base = e.snapshot({ label: 'base' });
    });
    const setup = {
      files: report?.files,
      bytes: report?.bytes,
      import_ms: round(importMs),
      first_snapshot_ms: round(firstSnapshotMs),
      store_bytes: storeBytes(objects),
      snapshot_files: base?.files,
    };

    // A snapshot after changing one file: one journal record holding the changed blob and two trees (deltas).
    let version = 1;
    const change = (folder: number, file: number) => e.vfs.write(pathOf(folder, file), fileText(folder, file, version++, (version * 7) % LINES));
    for (let i = 0; i < 5; i++) {
      change(i, i);
      e.snapshot();
    }
    const snapshotOne: number[] = [];
    for (let i = 0; i < 40; i++) {
      change((i * 37) % FOLDERS, (i * 53) % FILES_PER_FOLDER);
      snapshotOne.push(time(() => e.snapshot()));
    }

    // Store growth per snapshot against the bytes of the files changed. A snapshot's new objects are
    // in its journal record until the next checkpoint writes them to the store: gc folds the journal
    // first (and finds nothing to delete here), so the store is measured after each checkpoint.
    const growth: Record<string, Record<string, number>> = {};
    for (const n of [1, 10, 100]) {
      e.gc();
      const before = storeBytes(objects);
      for (let i = 0; i < n; i++) change((i * 13 + n) % FOLDERS, (i * 29 + n) % FILES_PER_FOLDER);
      e.snapshot();
      if (e.gc().removed !== 0) throw new Error('gc removed objects a snapshot needs');
      const grown = storeBytes(objects) - before;
      growth[`${n}_files`] = { changed_bytes: n * LINES * (LINE + 1), store_growth_bytes: grown, ratio: round(grown / (n * LINES * (LINE + 1))) };
    }

    // Two snapshots that differ in 10 files (one line each, in 10 folders).
    const a = e.snapshot({ label: 'a' });
    for (let i = 0; i < 10; i++) change(i * 10 + 3, i * 7 + 1);
    const b = e.snapshot({ label: 'b' });
    const check = e.diff(a.id, b.id);
    if (check.stats.files_changed !== 10) throw new Error(`expected 10 changed files, got ${check.stats.files_changed}`);
    for (let i = 0; i < 5; i++) e.diff(a.id, b.id); // warm-up
    const diffMs: number[] = [];
    const diffStatMs: number[] = [];
    for (let i = 0; i < 40; i++) {
      diffMs.push(time(() => e.diff(a.id, b.id)));
      diffStatMs.push(time(() => e.diff(a.id, b.id, { stat_only: true })));
    }

    // Restoring one of them from the other (the live tree equals a snapshot: no backup is taken).
    const restoreMs: number[] = [];
    for (let i = 0; i < 30; i++) {
      const target = i % 2 === 0 ? a : b;
      let result: ReturnType<Engine['restore']> | undefined;
      restoreMs.push(
        time(() => {
          result = e.restore(target.id);
        }),
      );
      if (result?.written !== 10 || result.backup !== null) throw new Error('restore did not write exactly the 10 files');
    }

    // Opening the 100 MB project again (checkpoint load: every blob read and verified).
    await e.close();
    engine = null;
    const t0 = performance.now();
    engine = await createEngine({ workspace: root, project: 'big', watch: false });
    const reopenMs = performance.now() - t0;
    e = engine;
    if (e.vfs.usage().bytes !== FOLDERS * FILES_PER_FOLDER * LINES * (LINE + 1)) throw new Error('reopened tree has the wrong size');
    // The same diff once more, in a new engine whose tree cache holds only the live tree's folders
    // (the snapshots' folders are read from disk, following their delta chains).
    await e.close();
    engine = await createEngine({ workspace: root, project: 'big', watch: false });
    e = engine;
    const coldDiffMs = time(() => e.diff(a.id, b.id));
    await e.close();
    engine = null;

    return {
      tree: setup,
      snapshot_after_one_change_ms: summary(snapshotOne, 5),
      diff_10_files_ms: summary(diffMs, 10),
      diff_10_files_stat_only_ms: summary(diffStatMs),
      restore_10_files_ms: summary(restoreMs, 50),
      diff_10_files_first_after_reopen_ms: round(coldDiffMs),
      store_growth_per_snapshot: growth,
      reopen_100mb_ms: round(reopenMs),
      fs_write_1kb_persist_true: await writesPerSecond(root, true),
      fs_write_1kb_persist_false: await writesPerSecond(root, false),
    };
  } finally {
    await engine?.close();
    rmSync(root, { recursive: true, force: true });
  }
}
