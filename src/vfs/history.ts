import { ToolFailure } from '../errors.js';
import { globToRegExp } from '../permissions.js';
import { CorruptObjectError } from '../store/objects.js';
import type { ToolVfs } from '../tool-vfs.js';
import { collectGarbage, type GcReport } from './gc.js';
import type { SnapshotInfo, VfsState } from './state.js';
import { scrubCutPatches } from './text-diff.js';
import type { Transaction } from './transaction.js';
import { diffTrees, opsBetween, type TreeDiff } from './tree-diff.js';
import { decodeTree } from './tree-index.js';
import type { ListOptions, VfsEntry, VfsStat, WriteOptions, WriteOutcome } from './vfs.js';
import type { VfsView } from './view.js';

/** `live` or a snapshot reference (id, unique id prefix, label, `latest`). */
export type TreeRef = string;

export interface DiffOptions {
  /** Only files matching this glob (`**`, `*`, `?`), e.g. `/src/**`. */
  path?: string;
  /** Only this one file (its exact path, or the old path of a rename), whatever characters it holds. */
  file?: string;
  /** Leave out the unified patches (file list and counts only). */
  stat_only?: boolean;
  max_patch_chars?: number;
  /**
   * Only files the reader may see (a surface's `vfs.read` grants): the others are left out before
   * renames are found, so a file moved in from a path it may not see is shown as added.
   */
  visible?: (path: string) => boolean;
}

export interface DiffResult extends TreeDiff {
  from: { ref: string; snapshot: SnapshotInfo | null };
  to: { ref: string; snapshot: SnapshotInfo | null };
}

export interface RestoreResult {
  restored: SnapshotInfo;
  /** The snapshot taken of the live tree before restoring (restore it to undo), or null when the live tree already equalled a snapshot. */
  backup: SnapshotInfo | null;
  written: number;
  deleted: number;
}

function rootOf(state: VfsState, ref: TreeRef): { root: string; snapshot: SnapshotInfo | null } {
  if (ref === 'live') return { root: state.liveRoot(), snapshot: null };
  const snapshot = state.resolveSnapshot(ref);
  return { root: snapshot.root, snapshot };
}

/**
 * Runs a read of stored trees and blobs; an object that is missing or damaged on disk becomes
 * CORRUPT_STATE naming it and what needed it, instead of an internal error.
 */
function reading<T>(what: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (!(error instanceof CorruptObjectError)) throw error;
    throw new ToolFailure(
      'execution',
      'CORRUPT_STATE',
      `${what} cannot be read: ${error.message}. Nothing was changed; other snapshots are unaffected (start the engine with recover to load what is intact, or restore the state folder from a backup)`,
      { details: { object: error.hash }, cause: error },
    );
  }
}

/** The files a diff keeps: all, those its `path` glob matches, or its one `file`. */
export function diffFilter(options: Pick<DiffOptions, 'path' | 'file'>): ((path: string) => boolean) | undefined {
  if (options.file !== undefined && options.path !== undefined) {
    throw new ToolFailure('validation', 'INVALID_INPUT', 'Give a diff either a path glob or one file, not both');
  }
  if (options.file !== undefined) {
    const file = options.file;
    return (p) => p === file;
  }
  return options.path === undefined ? undefined : pathFilter(options.path);
}

/** The files a diff's `path` glob keeps. */
export function pathFilter(glob: string): (path: string) => boolean {
  if (!glob.startsWith('/')) {
    throw new ToolFailure('validation', 'INVALID_INPUT', `The path filter must be an absolute VFS glob such as /src/** (got "${glob}")`);
  }
  const re = globToRegExp(glob);
  return (p) => re.test(p);
}

/** Compares two trees, each `live` or a snapshot. By default: the newest snapshot against the live tree. */
export function diff(state: VfsState, from: TreeRef | undefined, to: TreeRef | undefined, options: DiffOptions = {}): DiffResult {
  const fromRef = from ?? (state.snapshots.length > 0 ? 'latest' : 'empty');
  const toRef = to ?? 'live';
  const a = fromRef === 'empty' ? { root: null, snapshot: null } : rootOf(state, fromRef);
  const b = rootOf(state, toRef);
  const filter = diffFilter(options);
  const result = reading(`The diff of ${fromRef} and ${toRef}`, () =>
    diffTrees(state.objects, a.root, b.root, {
      ...(filter ? { filter } : {}),
      ...(options.visible ? { visible: options.visible } : {}),
      patches: options.stat_only !== true,
      ...(options.max_patch_chars ? { max_patch_chars: options.max_patch_chars } : {}),
    }),
  );
  return scrubCutPatches({ from: { ref: fromRef, snapshot: a.snapshot }, to: { ref: toRef, snapshot: b.snapshot }, ...result }, state.scrubHead);
}

/** What a tree can be asked by someone looking at it: the live tree, or a snapshot's (`TreeView`). */
export interface TreeReader {
  list(path: unknown): { entries: VfsEntry[]; truncated: boolean };
  read(path: unknown): Buffer;
}

/**
 * A snapshot's tree, read from its stored objects (nothing is materialized): one folder's entries, or
 * one file, with the live tree's errors for a path that is missing or of the other type.
 */
export class TreeView implements TreeReader {
  readonly snapshot: SnapshotInfo;
  readonly #state: VfsState;

  constructor(state: VfsState, ref: TreeRef) {
    this.#state = state;
    this.snapshot = state.resolveSnapshot(ref);
  }

