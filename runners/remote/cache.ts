import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { TreeEntry } from './wire.js';

// node:child_process, not execa: one compileall run per received environment, from a module the worker
// loads at start, where importing execa (0.1-0.4 s on the 2-core development machine) would slow every start.

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

/** How much a worker's cache may hold, and what it never takes away. */
export interface CacheLimits {
  /** Bytes of files (blobs, and what environments add: bytecode, venv files) past which it evicts. Default 2 GiB. */
  maxBytes: number;
  /** A folder used more recently than this is kept even past maxBytes (a call about to run it). Default 60 s. */
  minIdleMs: number;
  /** The environments used last that are always kept: their Python servers may still run (python-runner.ts keeps 4). */
  keepEnvs: number;
}

export const DEFAULT_CACHE_LIMITS: Readonly<CacheLimits> = Object.freeze({ maxBytes: 2 * 1024 ** 3, minIdleMs: 60_000, keepEnvs: 8 });

/** A laid-out folder: a tools version (`tools/t…`), a bundle (`tools/b…`) or an environment (`envs/e…`). */
interface Item {
  /** Its path below the cache folder, which names it. */
  readonly name: string;
  readonly shas: readonly string[];
  /** Bytes of its files that are not links to blobs (bytecode, venv files, copies). */
  readonly extraBytes: number;
  lastUsed: number;
  /** Which use came last when two fall in the same millisecond (a counter of the cache's uses). */
  useOrder: number;
  refs: number;
}

/**
 * A worker's copy of the engines' tools, by content: `blobs/<sha256>` holds each file once, and
 * `tools/t<tree hash>/` lays one version of a tools folder out as it is on the engine's machine (hard
 * links to the blobs). Every version sits below the one `tools/` folder, which the local runners take
 * as their tools folder: their sandbox processes keep serving new versions without a restart.
 *
 * It is bounded: each laid-out folder is listed in `index/` with the blobs it links, and past
 * `maxBytes` the folders used least recently (and by no running call) go, with the blobs no other
 * folder links. What a previous run of the worker left is taken over at the start, and what no index
 * entry accounts for (a layout cut short) is removed then.
 */
export class ToolCache {
  readonly dir: string;
  readonly toolsDir: string;
  readonly limits: CacheLimits;
  readonly #items = new Map<string, Item>();
  readonly #blobs = new Map<string, { size: number; refs: number }>();
  #bytes = 0;
  /** Told the absolute folder of each item evicted, so that nothing keeps using it. */
  onEvict: ((dir: string) => void) | null = null;

  constructor(dir: string, limits: Partial<CacheLimits> = {}) {
    this.dir = dir;
    this.toolsDir = join(dir, 'tools');
    this.limits = { ...DEFAULT_CACHE_LIMITS, ...limits };
    mkdirSync(join(dir, 'blobs'), { recursive: true });
    mkdirSync(join(dir, 'index'), { recursive: true });
    mkdirSync(join(dir, 'envs'), { recursive: true });
    mkdirSync(this.toolsDir, { recursive: true });
    this.#load();
  }

  /** Bytes it holds now (blobs, and the files environments add). */
  get bytes(): number {
    return this.#bytes;
  }

  treeDir(hash: string): string {
    return join(this.toolsDir, `t${hash.slice(0, 32)}`);
  }

  hasTree(hash: string): boolean {
    return this.#items.has(this.#name(this.treeDir(hash)));
  }

  hasBlob(sha: string): boolean {
    return this.#blobs.has(sha);
  }

  /** Uses counted, so that the least recent of two uses in one millisecond is still known. */
  #uses = 0;

