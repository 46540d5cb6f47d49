import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readlinkSync, readSync } from 'node:fs';
import { join, posix } from 'node:path';
import { executionFailure } from '../../../src/errors.js';
import type { ToolVfs } from '../../../src/tool-vfs.js';
import { diffFiles } from '../../../src/vfs/text-diff.js';
import type { Lease } from './mirror.js';
import type { ExecLimits } from './settings.js';

/**
 * What a program changed under its `cwd`, brought back into the call's VFS transaction (so it commits
 * only if the call succeeds). The overlay's upper folder holds exactly what changed: new and changed
 * files, folders, and whiteouts (character devices 0:0) for what was deleted. Everything in it is read
 * with lstat and opened with O_NOFOLLOW, never followed:
 *
 * - a regular file comes back if it is at most `file_bytes`, within `copy_back_bytes` for the call;
 *   a hard link is read as the file it is (links can only point inside the overlay: another mount is
 *   EXDEV), so it comes back as a copy;
 * - a symbolic link, FIFO, socket or device node is not brought back, and is listed in `skipped`;
 * - deletions: a whiteout deletes its path. A folder deleted and made again is "opaque" in the upper
 *   folder (an extended attribute Node cannot read), hiding everything the lower one held; when the
 *   upper folder holds a folder that also exists below, the merged tree is listed (`listMerged`) and
 *   whatever of the lower tree it no longer shows is deleted.
 */

type Kind = 'file' | 'directory' | 'other';

export interface Change {
  path: string;
  change: 'created' | 'modified' | 'deleted' | 'dir_created';
  size?: number;
  diff?: string | null;
  added?: number;
  removed?: number;
  diff_note?: string;
}

export interface Skipped {
  path: string;
  reason: string;
}

export interface CopyBack {
  changes: Change[];
  skipped: Skipped[];
  bytes: number;
}

interface UpperEntry {
  path: string;
  host: string;
  kind: Kind | 'whiteout';
}

/** Patch text all the diffs of one result may hold together; later ones are omitted with a note. */
const DIFF_BUDGET_CHARS = 256 * 1024;

function walkUpper(upper: string, cwd: string, skipped: Skipped[], most: number): UpperEntry[] {
  const found: UpperEntry[] = [];
  const walk = (host: string, path: string) => {
    for (const name of readdirSync(host).sort()) {
      if (found.length >= most) {
        throw executionFailure(
          'OUTPUT_LIMIT',
          `system.exec: the program left more than ${most} files, folders and deletions under ${cwd}; nothing was brought back (raise exec.limits.copy_back_entries in arium.json)`,
          { details: { limit_entries: most } },
        );
      }
      const childHost = join(host, name);
      const childPath = path === '/' ? `/${name}` : `${path}/${name}`;
      const stat = lstatSync(childHost);
      if (stat.isDirectory()) {
        found.push({ path: childPath, host: childHost, kind: 'directory' });
        walk(childHost, childPath);
      } else if (stat.isFile()) {
        found.push({ path: childPath, host: childHost, kind: 'file' });
      } else if (stat.isCharacterDevice() && stat.rdev === 0) {
        found.push({ path: childPath, host: childHost, kind: 'whiteout' });
      } else {
        found.push({ path: childPath, host: childHost, kind: 'other' });
        const what = stat.isSymbolicLink()
          ? `a symbolic link (to ${readlinkSync(childHost)}): links are not brought back`
          : stat.isFIFO()
            ? 'a FIFO: only files and folders are brought back'
            : stat.isSocket()
              ? 'a socket: only files and folders are brought back'
              : 'a device node: only files and folders are brought back';
        skipped.push({ path: childPath, reason: what });
      }
    }
  };
  walk(upper, cwd);
  return found;
}

/** Reads a regular file of the upper folder without following a link, or null (with a reason) when it may not come back. */
function readUpperFile(host: string, limit: number): Buffer | string {
  const fd = openSync(host, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return 'not a regular file';
    if (stat.size > limit) return `${stat.size} bytes, larger than the ${limit} bytes a file may bring back (exec.limits.file_bytes)`;
    const data = Buffer.alloc(stat.size);
    let have = 0;
    while (have < data.length) {
      const n = readSync(fd, data, have, data.length - have, have);
      if (n === 0) break;
      have += n;
    }
    return have === data.length ? data : data.subarray(0, have);
  } finally {
    closeSync(fd);
  }
}

