import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, posix, resolve } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { PACK_LIMITS } from '../limits.js';
import { PackError } from './errors.js';
import { listPack } from './hash.js';
import type { PackSource } from './lock.js';

/** Where a source is unpacked before it is checked: inside the project, so the final move is a rename. */
export function stagingRoot(projectDir: string): string {
  return join(projectDir, '.arium', 'packs-staging');
}

/** How `arium add` reads its argument: a git URL, a tarball, or a folder. */
export function parseSource(text: string, cwd: string): PackSource {
  if (/^git\+/.test(text) || /^(file|https?|ssh|git):\/\//.test(text) || /\.git(#.*)?$/.test(text)) {
    return { kind: 'git', ref: text.replace(/^git\+/, '') };
  }
  const path = resolve(cwd, text);
  if (!existsSync(path)) throw new PackError('SOURCE', `${text} was not found: give a pack folder, a tarball (.tgz, .tar.gz, .tar) or a git URL`);
  return { kind: statSync(path).isDirectory() ? 'folder' : 'tarball', ref: path };
}

/**
 * Brings the pack at `source` into a new folder under `stagingRoot(projectDir)` and returns it; the
 * caller removes it. Every kind ends in the same check (`listPack`): folders and regular files only,
 * within PACK_LIMITS.
 */
export async function stageSource(source: PackSource, projectDir: string): Promise<string> {
  const root = stagingRoot(projectDir);
  mkdirSync(root, { recursive: true });
  const stage = await mkdtemp(join(root, 'pack-'));
  try {
    if (source.kind === 'folder') await copyFolder(source.ref, stage);
    else if (source.kind === 'tarball') await unpackTarball(source.ref, stage);
    else await cloneGit(source.ref, stage);
    await listPack(stage);
    return stage;
  } catch (error) {
    await rm(stage, { recursive: true, force: true });
    throw error;
  }
}

async function copyFolder(from: string, to: string): Promise<void> {
  // listPack refuses links and bounds the size before anything is copied.
  const { files } = await listPack(from);
  for (const path of files.keys()) {
    const target = join(to, ...path.split('/'));
    await mkdir(dirname(target), { recursive: true });
    await copyFile(join(from, ...path.split('/')), target);
  }
}

async function unpackTarball(file: string, to: string): Promise<void> {
  const size = statSync(file).size;
  if (size > PACK_LIMITS.max_archive_bytes) {
    throw new PackError(
      'LIMIT',
      `${file} is ${size} bytes, over the limit of ${PACK_LIMITS.max_archive_bytes} bytes for a pack tarball (PACK_LIMITS.max_archive_bytes)`,
    );
  }
  let bytes: Uint8Array = await readFile(file);
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
    try {
      bytes = gunzipSync(bytes, { maxOutputLength: PACK_LIMITS.max_unpacked_bytes + 1024 * 1024 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || error instanceof RangeError) {
        throw new PackError('LIMIT', `${file} unpacks to more than ${PACK_LIMITS.max_unpacked_bytes} bytes (PACK_LIMITS.max_unpacked_bytes)`);
      }
      throw new PackError('ARCHIVE', `${file} is not a valid gzip file: ${(error as Error).message}`);
    }
  }
  const { unpackTar } = await import('modern-tar');
  let entries: Awaited<ReturnType<typeof unpackTar>>;
  try {
    entries = await unpackTar(bytes);
  } catch (error) {
    throw new PackError('ARCHIVE', `${file} is not a valid tar archive: ${(error as Error).message}`);
  }
  if (entries.length > PACK_LIMITS.max_entries) {
    throw new PackError('LIMIT', `${file} holds ${entries.length} entries, more than ${PACK_LIMITS.max_entries} (PACK_LIMITS.max_entries)`);
  }
  const names = entries.map((entry) => checkEntry(file, entry.header.name, entry.header.type ?? 'file', entry.header.linkname));
  // npm pack puts everything under package/; `arium pack` does the same. One top folder is the pack.
  const tops = new Set(names.map((n) => n.split('/')[0]));
  const strip = tops.size === 1 && names.every((n, i) => n.includes('/') || entries[i]?.header.type === 'directory') ? 1 : 0;
  let total = 0;
  for (const [i, entry] of entries.entries()) {
    const parts = (names[i] as string).split('/').slice(strip);
    if (parts.length === 0 || parts[0] === '') continue;
    const target = join(to, ...parts);
    if (entry.header.type === 'directory') {
      await mkdir(target, { recursive: true });
      continue;
    }
    total += entry.data?.length ?? 0;
    if (total > PACK_LIMITS.max_unpacked_bytes) {
      throw new PackError('LIMIT', `${file} unpacks to more than ${PACK_LIMITS.max_unpacked_bytes} bytes (PACK_LIMITS.max_unpacked_bytes)`);
    }
    await mkdir(dirname(target), { recursive: true });
    try {
      // wx: a second entry of the same name does not replace the first one's content unseen.
      await writeFile(target, entry.data ?? new Uint8Array(), { flag: 'wx', mode: 0o644 });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EEXIST' || code === 'EISDIR' || code === 'ENOTDIR') {
        throw new PackError(
          'ARCHIVE',
          `${file}: entry "${names[i]}" is given twice, or as both a file and a folder; rebuild the tarball with each path once`,
        );
      }
      throw error;
    }
  }
}

/** The entry's name, normalized; throws for a name that leaves the pack and for any kind but file or folder. */
function checkEntry(file: string, name: string, type: string, linkname: string | undefined): string {
  if (type === 'symlink' || type === 'link') {
    throw new PackError(
      'ARCHIVE',
      `${file}: entry "${name}" is a ${type === 'link' ? 'hard' : 'symbolic'} link (to "${linkname ?? ''}"); a pack holds only folders and regular files, so rebuild it with the files themselves`,
    );
  }
  if (type !== 'file' && type !== 'directory') {
    throw new PackError('ARCHIVE', `${file}: entry "${name}" is a ${type}; a pack holds only folders and regular files`);
  }
  if (name.includes('\u0000') || name.includes('\\')) throw new PackError('ARCHIVE', `${file}: entry "${name}" has a NUL or backslash in its name`);
  if (name.startsWith('/') || isAbsolute(name) || /^[a-zA-Z]:/.test(name)) {
    throw new PackError('ARCHIVE', `${file}: entry "${name}" has an absolute path; every entry must be relative to the pack's root`);
  }
  const normal = posix.normalize(name).replace(/\/$/, '');
  if (normal === '..' || normal.startsWith('../') || name.split('/').includes('..')) {
    throw new PackError('ARCHIVE', `${file}: entry "${name}" climbs out of the pack with ".."; every entry must stay inside the pack's root`);
  }
  return normal;
}

async function cloneGit(url: string, to: string): Promise<void> {
  const [repo, ref] = url.split('#', 2) as [string, string | undefined];
  const args = ['clone', '--quiet', '--depth', '1', '--no-recurse-submodules', ...(ref ? ['--branch', ref] : []), '--', repo, to];
  try {
    await promisify(execFile)('git', args, {
      timeout: 120_000,
      maxBuffer: 1024 * 1024,
      env: { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_LFS_SKIP_SMUDGE: '1' },
    });
  } catch (error) {
    const why = ((error as { stderr?: string }).stderr ?? (error as Error).message).trim().split('\n').slice(-2).join(' ');
    throw new PackError('SOURCE', `git clone of ${repo}${ref ? ` at ${ref}` : ''} failed: ${why}`);
  }
  await rm(join(to, '.git'), { recursive: true, force: true });
}
