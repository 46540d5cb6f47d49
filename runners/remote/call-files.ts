import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { EnvTree } from './shipment.js';
import type { Tree } from './tree.js';

/** The files one remote call may be sent: its tools folder, its bundle, its environment (by sha256). */
export interface CallFiles {
  readonly tree: Tree;
  /** The tool's bundle, when it imports packages: its path here by sha256. */
  readonly bundle: { sha: string; path: string } | null;
  readonly env: EnvTree | null;
  /** Files being sent in chunks, read and checked against the listed hash once. */
  readonly blobs: Map<string, Buffer>;
}

/**
 * The engine's answer to a worker asking for a chunk of a file by sha256: only a file of this call,
 * and only the bytes its listing hashed (a file replaced since, by a link to a host file say, is not
 * sent, whatever it now holds). Base64 grows bytes by 4/3: a chunk stays well inside `maxPayload`.
 */
export function fileChunk(files: CallFiles, sha: string, offset: number, maxPayload: number): Record<string, unknown> {
  const path = files.tree.paths.get(sha) ?? (files.bundle?.sha === sha ? files.bundle.path : undefined) ?? files.env?.paths.get(sha);
  if (path === undefined) return { t: 'blob', error: 'no such file in this call' };
  let bytes = files.blobs.get(sha);
  if (bytes === undefined) {
    try {
      bytes = readFileSync(path);
    } catch (error) {
      return { t: 'blob', error: `the file is gone (${(error as Error).message})` };
    }
    if (createHash('sha256').update(bytes).digest('hex') !== sha)
      return { t: 'blob', error: 'the file changed since the call was sent; retry the call' };
    files.blobs.set(sha, bytes);
  }
  const chunk = Math.max(16_384, Math.floor((maxPayload * 0.7) / 4) * 3);
  const from = Number.isSafeInteger(offset) && offset >= 0 ? offset : 0;
  if (from + chunk >= bytes.length) files.blobs.delete(sha);
  return { t: 'blob', size: bytes.length, data: bytes.subarray(from, from + chunk).toString('base64') };
}