export async function copyBack(
  vfs: ToolVfs,
  cwd: string,
  upper: string,
  lease: Lease,
  limits: ExecLimits,
  wantDiff: boolean,
  listMerged: () => Promise<Map<string, string>>,
): Promise<CopyBack> {
  const skipped: Skipped[] = [];
  const entries = walkUpper(upper, cwd, skipped, limits.copy_back_entries);
  const lowerKind = (path: string): Kind | null => {
    const entry = lease.entries.get(path);
    return entry ? entry.type : null;
  };
  const below = (path: string) => cwd === '/' || path.startsWith(`${cwd}/`);

  const deleted = new Set<string>();
  const maybeOpaque = entries.some((e) => e.kind === 'directory' && lowerKind(e.path) === 'directory');
  if (maybeOpaque) {
    const merged = await listMerged();
    for (const [path, entry] of lease.entries) {
      if (!below(path) || path === cwd) continue;
      const now = merged.get(path);
      if (now === undefined || (now === 'd') !== (entry.type === 'directory') || (now !== 'd' && now !== 'f')) deleted.add(path);
    }
  } else {
    for (const e of entries) {
      const was = lowerKind(e.path);
      if (was === null) continue;
      if (e.kind === 'whiteout' || e.kind === 'other' || e.kind !== was) deleted.add(e.path);
    }
  }

  const changes: Change[] = [];
  // Parents first; what lies under a deleted folder goes with it.
  const gone: string[] = [];
  for (const path of [...deleted].sort()) {
    if (gone.some((g) => path.startsWith(`${g}/`))) continue;
    gone.push(path);
    if (vfs.exists(path)) vfs.delete(path, { recursive: true });
    changes.push({ path, change: 'deleted' });
  }

  let bytes = 0;
  let diffChars = 0;
  for (const e of entries) {
    if (e.kind === 'directory') {
      if (lowerKind(e.path) === 'directory' && !deleted.has(e.path)) continue;
      vfs.mkdir(e.path, { parents: true });
      changes.push({ path: e.path, change: 'dir_created' });
      continue;
    }
    if (e.kind !== 'file') continue;
    const data = readUpperFile(e.host, limits.file_bytes);
    if (typeof data === 'string') {
      skipped.push({ path: e.path, reason: data });
      continue;
    }
    const before = lease.entries.get(e.path);
    const previous = before?.type === 'file' && !deleted.has(e.path) ? before.data : null;
    if (previous?.equals(data)) continue;
    bytes += data.length;
    if (bytes > limits.copy_back_bytes) {
      throw executionFailure(
        'OUTPUT_LIMIT',
        `system.exec: the program wrote more than ${limits.copy_back_bytes} bytes of files under ${cwd}; nothing was brought back (raise exec.limits.copy_back_bytes in arium.json)`,
        { details: { limit_bytes: limits.copy_back_bytes, path: e.path } },
      );
    }
    vfs.write(e.path, data, { parents: true });
    const change: Change = { path: e.path, change: previous ? 'modified' : 'created', size: data.length };
    if (wantDiff) addDiff(vfs, change, previous, data, diffChars);
    diffChars += change.diff?.length ?? 0;
    changes.push(change);
  }
  return { changes, skipped, bytes };
}

function addDiff(vfs: ToolVfs, change: Change, before: Buffer | null, after: Buffer, used: number): void {
  // As fs.write: the diff shows the old content, so only a caller who may read the file sees it.
  if (!vfs.callerMay('vfs.read', change.path)) {
    Object.assign(change, { diff: null, diff_note: 'diff omitted: no vfs.read permission for this path' });
    return;
  }
  if (used >= DIFF_BUDGET_CHARS) {
    Object.assign(change, { diff: null, diff_note: `diff omitted: the diffs of this result passed ${DIFF_BUDGET_CHARS} characters` });
    return;
  }
  const diff = diffFiles(change.path, before, after);
  Object.assign(change, { diff: diff.patch, added: diff.added, removed: diff.removed });
  if (diff.omitted) change.diff_note = `diff omitted: ${diff.omitted}`;
}

/** Paths of `find -printf '%y %P\0'` output under `cwd`, with their type letter. */
export function parseListing(output: string, cwd: string): Map<string, string> {
  const map = new Map<string, string>();
  for (const record of output.split('\0')) {
    if (record.length < 3) continue;
    map.set(posix.join(cwd, record.slice(2)), record.slice(0, 1));
  }
  return map;
}
