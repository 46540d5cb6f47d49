import { accessSync, chmodSync, closeSync, constants, linkSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ToolFailure } from '../../../src/errors.js';
import type { ToolVfs } from '../../../src/tool-vfs.js';

/**
 * The host copy of the VFS that system.exec's programs see, kept between calls so that a large tree is
 * written to disk once, not on every call.
 *
 * A call names the subtrees it needs (its `cwd`, the paths it reads). The mirror compares each with the
 * call's view of the VFS — by the identity of the content buffers the VFS holds (a file the VFS has not
 * replaced is the same Buffer object), then by bytes — and writes only what differs. The program never
 * writes to the mirror: it sees its `cwd` through an overlay whose upper layer is the call's own, so the
 * mirror stays equal to what it recorded.
 *
 * Calls run at once, and an overlay's lower layer must not change under it (the kernel leaves that
 * undefined). So the mirror is made of generations: a generation in use by a call is never changed;
 * a call that needs something else gets a new generation, made of hard links to the current one's files
 * (metadata only) plus what differs. A file of the mirror is never written in place, only replaced, so
 * the links are safe. A generation nobody uses any more is deleted.
 *
 * Files and folders are 0777 (inside a 0700 folder of the engine's user): overlayfs checks a write
 * against the lower file's mode, and the program runs as a uid of its own, which may not chmod a file
 * it does not own. The VFS keeps no modes, so every file is also executable: a program built by one
 * call can be run by the next (through an allowlisted program; the allowlist is about what
 * system.exec starts).
 *
 * The mirror lives in /dev/shm (memory) when the machine has it, since writing 10,000 small files to a
 * busy disk took 2.6–13 s here against well under a second in memory; it holds at most the VFS paths
 * calls asked for (the VFS itself is bounded by its quota), and generations share their unchanged
 * files. What programs write (each call's overlay upper folder) goes to the temp folder, on disk: a
 * program could otherwise fill the host's memory with it.
 */

/** Where the mirror goes: /dev/shm when it is a writable folder, else the system's temp folder. */
function mirrorParent(): string {
  try {
    if (statSync('/dev/shm').isDirectory()) {
      accessSync('/dev/shm', constants.W_OK);
      return '/dev/shm';
    }
  } catch {
    // no /dev/shm here
  }
  return tmpdir();
}

type Entry = { type: 'file'; data: Buffer } | { type: 'directory' };

export interface Generation {
  readonly dir: string;
  /** What the generation holds, by VFS path. */
  readonly entries: Map<string, Entry>;
  refs: number;
}

export interface Lease {
  /** The host folder standing for the VFS root. */
  readonly root: string;
  /** What the generation held under the subtrees asked for, when the lease was taken (unchanged while held). */
  readonly entries: ReadonlyMap<string, Entry>;
  /** Files written to the mirror for this call (0 when it was already in sync). */
  readonly written: number;
  release(): void;
}

export class Mirror {
  readonly #base: string;
  readonly #calls: string;
  #current: Generation | null = null;
  #serial = 0;

  constructor() {
    this.#base = mkdtempSync(join(mirrorParent(), 'arium-exec-mirror-'));
    this.#calls = mkdtempSync(join(tmpdir(), 'arium-exec-calls-'));
  }

  /** Where the per-call folders go (overlay upper and work must share a file system; the lower need not). */
  get calls(): string {
    return this.#calls;
  }

