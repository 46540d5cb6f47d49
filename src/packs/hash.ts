import { createHash } from 'node:crypto';
import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PACK_LIMITS } from '../limits.js';
import { PackError } from './errors.js';

/** What a pack's root may hold that is not its content: installed dependencies, a git clone's own folder. */
const GENERATED = new Set(['.arium', '.git', 'node_modules']);

export interface PackListing {
  /** Every regular file, by its path inside the pack (`/`-separated), with the sha256 of its bytes. */
  files: Map<string, string>;
  /** sha256 of the canonical listing: one `<sha256>  <path>\n` line per file, paths in byte order. */
  hash: string;
}

/**
 * Lists and hashes the files of the pack in `dir`. A link, or anything but a folder or a regular file,
 * is refused: a pack's content is exactly its files, and a link could lead the tools out of it.
 */
export async function listPack(dir: string): Promise<PackListing> {
  const files = new Map<string, string>();
  let entries = 0;
  let bytes = 0;
  const walk = async (folder: string, prefix: string): Promise<void> => {
    for (const entry of await readdir(folder, { withFileTypes: true })) {
      if (prefix === '' && GENERATED.has(entry.name)) continue;
      const path = prefix === '' ? entry.name : `${prefix}/${entry.name}`;
      if (++entries > PACK_LIMITS.max_entries) {
        throw new PackError('LIMIT', `the pack holds more than ${PACK_LIMITS.max_entries} files and folders (PACK_LIMITS.max_entries)`);
      }
      const full = join(folder, entry.name);
      const info = await lstat(full);
      if (info.isDirectory()) await walk(full, path);
      else if (info.isFile()) {
        bytes += info.size;
        if (bytes > PACK_LIMITS.max_unpacked_bytes) {
          throw new PackError('LIMIT', `the pack's files pass ${PACK_LIMITS.max_unpacked_bytes} bytes (PACK_LIMITS.max_unpacked_bytes)`);
        }
        files.set(
          path,
          createHash('sha256')
            .update(await readFile(full))
            .digest('hex'),
        );
      } else {
        throw new PackError(
          'ARCHIVE',
          `${path} is ${info.isSymbolicLink() ? 'a symbolic link' : 'not a regular file or folder'}; a pack holds only folders and regular files`,
        );
      }
    }
  };
  await walk(dir, '');
  return { files, hash: listingHash(files) };
}

export function listingHash(files: ReadonlyMap<string, string>): string {
  const paths = [...files.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const text = paths.map((path) => `${files.get(path)}  ${path}\n`).join('');
  return createHash('sha256').update(text).digest('hex');
}

/** What differs between the files recorded and those on disk, in words: "tools/x.js changed, tools/y.js added". */
export function describeDifference(recorded: Readonly<Record<string, string>>, now: ReadonlyMap<string, string>): string {
  const parts: string[] = [];
  for (const [path, sha] of Object.entries(recorded)) {
    const found = now.get(path);
    if (found === undefined) parts.push(`${path} removed`);
    else if (found !== sha) parts.push(`${path} changed`);
  }
  for (const path of now.keys()) if (!Object.hasOwn(recorded, path)) parts.push(`${path} added`);
  const shown = parts.slice(0, 5).join(', ');
  return parts.length > 5 ? `${shown} and ${parts.length - 5} more` : shown || 'the listing hash differs';
}
