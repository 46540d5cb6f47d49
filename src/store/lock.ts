import { closeSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';

/** Another live engine holds the project. */
export class ProjectLockedError extends Error {
  override readonly name = 'ProjectLockedError';
  constructor(
    message: string,
    /** The pid of the engine that holds the project, when the lock file names it. */
    readonly holder: number | null = null,
  ) {
    super(message);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether a lock or guard file's owner is a process of this host that no longer runs. */
export function gone(owner: { pid?: unknown; host?: unknown }): boolean {
  return typeof owner.pid === 'number' && owner.host === hostname() && !alive(owner.pid);
}

/** Whether the guard names its owner and that process is gone (an empty guard is being written: not gone). */
function guardOwnerGone(guard: string): boolean {
  try {
    return gone(JSON.parse(readFileSync(guard, 'utf8')));
  } catch {
    return false;
  }
}

/** The pid of the engine that holds the lock at `path`, or null when there is none or it says no pid. */
export function lockHolder(path: string): number | null {
  try {
    const owner = JSON.parse(readFileSync(path, 'utf8')) as { pid?: unknown };
    return typeof owner.pid === 'number' ? owner.pid : null;
  } catch {
    return null;
  }
}

/** What a lock or guard file holds: its owner (the time makes each record unique, even when a pid is reused). */
export const ownerRecord = (): string => JSON.stringify({ pid: process.pid, host: hostname(), at: new Date().toISOString() });

function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * A takeover guard older than this was left by a process that died while taking a lock over. A guard
 * whose owner (written in it) no longer runs on this host is stale at once: an engine killed in the
 * middle of a takeover otherwise kept every start failing for this long.
 */
const GUARD_STALE_MS = 10_000;
const ATTEMPTS = 100;

/**
 * One engine at a time per project state folder. The lock file is created exclusively and holds the
 * owner's pid and host; a lock left by a process that no longer runs on this host is taken over.
 *
 * Taking over is guarded: two engines starting at once may both find the same stale lock, and if each
 * simply removed it, the second could remove the lock the first had just made and both would run. So
 * a stale lock is removed only under `lock.takeover` (created exclusively), and only if it still holds
 * exactly what was judged stale.
 */
export class ProjectLock {
  readonly path: string;
  #held = false;

  constructor(path: string) {
    this.path = path;
  }

  acquire(): void {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      try {
        const fd = openSync(this.path, 'wx', 0o600);
        writeSync(fd, ownerRecord());
        closeSync(fd);
        this.#held = true;
        return;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      let raw: string | null = null;
      let owner: { pid?: number; host?: string } = {};
      try {
        raw = readFileSync(this.path, 'utf8');
        owner = JSON.parse(raw);
      } catch {
        // Gone meanwhile (try again), half-written by an engine starting right now, or damaged.
      }
      if (raw === null) continue;
      if (gone(owner)) {
        if (!this.takeOver(raw)) pause(5);
        continue;
      }
      if (typeof owner.pid === 'number') {
        throw new ProjectLockedError(
          `Another Arium engine (pid ${owner.pid} on ${owner.host}) holds this project's state (${this.path}); close it first, or remove the lock file if that process is gone`,
          owner.pid,
        );
      }
      // An engine that has just created the file may not have written it yet: look again shortly.
      if (attempt < 3) {
        pause(5);
        continue;
      }
      throw new ProjectLockedError(`The lock file ${this.path} is unreadable; remove it if no other engine uses this project`);
    }
    throw new ProjectLockedError(`Could not take the lock ${this.path}: other engines kept taking it at the same time; try again`);
  }

  /**
   * Removes the lock file if it still holds exactly `seen` (judged stale), under the takeover guard.
   * Returns false when another engine is taking it over right now (the caller looks again).
   */
  takeOver(seen: string): boolean {
    return removeStaleLock(this.path, seen);
  }

  release(): void {
    if (!this.#held) return;
    this.#held = false;
    rmSync(this.path, { force: true });
  }
}

/**
 * Removes the lock file at `path` if it still holds exactly `seen`, which the caller judged stale, under
 * the takeover guard `<path>.takeover` (created exclusively). Two processes may find the same stale
 * lock at once; if each simply removed it, the second could remove the lock the first had just made,
 * and both would hold it. Returns false when another process is taking it over right now (look again
 * shortly); true when the stale lock is gone or was replaced meanwhile.
 */
export function removeStaleLock(path: string, seen: string): boolean {
  const guard = `${path}.takeover`;
  let fd: number;
  try {
    fd = openSync(guard, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    try {
      if (Date.now() - statSync(guard).mtimeMs > GUARD_STALE_MS || guardOwnerGone(guard)) rmSync(guard, { force: true });
    } catch {}
    return false;
  }
  try {
    writeSync(fd, ownerRecord());
    let now: string | null = null;
    try {
      now = readFileSync(path, 'utf8');
    } catch {}
    if (now === seen) rmSync(path, { force: true });
  } finally {
    closeSync(fd);
    rmSync(guard, { force: true });
  }
  return true;
}
