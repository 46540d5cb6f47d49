import type { JournalOp } from '../store/journal.js';
import type { Objects } from '../store/memory-objects.js';
import { DEFAULT_DIFF_LIMITS, diffFiles } from './text-diff.js';
import { decodeTree, type TreeEntry } from './tree-index.js';

export type ChangeStatus = 'added' | 'modified' | 'deleted' | 'renamed';

export interface FileChange {
  path: string;
  status: ChangeStatus;
  /** The old path of a renamed file (same content, new path). */
  from?: string;
  size_before: number;
  size_after: number;
  binary: boolean;
  lines_added: number;
  lines_removed: number;
  /** Unified patch; null for renames, binary files, and once the output budget is spent (see `note`). */
  patch: string | null;
  note?: string;
}

export interface TreeDiff {
  files: FileChange[];
  stats: { files_changed: number; added: number; modified: number; deleted: number; renamed: number; lines_added: number; lines_removed: number };
  /** Set when patches were left out to keep the diff bounded. */
  note?: string;
}

export interface TreeDiffOptions {
  /** Keep only files whose path (or old path) matches. */
  filter?: (path: string) => boolean;
  /** Only files the reader may see: the others are dropped before renames are found. */
  visible?: (path: string) => boolean;
  /** Include unified patches (default true); `false` gives only the file list and counts (line counts too). */
  patches?: boolean;
  /** Total patch characters before the remaining patches are left out. */
  max_patch_chars?: number;
}

interface RawChange {
  path: string;
  status: 'added' | 'modified' | 'deleted';
  before: TreeEntry | null;
  after: TreeEntry | null;
}

function entries(objects: Objects, hash: string | null): Map<string, TreeEntry> {
  const map = new Map<string, TreeEntry>();
  if (hash) for (const e of decodeTree(objects.get('tree', hash))) map.set(e[0], e);
  return map;
}

