import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PACK_LIMITS } from '../limits.js';
import { writeFileAtomic } from '../store/atomic.js';
import { gone, ownerRecord, removeStaleLock } from '../store/lock.js';
import { PackError } from './errors.js';

/** The lock file, at the project's root next to arium.json. */
export const LOCK_FILE = 'arium-lock.json';

/** Where a pack came from, so `arium packs` and `arium update` can read it again. */
export interface PackSource {
  kind: 'folder' | 'tarball' | 'git';
  /** An absolute path for a folder or tarball, the URL for git. */
  ref: string;
}

/** One installed pack, exactly as it was granted. */
export interface LockedPack {
  version: string;
  source: PackSource;
  /** sha256 over the canonical listing of its files (src/packs/hash.ts). */
  hash: string;
  /** Each file's sha256, so a mismatch at load can name what differs. */
  files: Record<string, string>;
  /** What the person granted: the pack's permissions and `secret.read:` of its secrets. */
  grants: string[];
  /** Of those, the ones arium.json did not hold before: taken back out on remove. */
  grants_added: string[];
  /** The tool ids the pack serves. */
  tools: string[];
  /** The skills (`skills/<name>/`) copied from the pack into the project's skills folder. */
  skills?: string[];
}

export interface PackLock {
  lockfileVersion: 1;
  packs: Record<string, LockedPack>;
}

export function readLock(projectDir: string): PackLock {
  const path = join(projectDir, LOCK_FILE);
  if (!existsSync(path)) return { lockfileVersion: 1, packs: {} };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new PackError(
      'MANIFEST',
      `${LOCK_FILE} is not valid JSON (${(error as Error).message}); restore it from version control, or remove it and add the packs again`,
    );
  }
  const lock = raw as Partial<PackLock>;
  if (lock?.lockfileVersion !== 1 || typeof lock.packs !== 'object' || lock.packs === null) {
    throw new PackError(
      'MANIFEST',
      `${LOCK_FILE} is not a pack lock of version 1 ({"lockfileVersion": 1, "packs": {…}}); restore it from version control`,
    );
  }
  // Keyed by pack name, which is user input: kept as a null-prototype record.
  return { lockfileVersion: 1, packs: Object.assign(Object.create(null) as Record<string, LockedPack>, lock.packs) };
}

export function writeLock(projectDir: string, lock: PackLock): void {
  const sorted = Object.fromEntries(Object.entries(lock.packs).sort(([a], [b]) => (a < b ? -1 : 1)));
  writeFileAtomic(join(projectDir, LOCK_FILE), `${JSON.stringify({ lockfileVersion: 1, packs: sorted }, null, 2)}\n`);
}

/**
 * Runs `fn` holding the project's pack mutex (`.arium/packs.mutex`, made with O_EXCL), so two `arium add`
 * at once take turns instead of each writing the lock file from what it read before the other wrote.
 * A mutex left by a process that died is taken over, under the same guard as the project lock's
 * (removeStaleLock): two waiters that both find it stale must not both end up holding it. A live
 * holder is waited for up to `waitMs`.
 */
export async function withPackMutex<T>(projectDir: string, fn: () => Promise<T>, waitMs: number = PACK_LIMITS.lock_wait_ms): Promise<T> {
  const dir = join(projectDir, '.arium');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, 'packs.mutex');
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, ownerRecord());
      closeSync(fd);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const seen = contentOf(path);
      // Released between the two looks: try again at once.
      if (seen === null) continue;
      const owner = holderOf(seen);
      if (gone(owner) || (owner.pid === undefined && unchangedFor(path) > OWNERLESS_STALE_MS)) {
        if (!removeStaleLock(path, seen)) await sleep(5);
        continue;
      }
      if (Date.now() > deadline) {
        const who =
          owner.pid === undefined
            ? 'a process that has not written its pid'
            : `pid ${owner.pid}${owner.host && owner.host !== hostname() ? ` on ${owner.host}` : ''}`;
        throw new PackError(
          'SOURCE',
          `another pack operation (${who}) has held ${path} for ${waitMs} ms; wait for it, or remove the file if that process is gone`,
        );
      }
      await sleep(25 + Math.random() * 50);
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(path, { force: true });
  }
}

/**
 * A mutex file that names no owner for this long (empty, or not an owner record) was left by a process
 * that died between creating it and writing its owner (one system call apart), or was damaged since.
 */
const OWNERLESS_STALE_MS = 10_000;

/** The mutex file's text, or null when it is gone. */
function contentOf(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

/** Its owner: an owner record, or the bare pid an older Arium wrote (a process of this host). */
function holderOf(text: string): { pid?: number; host?: string } {
  if (/^\d+$/.test(text.trim())) return { pid: Number(text.trim()), host: hostname() };
  try {
    const owner = JSON.parse(text) as { pid?: unknown; host?: unknown };
    return {
      ...(typeof owner.pid === 'number' ? { pid: owner.pid } : {}),
      ...(typeof owner.host === 'string' ? { host: owner.host } : {}),
    };
  } catch {
    return {};
  }
}

/** How long the file has gone unchanged (0 when it is gone). */
function unchangedFor(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}