  /**
   * Brings `subtrees` of the mirror in line with the call's view and leases the generation holding
   * them. Every path under them must be readable by the call: the program sees all of it.
   */
  lease(vfs: ToolVfs, subtrees: readonly string[]): Lease {
    const wanted = new Map<string, Entry>();
    for (const top of subtrees) collect(vfs, top, wanted);
    let generation = this.#current ?? this.#fresh(null);
    const stale = difference(generation, subtrees, wanted);
    if (stale.removed.length + stale.written.length > 0 && generation.refs > 0) generation = this.#fresh(generation);
    apply(generation, stale);
    this.#current = generation;
    generation.refs++;
    let released = false;
    return {
      root: generation.dir,
      entries: wanted,
      written: stale.written.length,
      release: () => {
        if (released) return;
        released = true;
        generation.refs--;
        if (generation.refs === 0 && generation !== this.#current) rmSync(generation.dir, { recursive: true, force: true });
      },
    };
  }

  dispose(): void {
    rmSync(this.#base, { recursive: true, force: true });
    rmSync(this.#calls, { recursive: true, force: true });
  }

  /** A new generation: empty, or hard links to everything `from` holds. */
  #fresh(from: Generation | null): Generation {
    const dir = join(this.#base, `g${++this.#serial}`);
    mkdirSync(dir, { mode: 0o777 });
    chmodSync(dir, 0o777);
    const generation: Generation = { dir, entries: new Map(), refs: 0 };
    if (from) {
      // Map order is insertion order, and a folder always went in before what it holds.
      for (const [path, entry] of from.entries) {
        if (entry.type === 'directory') {
          makeDir(join(dir, path));
        } else {
          mkdirSync(dirname(join(dir, path)), { recursive: true });
          linkSync(join(from.dir, path), join(dir, path));
        }
        generation.entries.set(path, entry);
      }
    }
    return generation;
  }
}

/** The entries of `top` and below in the call's view, refused whole if the call may not read any of them. */
function collect(vfs: ToolVfs, top: string, into: Map<string, Entry>): void {
  const type = vfs.stat(top).type;
  const entries: Array<{ path: string; type: string }> = [{ path: top, type }];
  if (type === 'directory') entries.push(...vfs.list(top, { recursive: true }).entries);
  for (const { path, type: kind } of entries) {
    // The program would see every file below: one the caller may not read makes the whole call DENIED.
    if (!vfs.allows('vfs.read', path)) vfs.demand('vfs.read', 'exec', path);
    if (path === '/') continue;
    into.set(path, kind === 'directory' ? { type: 'directory' } : { type: 'file', data: vfs.read(path) });
  }
}

const within = (path: string, top: string) => top === '/' || path === top || path.startsWith(`${top}/`);

interface Stale {
  removed: string[];
  written: Array<[string, Entry]>;
}

function difference(generation: Generation, subtrees: readonly string[], wanted: Map<string, Entry>): Stale {
  const removed: string[] = [];
  for (const [path, have] of generation.entries) {
    if (!subtrees.some((top) => within(path, top))) continue;
    const want = wanted.get(path);
    if (!want || want.type !== have.type) removed.push(path);
  }
  const gone = new Set(removed);
  const written: Array<[string, Entry]> = [];
  for (const [path, want] of wanted) {
    const have = generation.entries.get(path);
    const same =
      have !== undefined &&
      have.type === want.type &&
      (want.type === 'directory' || (have.type === 'file' && (have.data === want.data || have.data.equals(want.data))));
    if (!same || gone.has(path)) written.push([path, want]);
  }
  return { removed, written };
}

function apply(generation: Generation, stale: Stale): void {
  // Deepest first, so a folder is gone with what it held before anything is put in its place.
  for (const path of stale.removed.sort((a, b) => b.length - a.length)) rmSync(join(generation.dir, path), { recursive: true, force: true });
  if (stale.removed.length > 0) {
    const removed = new Set(stale.removed);
    const gone = (key: string) => {
      for (let at = key; at.length > 1; at = at.slice(0, at.lastIndexOf('/')) || '/') if (removed.has(at)) return true;
      return false;
    };
    for (const key of [...generation.entries.keys()]) if (gone(key)) generation.entries.delete(key);
  }
  for (const [path, entry] of stale.written) {
    const host = join(generation.dir, path);
    if (entry.type === 'directory') {
      makeDir(host);
    } else {
      // Replaced, never written in place: older generations may share this file's inode.
      if (generation.entries.has(path)) rmSync(host, { force: true });
      else mkdirSync(dirname(host), { recursive: true });
      const fd = openSync(host, 'wx', 0o777);
      try {
        let done = 0;
        while (done < entry.data.length) done += writeSync(fd, entry.data, done);
      } finally {
        closeSync(fd);
      }
      chmodSync(host, 0o777);
    }
    generation.entries.set(path, entry);
  }
}

/** A folder of the mirror (and any above it a subtree needs, which stay 0755: nothing writes there). */
function makeDir(host: string): void {
  try {
    mkdirSync(host, { recursive: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
      throw new ToolFailure('execution', 'INTERNAL', `system.exec could not prepare its copy of the VFS: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }
  chmodSync(host, 0o777);
}