function join(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

/** Calls `visit` for every file of a subtree. */
function eachFile(objects: Objects, hash: string, dir: string, visit: (path: string, entry: TreeEntry) => void): void {
  for (const e of entries(objects, hash).values()) {
    const path = join(dir, e[0]);
    if (e[1] === 'd') eachFile(objects, e[2], path, visit);
    else visit(path, e);
  }
}

/**
 * Walks two trees side by side. Subtrees with equal hashes are skipped without being read, so comparing
 * two snapshots that differ in a few files reads only the folders on the way to those files.
 */
function walk(objects: Objects, a: string | null, b: string | null, dir: string, out: RawChange[]): void {
  if (a === b) return;
  const left = entries(objects, a);
  const right = entries(objects, b);
  const names = [...new Set([...left.keys(), ...right.keys()])].sort();
  for (const name of names) {
    const x = left.get(name) ?? null;
    const y = right.get(name) ?? null;
    const path = join(dir, name);
    if (x && y && x[1] === 'd' && y[1] === 'd') {
      walk(objects, x[2], y[2], path, out);
      continue;
    }
    if (x && y && x[1] === 'f' && y[1] === 'f') {
      if (x[2] !== y[2]) out.push({ path, status: 'modified', before: x, after: y });
      continue;
    }
    if (x) {
      if (x[1] === 'd') eachFile(objects, x[2], path, (p, e) => out.push({ path: p, status: 'deleted', before: e, after: null }));
      else out.push({ path, status: 'deleted', before: x, after: null });
    }
    if (y) {
      if (y[1] === 'd') eachFile(objects, y[2], path, (p, e) => out.push({ path: p, status: 'added', before: null, after: e }));
      else out.push({ path, status: 'added', before: null, after: y });
    }
  }
}

export function diffTrees(objects: Objects, from: string | null, to: string | null, options: TreeDiffOptions = {}): TreeDiff {
  let raw: RawChange[] = [];
  walk(objects, from, to, '/', raw);
  const visible = options.visible;
  if (visible) raw = raw.filter((c) => visible(c.path));
  // A deleted file whose exact content reappears at an added path was renamed.
  const deletedByHash = new Map<string, RawChange[]>();
  for (const c of raw) if (c.status === 'deleted' && c.before) deletedByHash.set(c.before[2], [...(deletedByHash.get(c.before[2]) ?? []), c]);
  const renamedFrom = new Set<RawChange>();
  const files: FileChange[] = [];
  for (const c of raw) {
    if (c.status === 'added' && c.after) {
      const source = deletedByHash.get(c.after[2])?.find((d) => !renamedFrom.has(d));
      if (source) {
        renamedFrom.add(source);
        const size = c.after[3];
        files.push({
          path: c.path,
          status: 'renamed',
          from: source.path,
          size_before: size,
          size_after: size,
          binary: false,
          lines_added: 0,
          lines_removed: 0,
          patch: null,
        });
        continue;
      }
    }
    files.push({
      path: c.path,
      status: c.status,
      size_before: c.before?.[3] ?? 0,
      size_after: c.after?.[3] ?? 0,
      binary: false,
      lines_added: 0,
      lines_removed: 0,
      patch: null,
    });
  }
  const renamedPaths = new Set([...renamedFrom].map((r) => r.path));
  const kept = files
    .filter((f) => f.status !== 'deleted' || !renamedPaths.has(f.path))
    .filter((f) => !options.filter || options.filter(f.path) || (f.from !== undefined && options.filter(f.from)))
    .sort((x, y) => (x.path < y.path ? -1 : 1));
  const byPath = new Map(raw.map((r) => [r.path, r]));
  return completeDiff(
    kept,
    (f) => {
      const r = byPath.get(f.path) as RawChange;
      return { before: r.before ? objects.get('blob', r.before[2]) : null, after: r.after ? objects.get('blob', r.after[2]) : null };
    },
    options,
  );
}

/**
 * Fills in line counts and patches of changed files (sorted, renames found) from their contents, within
 * the output budget, and sums them up. `contents` gives a file's bytes before and after, or null when
 * they were not kept (then the file is listed with its note and no patch).
 */
export function completeDiff(
  files: FileChange[],
  contents: (file: FileChange) => { before: Buffer | null; after: Buffer | null } | null,
  options: Pick<TreeDiffOptions, 'patches' | 'max_patch_chars'> = {},
): TreeDiff {
  const budget = { left: options.max_patch_chars ?? DEFAULT_DIFF_LIMITS.max_patch_chars, exhausted: false };
  for (const f of files) {
    // Line counts are computed without patches too: `--stat` is mostly about them.
    if (f.status === 'renamed') continue;
    const content = contents(f);
    if (content === null) continue;
    const d = diffFiles(f.path, content.before, content.after);
    f.binary = d.binary;
    f.lines_added = d.added;
    f.lines_removed = d.removed;
    if (d.omitted && d.patch === null) f.note = d.omitted;
    if (d.patch !== null && options.patches !== false) {
      if (d.patch.length > budget.left) {
        budget.exhausted = true;
        f.note = 'patch left out: the diff reached its output limit';
      } else {
        budget.left -= d.patch.length;
        f.patch = d.patch;
      }
    }
  }
  const count = (s: ChangeStatus) => files.filter((f) => f.status === s).length;
  const result: TreeDiff = {
    files,
    stats: {
      files_changed: files.length,
      added: count('added'),
      modified: count('modified'),
      deleted: count('deleted'),
      renamed: count('renamed'),
      lines_added: files.reduce((n, f) => n + f.lines_added, 0),
      lines_removed: files.reduce((n, f) => n + f.lines_removed, 0),
    },
  };
  if (budget.exhausted)
    result.note = `some patches were left out: the diff is capped at ${options.max_patch_chars ?? DEFAULT_DIFF_LIMITS.max_patch_chars} characters (filter by path to see them)`;
  return result;
}

/** The journal ops that turn tree `from` into tree `to` (folders included, empty ones too). */
export function opsBetween(objects: Objects, from: string | null, to: string, dir = '/', out: JournalOp[] = []): JournalOp[] {
  if (from === to) return out;
  const left = entries(objects, from);
  const right = entries(objects, to);
  for (const [name, x] of left) {
    const y = right.get(name);
    if (!y || y[1] !== x[1]) out.push({ op: 'delete', path: join(dir, name) });
  }
  for (const [name, y] of right) {
    const x = left.get(name);
    const path = join(dir, name);
    const same = x !== undefined && x[1] === y[1];
    if (y[1] === 'd') {
      if (!same) out.push({ op: 'mkdir', path });
      opsBetween(objects, same ? (x as TreeEntry)[2] : null, y[2], path, out);
    } else if (!same || (x as TreeEntry)[2] !== y[2]) {
      out.push({ op: 'write', path, data: objects.get('blob', y[2]) });
    }
  }
  return out;
}
