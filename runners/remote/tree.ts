import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
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
    const realTools = realpathSync(toolsDir);
    const entries: TreeEntry[] = [];
    const paths = new Map<string, string>();
    const seen = new Set<string>();
    let bytes = 0;
    const walk = (dir: string) => {
      for (const dirent of readdirSync(dir, { withFileTypes: true })) {
        if (limits.skip(dirent.name)) continue;
        const path = join(dir, dirent.name);
        if (dirent.isDirectory()) {
          walk(path);
          continue;
        }
        if (!dirent.isFile() && !(dirent.isSymbolicLink() && linksToFileInside(path, realTools))) continue;
        const known = this.#hashed(path);
        seen.add(path);
        bytes += known.size;
        if (entries.length >= limits.files || bytes > limits.bytes) {
          throw new ToolFailure(
            'execution',
            'MISCONFIGURED',
            `${limits.what} is too large to run remotely (more than ${limits.files} files or ${limits.bytes / 1048576} MB); ${limits.advice}`,
          );
        }
        entries.push([relative(toolsDir, path).split(sep).join('/'), known.sha, known.size]);
        paths.set(known.sha, path);
      }
    };
    walk(toolsDir);
    for (const path of this.#known.keys()) if (!seen.has(path) && path.startsWith(toolsDir)) this.#known.delete(path);
    entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const hash = createHash('sha256').update(JSON.stringify(entries)).digest('hex');
    return { hash, entries, paths };
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