  #used(item: Item, at: number): void {
    item.lastUsed = at;
    item.useOrder = ++this.#uses;
  }

  /** Marks the folders a call is about to use as used now (so that no sweep takes them meanwhile). */
  touch(dirs: readonly string[]): void {
    const now = Date.now();
    for (const dir of dirs) {
      const item = this.#items.get(this.#name(dir));
      if (item) this.#used(item, now);
    }
  }

  /** Holds the folders a running call uses: no sweep takes them until the returned function is called. */
  acquire(dirs: readonly string[]): () => void {
    const held = dirs.map((dir) => this.#items.get(this.#name(dir))).filter((item): item is Item => item !== undefined);
    const now = Date.now();
    for (const item of held) {
      item.refs++;
      this.#used(item, now);
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const at = Date.now();
      for (const item of held) {
        item.refs--;
        this.#used(item, at);
      }
    };
  }

  /**
   * Past maxBytes: removes blobs no folder links (left by a fetch cut short), then the folders used
   * least recently that no call holds, are idle for minIdleMs and are not among the keepEnvs latest
   * environments, until it is under 80% of maxBytes. Run only when no call is fetching or laying out
   * files (the worker asks the received tools first). Returns the folders removed.
   */
  sweep(now = Date.now()): string[] {
    if (this.#bytes <= this.limits.maxBytes) return [];
    for (const [sha, blob] of this.#blobs) if (blob.refs === 0) this.#dropBlob(sha);
    const target = this.limits.maxBytes * 0.8;
    const envs = [...this.#items.values()]
      .filter((item) => item.name.startsWith('envs/'))
      .sort((a, b) => b.lastUsed - a.lastUsed || b.useOrder - a.useOrder);
    const kept = new Set(envs.slice(0, this.limits.keepEnvs).map((item) => item.name));
    const candidates = [...this.#items.values()]
      .filter((item) => item.refs === 0 && now - item.lastUsed >= this.limits.minIdleMs && !kept.has(item.name))
      .sort((a, b) => a.lastUsed - b.lastUsed || a.useOrder - b.useOrder);
    const evicted: string[] = [];
    for (const item of candidates) {
      if (this.#bytes <= target) break;
      this.#evict(item);
      evicted.push(join(this.dir, item.name));
    }
    return evicted;
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
    if (!this.#blobs.has(sha)) {
      this.#blobs.set(sha, { size: bytes.length, refs: 0 });
      this.#bytes += bytes.length;
    }
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
    this.#register(this.treeDir(hash), entries);
  }

  /** `tools/b<sha>/<name>`: a JS tool's bundle, below the tools folder the JS runner reads. */
  bundlePath(sha: string, name: string): string {
    return join(this.toolsDir, `b${sha.slice(0, 32)}`, name);
  }

  /** Lays out a bundle whose blob is here. */
  putBundle(sha: string, name: string): string {
    const path = this.bundlePath(sha, name);
    if (this.#items.has(this.#name(dirname(path)))) return path;
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
    this.#register(dirname(path), [[name, sha, 0]]);
    return path;
  }

  /**
   * `envs/e<key>/`: a virtual environment of `python` (this worker's interpreter) holding the files the
   * engine sent (its site-packages, paths checked by the caller), whose blobs are all here, compiled
   * once. Made aside and renamed into place.
   */
  async putEnv(hash: string, entries: readonly TreeEntry[], python: WorkerPython): Promise<string> {
    const dir = this.#envDir(hash, python);
    if (this.#items.has(this.#name(dir))) return dir;
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
    this.#register(dir, entries);
    return dir;
  }

  /** The folder of an environment laid out for `python`, when it is here. */
  hasEnv(hash: string, python: WorkerPython): string | null {
    const dir = this.#envDir(hash, python);
    return this.#items.has(this.#name(dir)) ? dir : null;
  }

  #name(dir: string): string {
    return relative(this.dir, dir).split('\\').join('/');
  }

  /** Lists a folder just laid out, with the blobs it links and what else it holds, in memory and in index/. */
  #register(dir: string, entries: readonly TreeEntry[]): void {
    const name = this.#name(dir);
    if (this.#items.has(name)) return;
    const shas = [...new Set(entries.map(([, sha]) => sha))];
    const extraBytes = unlinkedBytes(dir);
    const item: Item = { name, shas, extraBytes, lastUsed: Date.now(), useOrder: ++this.#uses, refs: 0 };
    writeFileSync(join(this.dir, 'index', indexFile(name)), JSON.stringify({ name, shas, extra_bytes: extraBytes }));
    this.#add(item);
  }

  #add(item: Item): void {
    this.#items.set(item.name, item);
    this.#bytes += item.extraBytes;
    for (const sha of item.shas) {
      let blob = this.#blobs.get(sha);
      if (!blob) {
        const size = statSync(join(this.dir, 'blobs', sha), { throwIfNoEntry: false })?.size ?? 0;
        blob = { size, refs: 0 };
        this.#blobs.set(sha, blob);
        this.#bytes += size;
      }
      blob.refs++;
    }
  }

  #evict(item: Item): void {
    this.#items.delete(item.name);
    rmSync(join(this.dir, 'index', indexFile(item.name)), { force: true });
    rmSync(join(this.dir, item.name), { recursive: true, force: true });
    this.#bytes -= item.extraBytes;
    for (const sha of item.shas) {
      const blob = this.#blobs.get(sha);
      if (blob && --blob.refs === 0) this.#dropBlob(sha);
    }
    this.onEvict?.(join(this.dir, item.name));
  }

  #dropBlob(sha: string): void {
    const blob = this.#blobs.get(sha);
    if (!blob) return;
    this.#blobs.delete(sha);
    this.#bytes -= blob.size;
    rmSync(join(this.dir, 'blobs', sha), { force: true });
  }

  /**
   * Takes over what a previous run left: the folders index/ lists (used then as of their index file's
   * time) and the blobs they link. Anything else (a layout or a fetch cut short, a cache of an older
   * version) is removed: nothing runs yet.
   */
  #load(): void {
    const listed = new Set<string>();
    for (const file of readdirSync(join(this.dir, 'index'))) {
      const path = join(this.dir, 'index', file);
      try {
        const parsed = JSON.parse(readFileSync(path, 'utf8')) as { name?: unknown; shas?: unknown; extra_bytes?: unknown };
        const name = String(parsed.name);
        const shas = Array.isArray(parsed.shas) ? parsed.shas.map(String) : null;
        if (!/^(tools\/[tb]|envs\/e)[0-9a-f]{32}$/.test(name) || indexFile(name) !== file || shas === null || !shas.every((sha) => SHA.test(sha))) {
          throw new Error('not an index entry');
        }
        if (!existsSync(join(this.dir, name)) || !shas.every((sha) => existsSync(join(this.dir, 'blobs', sha)))) throw new Error('incomplete');
        this.#add({ name, shas, extraBytes: Number(parsed.extra_bytes) || 0, lastUsed: statSync(path).mtimeMs, useOrder: 0, refs: 0 });
        listed.add(name);
      } catch {
        rmSync(path, { force: true });
      }
    }
    for (const parent of ['tools', 'envs']) {
      for (const entry of readdirSync(join(this.dir, parent), { withFileTypes: true })) {
        if (!listed.has(`${parent}/${entry.name}`)) rmSync(join(this.dir, parent, entry.name), { recursive: true, force: true });
      }
    }
    for (const sha of readdirSync(join(this.dir, 'blobs'))) {
      if (!this.#blobs.has(sha)) rmSync(join(this.dir, 'blobs', sha), { force: true });
    }
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

/** The index file of a folder: its name with the slash made a dash (`tools-t<hash>.json`). */
function indexFile(name: string): string {
  return `${name.replace('/', '-')}.json`;
}

/** Bytes of the files below `dir` that are not hard links (to blobs): an environment's bytecode, copies. */
function unlinkedBytes(dir: string): number {
  let bytes = 0;
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) walk(path);
      else {
        const stat = lstatSync(path);
        if (stat.isFile() && stat.nlink === 1) bytes += stat.size;
      }
    }
  };
  walk(dir);
  return bytes;
}
