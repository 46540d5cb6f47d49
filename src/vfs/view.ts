import type { ListOptions, VfsEntry, VfsStat, WriteOptions, WriteOutcome } from './vfs.js';

/**
 * Reading and writing a tree: the one interface of every face of the VFS. The live tree (`Vfs`), a
 * call's transaction over it (`Transaction`), a call's permission-checked view (`ToolVfs`, which the
 * runners' `ctx.vfs` service runs on) and the host's durable view (`HostVfs`, `engine.vfs`) all
 * implement it, so code that only reads and writes takes a `VfsView` and works on any of them. Paths
 * are checked by each implementation (anything may be passed: tool code calls these).
 */
export interface VfsView {
  exists(path: unknown): boolean;
  read(path: unknown): Buffer;
  stat(path: unknown): VfsStat;
  list(path: unknown, options?: ListOptions): { entries: VfsEntry[]; truncated: boolean };
  write(path: unknown, data: Buffer | string, options?: WriteOptions): WriteOutcome;
  mkdir(path: unknown, options?: { parents?: boolean }): { created: boolean; path: string };
  delete(path: unknown, options?: { recursive?: boolean }): { deleted: number; bytes: number };
  move(from: unknown, to: unknown, options?: { overwrite?: boolean }): { from: string; to: string; overwritten: boolean };
}
