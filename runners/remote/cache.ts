import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, linkSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { TreeEntry } from './wire.js';

const SHA = /^[0-9a-f]{64}$/;

/** A path the engine sent that stays below the folder it is joined to: relative, no `..`, no empty part. */
export function safePath(path: unknown): path is string {
  return (
    typeof path === 'string' &&
    path.length > 0 &&
    path.length <= 4096 &&
    !path.split('/').some((part) => part === '' || part === '.' || part === '..') &&
    !path.includes('\\') &&
    !path.includes('\0')
  );
}

/** The interpreter a worker lays environments out for. */
export interface WorkerPython {
  executable: string;
  version: string;
  tag: string;
}

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
      this.#layOut(temp, entries);
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

  /** `tools/b<sha>/<name>`: a JS tool's bundle, below the tools folder the JS runner reads. */
  bundlePath(sha: string, name: string): string {
    return join(this.toolsDir, `b${sha.slice(0, 32)}`, name);
  }

  /** Lays out a bundle whose blob is here. */
  putBundle(sha: string, name: string): string {
    const path = this.bundlePath(sha, name);
    if (existsSync(path)) return path;
    const temp = join(this.toolsDir, `.tmp-${randomBytes(6).toString('hex')}`);
    try {
      this.#layOut(temp, [[name, sha, 0]]);
      try {
        renameSync(temp, dirname(path));
      } catch (error) {
        if (!existsSync(path)) throw error;
      }
    } finally {
      rmSync(temp, { recursive: true, force: true });
    }
    return path;
  }

  /**
   * `envs/e<key>/`: a virtual environment of `python` (this worker's interpreter) holding the files the
   * engine sent (its site-packages, paths checked by the caller), whose blobs are all here, compiled
   * once. Made aside and renamed into place.
   */
  async putEnv(hash: string, entries: readonly TreeEntry[], python: WorkerPython): Promise<string> {
    const dir = this.#envDir(hash, python);
    if (existsSync(dir)) return dir;
    mkdirSync(join(this.dir, 'envs'), { recursive: true });
    const temp = join(this.dir, 'envs', `.tmp-${randomBytes(6).toString('hex')}`);
    try {
      this.#layOut(temp, entries);
      mkdirSync(join(temp, 'bin'), { recursive: true });
      symlinkSync(python.executable, join(temp, 'bin', 'python3'));
      // What makes the folder a venv of this worker's interpreter (python -m venv writes the same).
      writeFileSync(
        join(temp, 'pyvenv.cfg'),
        `home = ${dirname(python.executable)}\ninclude-system-site-packages = false\nversion = ${python.version}\n`,
      );
      await compileBytecode(python.executable, join(temp, 'lib'));
      try {
        renameSync(temp, dir);
      } catch (error) {
        if (!existsSync(dir)) throw error;
      }
    } finally {
      rmSync(temp, { recursive: true, force: true });
    }
    return dir;
  }

  /** The folder of an environment laid out for `python`, when it is here. */
  hasEnv(hash: string, python: WorkerPython): string | null {
    const dir = this.#envDir(hash, python);
    return existsSync(dir) ? dir : null;
  }

  /** An environment's folder, by its hash and the interpreter it is a venv of (its pyvenv.cfg names that one). */
  #envDir(hash: string, python: WorkerPython): string {
    const key = createHash('sha256').update(`${hash}\0${python.executable}`).digest('hex').slice(0, 32);
    return join(this.dir, 'envs', `e${key}`);
  }

  /** Hard links (or copies) of blobs at the entries' paths below `root`, each path checked first. */
  #layOut(root: string, entries: readonly TreeEntry[]): void {
    for (const [path, sha] of entries) {
      if (!SHA.test(sha) || !safePath(path)) {
        throw new ToolFailure('transport', 'UNAVAILABLE', `The engine sent a file with an unusable path: ${JSON.stringify(path).slice(0, 200)}`);
      }
      const target = join(root, path);
      mkdirSync(dirname(target), { recursive: true });
      const blob = join(this.dir, 'blobs', sha);
      try {
        linkSync(blob, target);
      } catch {
        copyFileSync(blob, target);
      }
    }
    mkdirSync(root, { recursive: true });
  }
}

/** Compiling a large environment takes a while; past this its calls compile what they import themselves. */
const COMPILE_TIMEOUT_MS = 10 * 60 * 1000;

/**
 * Writes the bytecode of every module below `dir`, as pip does at install time. The environment is
 * mounted read-only, so without it each call process would compile every module it imports, every
 * call. Checked-hash bytecode (PEP 552) is valid whatever the files' times (hard links of blobs have
 * the times they were received at). Compiling runs none of the modules' code; a file that does not
 * compile (a package's Python 2 test data) is left to fail, if ever, where it is imported.
 */
function compileBytecode(python: string, dir: string): Promise<void> {
  return new Promise((resolve) => {
    execFile(
      python,
      ['-I', '-m', 'compileall', '-q', '-j', '0', '--invalidation-mode', 'checked-hash', dir],
      { timeout: COMPILE_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
      () => resolve(),
    );
  });
}
