import type { JournalOp } from '../store/journal.js';
import { completeDiff, type FileChange, type TreeDiff, type TreeDiffOptions } from './tree-diff.js';
import type { Vfs } from './vfs.js';

/** One file a committed call changed: its bytes before and after (null: absent, or not kept). */
interface ChangedFile {
  path: string;
  before: Buffer | null;
  after: Buffer | null;
  size_before: number;
  size_after: number;
  existed: boolean;
  exists: boolean;
  /** Why the contents were not kept (too large for the log), when they were not. */
  dropped?: string;
}

export interface ChangeLogLimits {
  /** Bytes of file contents kept over all recorded calls; the oldest calls are forgotten first. */
  bytes: number;
  /** A file larger than this is listed with its sizes but no contents (no patch). */
  file_bytes: number;
}

export const DEFAULT_CHANGE_LOG: Readonly<ChangeLogLimits> = Object.freeze({ bytes: 32 * 1024 * 1024, file_bytes: 1024 * 1024 });

/**
 * What each recent committed call did to the files, kept in memory so that a person looking at a call
 * (the inspector) can open its diff. The live tree keeps no history between snapshots, so the bytes a
 * call replaced are copied at its commit, before they go; only when someone asked for the log
 * (`changeLog` in the engine options), and within a byte bound.
 */
export class ChangeLog {
  readonly limits: ChangeLogLimits;
  readonly #calls = new Map<string, { files: ChangedFile[]; bytes: number }>();
  #bytes = 0;

  constructor(limits: Partial<ChangeLogLimits> = {}) {
    this.limits = { ...DEFAULT_CHANGE_LOG, ...limits };
  }

  /** The files `ops` can touch, each with what it holds now; `finish` completes the record once they are applied. */
  begin(vfs: Vfs, ops: readonly JournalOp[]): { finish(runId: string): void } {
    const paths = new Set<string>();
    /** The files at or under `path` now. */
    const under = (path: string): string[] => {
      const type = vfs.typeOf(path);
      if (type === 'file') return [path];
      if (type !== 'directory') return [];
      return vfs
        .list(path, { recursive: true })
        .entries.filter((e) => e.type === 'file')
        .map((e) => e.path);
    };
    for (const op of ops) {
      if (op.op === 'write') paths.add(op.path);
      else if (op.op === 'delete') for (const path of under(op.path)) paths.add(path);
      else if (op.op === 'move') {
        // What is moved, where it lands, and what it replaces there.
        for (const path of under(op.from)) {
          paths.add(path);
          paths.add(op.to + path.slice(op.from.length));
        }
        for (const path of under(op.to)) paths.add(path);
      }
    }
    // Budget for one call: a restore of a whole tree must not push every other call out of the log.
    let budget = Math.floor(this.limits.bytes / 4);
    const take = (path: string): { bytes: Buffer | null; size: number; exists: boolean; dropped?: string } => {
      if (vfs.typeOf(path) !== 'file') return { bytes: null, size: 0, exists: false };
      const held = vfs.peek(path);
      const size = held.length;
      if (size > this.limits.file_bytes) return { bytes: null, size, exists: true, dropped: `larger than ${this.limits.file_bytes} bytes` };
      if (size > budget) return { bytes: null, size, exists: true, dropped: 'the call changed more than the change log keeps' };
      budget -= size;
      // A copy: the live tree's buffer is the file's own and may be reused by a later change.
      return { bytes: Buffer.from(held), size, exists: true };
    };
    const before = new Map([...paths].map((path) => [path, take(path)]));
    return {
      finish: (runId) => {
        const files: ChangedFile[] = [];
        let bytes = 0;
        for (const [path, old] of before) {
          const now = take(path);
          if (old.exists === now.exists && old.bytes !== null && now.bytes !== null && old.bytes.equals(now.bytes)) continue;
          if (!old.exists && !now.exists) continue;
          const dropped = old.dropped ?? now.dropped;
          files.push({
            path,
            before: dropped ? null : old.bytes,
            after: dropped ? null : now.bytes,
            size_before: old.size,
            size_after: now.size,
            existed: old.exists,
            exists: now.exists,
            ...(dropped ? { dropped } : {}),
          });
          bytes += (old.bytes?.length ?? 0) + (now.bytes?.length ?? 0);
        }
        if (files.length === 0) return;
        this.#calls.set(runId, { files, bytes });
        this.#bytes += bytes;
        for (const [id, call] of this.#calls) {
          if (this.#bytes <= this.limits.bytes) break;
          this.#calls.delete(id);
          this.#bytes -= call.bytes;
        }
      },
    };
  }

  /** Whether the log still holds a call's changes. */
  has(runId: string): boolean {
    return this.#calls.has(runId);
  }

  /** The diff of one recorded call (files renamed as the call moved them are reported as renames), or null when it is not kept. */
  diff(runId: string, options: Pick<TreeDiffOptions, 'patches' | 'max_patch_chars' | 'filter' | 'visible'> = {}): TreeDiff | null {
    const call = this.#calls.get(runId);
    if (!call) return null;
    const visible = options.visible;
    const shown = visible ? call.files.filter((f) => visible(f.path)) : call.files;
    const deleted = shown.filter((f) => f.existed && !f.exists && f.before !== null);
    const renamedFrom = new Set<ChangedFile>();
    const files: FileChange[] = [];
    const byPath = new Map<string, ChangedFile>();
    for (const f of shown) {
      byPath.set(f.path, f);
      if (!f.existed && f.exists && f.after !== null) {
        const source = deleted.find((d) => !renamedFrom.has(d) && (d.before as Buffer).equals(f.after as Buffer));
        if (source) {
          renamedFrom.add(source);
          files.push(change(f, 'renamed', source.path));
          continue;
        }
      }
      files.push(change(f, !f.existed ? 'added' : !f.exists ? 'deleted' : 'modified'));
    }
    const renamed = new Set([...renamedFrom].map((f) => f.path));
    const filter = options.filter;
    const kept = files
      .filter((f) => f.status !== 'deleted' || !renamed.has(f.path))
      .filter((f) => !filter || filter(f.path) || (f.from !== undefined && filter(f.from)))
      .sort((x, y) => (x.path < y.path ? -1 : 1));
    return completeDiff(
      kept,
      (f) => {
        const recorded = byPath.get(f.path) as ChangedFile;
        return recorded.dropped ? null : { before: recorded.before, after: recorded.after };
      },
      options,
    );
  }
}

function change(f: ChangedFile, status: FileChange['status'], from?: string): FileChange {
  return {
    path: f.path,
    status,
    ...(from !== undefined ? { from } : {}),
    size_before: status === 'renamed' ? f.size_after : f.size_before,
    size_after: f.size_after,
    binary: false,
    lines_added: 0,
    lines_removed: 0,
    patch: null,
    ...(f.dropped ? { note: `contents not kept: ${f.dropped}` } : {}),
  };
}
