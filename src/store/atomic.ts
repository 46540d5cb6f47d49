import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync, writevSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/**
 * Replaces `path` with `data` so that a reader (or a restart after SIGKILL or power loss) sees either
 * the old file or the new one, never a mix: write a temporary file in the same folder, fsync it,
 * rename it over the target, then fsync the folder so the rename itself is durable.
 */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  const tmp = join(dirname(path), `.tmp-${basename(path)}-${randomBytes(6).toString('hex')}`);
  writeSynced(tmp, typeof data === 'string' ? Buffer.from(data) : data);
  renameSync(tmp, path);
  fsyncDir(dirname(path));
}

/** Creates `tmp` holding all of `bytes`, fsynced; on failure removes it and rethrows. */
export function writeSynced(tmp: string, bytes: Uint8Array): void {
  const fd = openSync(tmp, 'w', 0o600);
  try {
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } catch (error) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw error;
  }
  closeSync(fd);
}

export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Writes every buffer, in order, going on after a partial write. */
export function writeAll(fd: number, buffers: Buffer[]): void {
  let pending = buffers.filter((b) => b.length > 0);
  while (pending.length > 0) {
    // At most IOV_MAX (1024 on Linux) buffers per call.
    let written = writevSync(fd, pending.slice(0, 1024));
    while (written > 0 && pending.length > 0) {
      const first = pending[0] as Buffer;
      if (written >= first.length) {
        written -= first.length;
        pending.shift();
      } else {
        pending[0] = first.subarray(written);
        written = 0;
      }
    }
    pending = pending.filter((b) => b.length > 0);
  }
}