  /** The tree entry at `path`; the root is a folder with no entry of its own. */
  #entry(path: string): { type: 'd' | 'f'; hash: string; size: number } {
    let current: { type: 'd' | 'f'; hash: string; size: number } = { type: 'd', hash: this.snapshot.root, size: 0 };
    let walked = '';
    for (const name of path.split('/').filter(Boolean)) {
      if (current.type !== 'd') throw notThere('NOT_A_DIRECTORY', `Not a directory: ${walked} (in snapshot ${this.snapshot.id})`, path);
      walked += `/${name}`;
      const found = decodeTree(this.#state.objects.get('tree', current.hash)).find((e) => e[0] === name);
      if (!found) throw notThere('NOT_FOUND', `No such file or directory: ${path} (in snapshot ${this.snapshot.id})`, path);
      current = { type: found[1] === 'd' ? 'd' : 'f', hash: found[2], size: found[3] };
    }
    return current;
  }

  list(rawPath: unknown): { entries: VfsEntry[]; truncated: boolean } {
    const path = this.#state.vfs.resolve(rawPath);
    return reading(`Snapshot ${this.snapshot.id}`, () => {
      const dir = this.#entry(path);
      if (dir.type !== 'd') throw notThere('NOT_A_DIRECTORY', `Not a directory: ${path} (in snapshot ${this.snapshot.id})`, path);
      const entries = decodeTree(this.#state.objects.get('tree', dir.hash)).map(([name, kind, , size]): VfsEntry => {
        const type = kind === 'd' ? 'directory' : 'file';
        return { path: path === '/' ? `/${name}` : `${path}/${name}`, name, type, size: type === 'file' ? size : 0 };
      });
      return { entries, truncated: false };
    });
  }

  read(rawPath: unknown): Buffer {
    const path = this.#state.vfs.resolve(rawPath);
    return reading(`Snapshot ${this.snapshot.id}`, () => {
      const file = this.#entry(path);
      if (file.type !== 'f') throw notThere('IS_A_DIRECTORY', `Is a directory, not a file: ${path} (in snapshot ${this.snapshot.id})`, path);
      return this.#state.objects.get('blob', file.hash);
    });
  }
}

function notThere(code: 'NOT_FOUND' | 'NOT_A_DIRECTORY' | 'IS_A_DIRECTORY', message: string, path: string): ToolFailure {
  return new ToolFailure('execution', code, message, { details: { path } });
}

/**
 * Brings the live tree back to a snapshot, as one atomic, durable change (a call's, when `call` is given:
 * then it lands only if the call succeeds). The live tree is first saved
 * as a snapshot of its own (unless it already equals one), so a restore can itself be undone and
 * uncommitted work is never lost.
 */
export function restore(state: VfsState, ref: TreeRef, call?: ToolVfs): RestoreResult {
  state.assertWritable('The restore');
  const target = state.resolveSnapshot(ref);
  const live = state.liveRoot();
  // Read the whole change first: a snapshot with a damaged object fails here, before any backup is taken.
  const ops = reading(`Snapshot ${target.id}`, () => opsBetween(state.objects, live, target.root));
  const known = [...state.snapshots].reverse().find((s) => s.root === live);
  const backup = known ? null : state.snapshot({ label: 'before-restore', message: `live tree before restoring ${target.id}` });
  // In a call, the change is the call's own: committed with it, or not at all.
  if (call) call.replaceTree(ops, state.changes);
  else state.applyRoot(target.root, () => ops);
  return {
    restored: target,
    backup,
    written: ops.filter((o) => o.op === 'write').length,
    deleted: ops.filter((o) => o.op === 'delete').length,
  };
}

/** Deletes objects that neither the live tree nor any snapshot needs. */
export function gc(state: VfsState, onProgress?: (phase: 'mark' | 'sweep', count: number) => void): GcReport {
  const roots = new Set(state.snapshots.map((s) => s.root));
  roots.add(state.checkpoint());
  // Marking reads every tree first; nothing is deleted unless all of them read whole.
  return reading('Garbage collection', () => collectGarbage(state.objects, roots, onProgress));
}

/**
 * The VFS as the host application sees it (`engine.vfs`): no permission checks (the host is trusted),
 * but every change is a committed, durable transaction of its own, like a tool call's.
 */
export class HostVfs implements VfsView {
  readonly #state: VfsState;

  constructor(state: VfsState) {
    this.#state = state;
  }

  #change<T>(apply: (txn: Transaction) => T): T {
    return this.#state.change(apply);
  }

  resolve(path: unknown): string {
    return this.#state.vfs.resolve(path);
  }

  usage(): { bytes: number; files: number; dirs: number } {
    return this.#state.vfs.usage();
  }

  read(path: unknown): Buffer {
    return this.#state.vfs.read(path);
  }

  exists(path: unknown): boolean {
    return this.#state.vfs.exists(path);
  }

  stat(path: unknown): VfsStat {
    return this.#state.vfs.stat(path);
  }

  list(path: unknown, options?: ListOptions): { entries: VfsEntry[]; truncated: boolean } {
    return this.#state.vfs.list(path, options);
  }

  write(path: unknown, data: Buffer | string, options?: WriteOptions): WriteOutcome {
    // The VFS keeps the buffer it is given: the host's own could change after this returns.
    const owned = typeof data === 'string' ? data : Buffer.from(data);
    return this.#change((txn) => txn.write(path, owned, options));
  }

  mkdir(path: unknown, options?: { parents?: boolean }): { created: boolean; path: string } {
    return this.#change((txn) => txn.mkdir(path, options));
  }

  delete(path: unknown, options?: { recursive?: boolean }): { deleted: number; bytes: number } {
    return this.#change((txn) => txn.delete(path, options));
  }

  move(from: unknown, to: unknown, options?: { overwrite?: boolean }): { from: string; to: string; overwritten: boolean } {
    return this.#change((txn) => txn.move(from, to, options));
  }
}
