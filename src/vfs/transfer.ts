import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readdirSync, readSync, realpathSync, writeSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { ToolFailure } from '../errors.js';
import type { VfsState } from './state.js';

export interface TransferReport {
  files: number;
  dirs: number;
  bytes: number;
  /** Entries left out, each with the reason (links, devices, names the VFS cannot hold). */
  skipped: Array<{ path: string; reason: string }>;
}

type Progress = (done: number) => void;

function hostError(message: string, path: string): ToolFailure {
  return new ToolFailure('execution', 'INVALID_PATH', message, { details: { path } });
}

/** Reads a host file without following a link that replaced it after it was listed (O_NOFOLLOW). */
function readNoFollow(path: string): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const size = fstatSync(fd).size;
    const buffer = Buffer.alloc(size);
    let off = 0;
    while (off < size) {
      const n = readSync(fd, buffer, off, size - off, off);
      if (n === 0) break;
      off += n;
    }
    return off === size ? buffer : buffer.subarray(0, off);
  } finally {
    closeSync(fd);
  }
}

/**
 * Copies a host folder into the VFS as one transaction: all of it lands, or (quota exceeded, a bad
 * name) none of it. Symbolic links are never followed, inside the source or out of it; they are listed
 * in `skipped`, like sockets, devices and names the VFS refuses.
 */
export function importHost(state: VfsState, hostDir: string, vfsPath: string, onProgress?: Progress): TransferReport {
  const root = resolve(hostDir);
  let info: ReturnType<typeof lstatSync>;
  try {
    info = lstatSync(root);
  } catch {
    throw hostError(`Cannot import ${root}: it does not exist`, root);
  }
  if (info.isSymbolicLink()) throw hostError(`Cannot import ${root}: it is a symbolic link (give the real folder)`, root);
  if (!info.isDirectory()) throw hostError(`Cannot import ${root}: it is not a folder`, root);
  return state.change((txn) => {
    const base = txn.resolve(vfsPath);
    const report: TransferReport = { files: 0, dirs: 0, bytes: 0, skipped: [] };
    txn.mkdir(base, { parents: true });
    const walk = (hostPath: string, target: string): void => {
      for (const entry of readdirSync(hostPath, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
        const from = join(hostPath, entry.name);
        const shown = relative(root, from);
        let to: string;
        try {
          to = txn.resolve(`${target}/${entry.name}`);
          if (to !== `${target === '/' ? '' : target}/${entry.name}`) throw new Error('the name changes meaning in the VFS');
        } catch (error) {
          report.skipped.push({ path: shown, reason: `name not allowed in the VFS (${(error as Error).message})` });
          continue;
        }
        if (entry.isSymbolicLink()) {
          report.skipped.push({ path: shown, reason: 'symbolic link (never followed)' });
        } else if (entry.isDirectory()) {
          txn.mkdir(to, { parents: false });
          report.dirs++;
          walk(from, to);
        } else if (entry.isFile()) {
          let data: Buffer;
          try {
            data = readNoFollow(from);
          } catch (error) {
            report.skipped.push({ path: shown, reason: `unreadable (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})` });
            continue;
          }
          txn.write(to, data, { parents: false });
          report.files++;
          report.bytes += data.length;
          if (report.files % 500 === 0) onProgress?.(report.files);
        } else {
          report.skipped.push({ path: shown, reason: 'not a regular file or folder' });
        }
      }
    };
    walk(root, base);
    return report;
  });
}

/**
 * Copies a VFS folder (or file) to a host folder. Every host path is built from the real path of the
 * target and checked to stay inside it; files are created with O_NOFOLLOW and folders are checked not
 * to be links, so a link planted in the target cannot redirect a write elsewhere. An existing,
 * non-empty target is refused unless `overwrite`.
 */
export function exportHost(
  state: VfsState,
  vfsPath: string,
  hostDir: string,
  options: { overwrite?: boolean } = {},
  onProgress?: Progress,
): TransferReport {
  const source = state.vfs.resolve(vfsPath);
  const type = state.vfs.typeOf(source);
  if (type === null)
    throw new ToolFailure('execution', 'NOT_FOUND', `No such file or directory in the VFS: ${source}`, { details: { path: source } });
  mkdirSync(resolve(hostDir), { recursive: true });
  const root = realpathSync(resolve(hostDir));
  if (!options.overwrite && readdirSync(root).length > 0) {
    throw new ToolFailure('execution', 'ALREADY_EXISTS', `The target folder ${root} is not empty (pass { overwrite: true } to write into it)`, {
      details: { path: root, option: 'overwrite' },
    });
  }
  const report: TransferReport = { files: 0, dirs: 0, bytes: 0, skipped: [] };
  const inside = (path: string) => {
    const rel = relative(root, path);
    if (rel.startsWith('..') || rel.startsWith(sep)) throw hostError(`Refusing to write outside the target folder: ${path}`, path);
  };
  const ensureDir = (path: string) => {
    inside(path);
    try {
      const st = lstatSync(path);
      if (st.isSymbolicLink() || !st.isDirectory()) throw hostError(`Refusing to write through ${path}: it is not a plain folder`, path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      mkdirSync(path);
    }
  };
  const writeFile = (path: string, data: Buffer) => {
    inside(path);
    let fd: number;
    try {
      fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o644);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw hostError(`Refusing to write through ${path}: it is a symbolic link`, path);
      throw error;
    }
    try {
      let off = 0;
      while (off < data.length) off += writeSync(fd, data, off, data.length - off);
    } finally {
      closeSync(fd);
    }
    report.files++;
    report.bytes += data.length;
    if (report.files % 500 === 0) onProgress?.(report.files);
  };
  if (type === 'file') {
    writeFile(join(root, source.slice(source.lastIndexOf('/') + 1)), state.vfs.read(source));
    return report;
  }
  for (const entry of state.vfs.list(source, { recursive: true }).entries) {
    const target = join(root, ...entry.path.slice(source === '/' ? 1 : source.length + 1).split('/'));
    if (entry.type === 'directory') {
      ensureDir(target);
      report.dirs++;
    } else {
      writeFile(target, state.vfs.read(entry.path));
    }
  }
  return report;
}
