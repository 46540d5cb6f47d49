import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { instrument, ModuleFormatError } from './instrument.mjs';

/**
 * The wasm modules this sandbox process has read, by entry file: each is read, checked and
 * instrumented once, and again only when the file changes (its size or mtime). Compiling happens per
 * isolate (pool.mjs) from the instrumented bytes kept here, which are keyed by the hash of the file.
 */

const WASI = 'wasi_snapshot_preview1';

/** A module that cannot be run, with why: a load problem, reported as the call's TOOL_ERROR. */
export class ModuleProblem extends Error {
  name = 'ModuleProblem';
}

/** V8's message for a module that does not validate (it stops at the first error, making no code). */
function compileError(raw) {
  try {
    new WebAssembly.Module(raw);
    return 'V8 gave no reason';
  } catch (error) {
    return String(error?.message ?? error);
  }
}

export class ModuleCache {
  #ivm;
  #byPath = new Map();

  constructor(ivm) {
    this.#ivm = ivm;
  }

  /** { hash, bytes (ExternalCopy of the instrumented module), initialPages } for the file at `path`; throws ModuleProblem. */
  get(path) {
    let stats;
    try {
      stats = statSync(path);
    } catch (error) {
      throw new ModuleProblem(`the module file cannot be read (${error?.code ?? 'error'})`);
    }
    const stamp = `${stats.size}:${stats.mtimeMs}`;
    const known = this.#byPath.get(path);
    if (known && known.stamp === stamp) {
      if (known.problem) throw new ModuleProblem(known.problem);
      return known;
    }
    const entry = { stamp };
    try {
      const raw = new Uint8Array(readFileSync(path));
      entry.hash = createHash('sha256').update(raw).digest('hex');
      // The module as written must be valid: the rewrite adds globals and a function after its own, and
      // an invalid module naming those indices (global.set of the cap) would become valid once rewritten.
      if (!WebAssembly.validate(raw)) throw new ModuleProblem(`the module is not valid WebAssembly: ${compileError(raw)}`);
      const done = instrument(raw);
      const foreign = done.imports.filter((i) => i.module !== WASI || i.kind !== 'function');
      if (foreign.length > 0) {
        const names = foreign.map((i) => `${i.module}.${i.name} (${i.kind})`).slice(0, 5);
        throw new ModuleProblem(
          `the module imports ${names.join(', ')}${foreign.length > 5 ? ` and ${foreign.length - 5} more` : ''}, which the host does not offer: a wasm-runner module may import only WASI preview 1 functions (${WASI})`,
        );
      }
      entry.bytes = new this.#ivm.ExternalCopy(done.bytes);
      entry.initialPages = done.initialPages;
    } catch (error) {
      entry.problem =
        error instanceof ModuleProblem || error instanceof ModuleFormatError
          ? error.message
          : `the module could not be read: ${error?.message ?? error}`;
    }
    this.#byPath.get(path)?.bytes?.release();
    this.#byPath.set(path, entry);
    if (entry.problem) throw new ModuleProblem(entry.problem);
    return entry;
  }

  /** Drops what was read from `path`; returns the hash of the module it held, if any. */
  forget(path) {
    const entry = this.#byPath.get(path);
    entry?.bytes?.release();
    this.#byPath.delete(path);
    return entry?.hash;
  }
}
