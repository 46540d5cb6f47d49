import { createHash, randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, linkSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { TreeEntry } from './wire.js';

const SHA = /^[0-9a-f]{64}$/;

/**
 * A worker's copy of the engines' tools, by content: `blobs/<sha256>` holds each file once, and
 * `tools/t<tree hash>/` lays one version of a tools folder out as it is on the engine's machine (hard
 * links to the blobs). Every version sits below the one `tools/` folder, which the local runners take
 * as their tools folder: their sandbox processes keep serving new versions without a restart.
 */
export class ToolCache {
  readonly dir: string;
  readonly toolsDir: string;
  readonly #trees = new Set<string>();

  constructor(dir: string) {
    this.dir = dir;
    this.toolsDir = join(dir, 'tools');
    mkdirSync(join(dir, 'blobs'), { recursive: true });
    mkdirSync(this.toolsDir, { recursive: true });
  }

  treeDir(hash: string): string {
    return join(this.toolsDir, `t${hash.slice(0, 32)}`);
  }

  hasTree(hash: string): boolean {
    if (this.#trees.has(hash)) return true;
    if (!existsSync(this.treeDir(hash))) return false;
    this.#trees.add(hash);
    return true;
  }

  hasBlob(sha: string): boolean {
    return existsSync(join(this.dir, 'blobs', sha));
  }

  /** Stores the bytes of one file after checking they are what the engine's hash says. */
  putBlob(sha: string, bytes: Buffer): void {
    if (!SHA.test(sha) || createHash('sha256').update(bytes).digest('hex') !== sha) {
      throw new ToolFailure('transport', 'UNAVAILABLE', 'A tool file changed on the engine while it was being sent; retry the call');
    }
    const path = join(this.dir, 'blobs', sha);
    const temp = `${path}.${randomBytes(4).toString('hex')}`;
    writeFileSync(temp, bytes, { mode: 0o444 });
    renameSync(temp, path);
  }

  /** Lays out a tree whose blobs are all here; safe against another call building the same tree. */
  putTree(hash: string, entries: readonly TreeEntry[]): void {
    if (this.hasTree(hash)) return;
    const temp = join(this.toolsDir, `.tmp-${randomBytes(6).toString('hex')}`);
    try {
      for (const [path, sha] of entries) {
        if (
          !SHA.test(sha) ||
          path.split('/').some((part) => part === '' || part === '.' || part === '..') ||
          path.includes('\\') ||
          path.includes('\0')
        ) {
          throw new ToolFailure(
            'transport',
            'UNAVAILABLE',
            `The engine sent a tools file with an unusable path: ${JSON.stringify(path).slice(0, 200)}`,
          );
        }
        const target = join(temp, path);
        mkdirSync(dirname(target), { recursive: true });
        const blob = join(this.dir, 'blobs', sha);
        try {
          linkSync(blob, target);
        } catch {
          copyFileSync(blob, target);
        }
      }
      mkdirSync(temp, { recursive: true });
      try {
        renameSync(temp, this.treeDir(hash));
      } catch (error) {
        if (!existsSync(this.treeDir(hash))) throw error;
      }
    } finally {
      rmSync(temp, { recursive: true, force: true });
    }
    this.#trees.add(hash);
  }
}
