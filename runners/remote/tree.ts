import { createHash } from 'node:crypto';
import { createReadStream, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { isAbsolute, join, relative, sep } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { TreeEntry } from './wire.js';

/** A tools folder shipped to workers is held to these (a remote call of a larger folder fails MISCONFIGURED). */
export const MAX_TREE_FILES = 5_000;
export const MAX_TREE_BYTES = 64 * 1024 * 1024;

/** What a listed folder is held to, and what a failure says of it. */
export interface TreeLimits {
  files: number;
  bytes: number;
  /** The folder, for people: `The tools folder`. */
  what: string;
  /** How to make it smaller. */
  advice: string;
  /** Names of files and folders left out wherever they are. */
  skip: (name: string) => boolean;
}

const TOOLS_FOLDER: TreeLimits = {
  files: MAX_TREE_FILES,
  bytes: MAX_TREE_BYTES,
  what: 'The tools folder',
  advice: 'move data out of it',
  // Dot-entries (.git, .env) and installed packages stay home: a tool's packages travel bundled.
  skip: (name) => name.startsWith('.') || name === 'node_modules',
};

/** The tools folder as a worker gets it: each file by content hash, and the hash of the whole. */
export interface Tree {
  hash: string;
  entries: TreeEntry[];
  /** Absolute path of a file by its sha256, for a worker that asks for it. */
  paths: Map<string, string>;
}

interface Known {
  mtimeMs: number;
  size: number;
  ino: number;
  sha: string;
}

/**
 * The engine's side of content addressing: a tools folder listed with the sha256 of each file, hashed
 * again only when its size, mtime or inode changed. Listed at each remote call, so a tool edited on
 * the engine's machine runs in its new version on the next call; dot-entries and node_modules stay
 * home (a tool's packages travel bundled, see shipment.ts).
 */
export class TreeIndex {
  readonly #known = new Map<string, Known>();

  tree(toolsDir: string, limits: TreeLimits = TOOLS_FOLDER): Tree {
    const entries: TreeEntry[] = [];
    const paths = new Map<string, string>();
    const seen = new Set<string>();
    let bytes = 0;
    for (const path of listFiles(toolsDir, limits)) {
      const known = this.#hashed(path);
      seen.add(path);
      bytes += known.size;
      if (entries.length >= limits.files || bytes > limits.bytes) throw tooLarge(limits);
      entries.push([relative(toolsDir, path).split(sep).join('/'), known.sha, known.size]);
      paths.set(known.sha, path);
    }
    for (const path of this.#known.keys()) if (!seen.has(path) && path.startsWith(toolsDir)) this.#known.delete(path);
    entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const hash = createHash('sha256').update(JSON.stringify(entries)).digest('hex');
    return { hash, entries, paths };
  }

  /**
   * Hashes the files of `dir` that `tree` would hash, a chunk at a time between other work: a large
   * folder (a pinned environment) is read without holding the engine's thread. Stops early past the
   * limits (`tree` then says so).
   */
  async hashAhead(dir: string, limits: TreeLimits): Promise<void> {
    let bytes = 0;
    const stale: string[] = [];
    for (const path of listFiles(dir, limits)) {
      const stat = statSync(path);
      bytes += stat.size;
      if (stale.length >= limits.files || bytes > limits.bytes) return;
      const known = this.#known.get(path);
      if (!known || known.mtimeMs !== stat.mtimeMs || known.size !== stat.size || known.ino !== stat.ino) stale.push(path);
    }
    for (const path of stale) {
      const stat = statSync(path);
      const hash = createHash('sha256');
      for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
      const after = statSync(path);
      // Changed while it was read: left to `tree`, which hashes it again.
      if (after.mtimeMs !== stat.mtimeMs || after.size !== stat.size || after.ino !== stat.ino) continue;
      this.#known.set(path, { mtimeMs: stat.mtimeMs, size: stat.size, ino: stat.ino, sha: hash.digest('hex') });
    }
  }

  /** One file's sha256 and size (a JS tool's bundle), hashed again only when it changed. */
  file(path: string): { sha: string; size: number } {
    return this.#hashed(path);
  }

  #hashed(path: string): Known {
    const stat = statSync(path);
    let known = this.#known.get(path);
    if (!known || known.mtimeMs !== stat.mtimeMs || known.size !== stat.size || known.ino !== stat.ino) {
      known = { mtimeMs: stat.mtimeMs, size: stat.size, ino: stat.ino, sha: createHash('sha256').update(readFileSync(path)).digest('hex') };
      this.#known.set(path, known);
    }
    return known;
  }
}

function tooLarge(limits: TreeLimits): ToolFailure {
  return new ToolFailure(
    'execution',
    'MISCONFIGURED',
    `${limits.what} is too large to run remotely (more than ${limits.files} files or ${limits.bytes / 1048576} MB); ${limits.advice}`,
  );
}

/**
 * The files of `dir` that are sent: regular files, and links to one inside it; `skip`ped names left
 * out. The walk stops one file past the limit (enough for the caller to say it is too large).
 */
function listFiles(dir: string, limits: TreeLimits): string[] {
  const realDir = realpathSync(dir);
  const found: string[] = [];
  const walk = (at: string) => {
    for (const dirent of readdirSync(at, { withFileTypes: true })) {
      if (found.length > limits.files) return;
      if (limits.skip(dirent.name)) continue;
      const path = join(at, dirent.name);
      if (dirent.isDirectory()) walk(path);
      else if (dirent.isFile() || (dirent.isSymbolicLink() && linksToFileInside(path, realDir))) found.push(path);
    }
  };
  walk(dir);
  return found;
}

/**
 * A link the runners would follow on the engine's machine: to a regular file inside the tools folder
 * (the JS loader and the Python sandbox refuse the others). Sent as a file of the link's name; links
 * to folders are not followed, so a loop of them cannot hold the walk.
 */
function linksToFileInside(path: string, realTools: string): boolean {
  try {
    const target = realpathSync(path);
    const rel = relative(realTools, target);
    return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel) && statSync(target).isFile();
  } catch {
    return false;
  }
}
