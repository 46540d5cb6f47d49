import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';

/** Another live engine holds the project. */
export class ProjectLockedError extends Error {
  override readonly name = 'ProjectLockedError';
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * One engine at a time per project state folder. The lock file is created exclusively and holds the
 * owner's pid and host; a lock left by a process that no longer runs on this host is taken over.
 */
export class ProjectLock {
  readonly path: string;
  #held = false;

  constructor(path: string) {
    this.path = path;
  }

  acquire(): void {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(this.path, 'wx', 0o600);
        writeSync(fd, JSON.stringify({ pid: process.pid, host: hostname(), at: new Date().toISOString() }));
        closeSync(fd);
        this.#held = true;
        return;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      let owner: { pid?: number; host?: string } = {};
      try {
        owner = JSON.parse(readFileSync(this.path, 'utf8'));
      } catch {
        // An unreadable or half-written lock file: treat it as stale only if it stays so.
      }
      if (typeof owner.pid === 'number' && owner.host === hostname() && !alive(owner.pid)) {
        rmSync(this.path, { force: true });
        continue;
      }
      if (typeof owner.pid === 'number') {
        throw new ProjectLockedError(
          `Another Arium engine (pid ${owner.pid} on ${owner.host}) holds this project's state (${this.path}); close it first, or remove the lock file if that process is gone`,
        );
      }
      throw new ProjectLockedError(`The lock file ${this.path} is unreadable; remove it if no other engine uses this project`);
    }
  }

  release(): void {
    if (!this.#held) return;
    this.#held = false;
    rmSync(this.path, { force: true });
  }
}
