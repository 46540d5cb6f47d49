import { closeSync, existsSync, fstatSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import type { EngineEvent } from './events.js';
import { DEFAULT_AUDIT_ROTATION } from './limits.js';

export interface AuditRotation {
  /** The log is rotated before a line would take it past this many bytes. */
  max_bytes: number;
  /** Rotated files kept (`audit.jsonl.1` the newest); older ones are deleted. */
  files: number;
}

/** The name of rotated file `n` of the log at `path` (1 is the newest). */
export function rotatedPath(path: string, n: number): string {
  return `${path}.${n}`;
}

/**
 * Appends every event as one JSON line. Events already carry redacted, size-capped payloads, so the
 * log holds no more than subscribers see. Lines are gathered and written once per turn of the event
 * loop (one write for many events), and on `close`.
 *
 * Past `max_bytes` the log is rotated: what is gathered is written first, then `audit.jsonl` becomes
 * `audit.jsonl.1` (`.1` becomes `.2`, …, and the oldest past `files` is deleted) and a new
 * `audit.jsonl` is started. So every line lands whole, in one file, and a rotated file is complete
 * before its successor gets its first line (a reader following the log relies on that).
 */
export class AuditLog {
  readonly path: string;
  readonly #rotation: AuditRotation;
  #fd: number;
  /** Bytes in the file, written or gathered. */
  #bytes = 0;
  #pending: string[] = [];
  #scheduled: NodeJS.Immediate | null = null;
  #failed: Error | null = null;
  /** The last rotation that failed (the log then goes on growing in the same file). */
  #rotationError: Error | null = null;
  #closed = false;

  constructor(path: string, rotation: Partial<AuditRotation> = {}) {
    this.path = path;
    this.#rotation = { ...DEFAULT_AUDIT_ROTATION, ...rotation };
    mkdirSync(dirname(path), { recursive: true });
    this.#fd = this.#open();
  }

  get error(): Error | null {
    return this.#failed;
  }

  get rotationError(): Error | null {
    return this.#rotationError;
  }

  #open(): number {
    const fd = openSync(this.path, 'a', 0o600);
    this.#bytes = fstatSync(fd).size;
    return fd;
  }

  write(event: EngineEvent): void {
    if (this.#failed || this.#closed) return;
    const line = `${JSON.stringify(event)}\n`;
    const bytes = Buffer.byteLength(line);
    if (this.#bytes > 0 && this.#bytes + bytes > this.#rotation.max_bytes) this.#rotate();
    this.#pending.push(line);
    this.#bytes += bytes;
    this.#scheduled ??= setImmediate(() => this.#flush());
  }

  /** Writes what was gathered, in one write. */
  #flush(): void {
    if (this.#scheduled) clearImmediate(this.#scheduled);
    this.#scheduled = null;
    if (this.#pending.length === 0 || this.#failed) return;
    const data = Buffer.from(this.#pending.join(''));
    this.#pending = [];
    try {
      for (let off = 0; off < data.length; ) off += writeSync(this.#fd, data, off, data.length - off);
    } catch (error) {
      this.#failed = error as Error;
    }
  }

  #rotate(): void {
    this.#flush();
    const { files } = this.#rotation;
    try {
      rmSync(rotatedPath(this.path, files), { force: true });
      for (let n = files - 1; n >= 1; n--) {
        if (existsSync(rotatedPath(this.path, n))) renameSync(rotatedPath(this.path, n), rotatedPath(this.path, n + 1));
      }
      renameSync(this.path, rotatedPath(this.path, 1));
    } catch (error) {
      // Events are worth more than the size bound: keep appending to the file as it is.
      this.#rotationError = error as Error;
      return;
    }
    closeSync(this.#fd);
    try {
      this.#fd = this.#open();
    } catch (error) {
      this.#failed = error as Error;
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flush();
    this.#closed = true;
    try {
      closeSync(this.#fd);
    } catch {}
  }
}
