import { createHash } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import type { Tool } from '../../src/tool.js';
import { type Tree, TreeIndex, type TreeLimits } from './tree.js';
import type { TreeEntry } from './wire.js';

/**
 * What a remote call needs besides the tools folder to run on a worker as it would here, made by the
 * engine's local runner of the tool (which has the project's installed dependencies; the worker never
 * installs anything):
 *
 * - `bundle`: a JS tool that imports npm packages, bundled here (runners/js/bundle.ts); the worker runs
 *   that one module in place of the tool's entry.
 * - `environment`: a Python tool of a project with a pinned environment (runners/python/environment.ts):
 *   its folder, and the interpreter it was made for (`interpreterTag`), which the worker's must match.
 *
 * A tool whose dependencies are not installed fails here as a local call of it does.
 */
export interface Shipment {
  bundle?: { path: string; bytes: number; built_ms?: number };
  environment?: { dir: string; python: string };
}

/** A local runner that can say what its tools need on a worker (js-runner and py-runner). */
export interface Shipper {
  shipment(tool: Tool): Promise<Shipment>;
}

export function isShipper(runner: object): runner is Shipper {
  return typeof (runner as Partial<Shipper>).shipment === 'function';
}

/** A pinned environment is held to these when shipped (its site-packages; a larger one fails MISCONFIGURED). */
export const MAX_ENV_FILES = 50_000;
export const MAX_ENV_BYTES = 1024 * 1024 * 1024;

/** An environment as a worker gets it: the files of its site-packages, by path relative to the environment. */
export interface EnvTree extends Tree {
  python: string;
}

/**
 * The engine's side of shipping environments: an environment's site-packages listed and hashed once,
 * then reused while its stamp (arium-env.json) is the same file; `arium install` makes each environment
 * in a folder of its own, so a new install is a new folder. A warm call costs one stat.
 */
export class EnvIndex {
  readonly #index = new TreeIndex();
  readonly #known = new Map<string, { signature: string; tree: EnvTree }>();
  readonly #preparing = new Map<string, Promise<void>>();

  /** Whether `tree` answers at once: the environment was listed and hashed since its last install. */
  ready(dir: string, python: string): boolean {
    return this.#known.get(dir)?.signature === `${stampSignature(dir)}|${python}`;
  }

  /**
   * Reads and hashes the environment's files a chunk at a time (hundreds of MB take seconds: the engine
   * serves other calls meanwhile); calls that need it at the same time wait for the one reading.
   */
  prepare(dir: string, python: string): Promise<void> {
    let pending = this.#preparing.get(dir);
    if (!pending) {
      pending = (async () => {
        await this.#index.hashAhead(join(dir, sitePackages(dir)), limitsOf(sitePackages(dir)));
        this.tree(dir, python);
      })().finally(() => this.#preparing.delete(dir));
      this.#preparing.set(dir, pending);
    }
    return pending;
  }

  tree(dir: string, python: string): EnvTree {
    const signature = `${stampSignature(dir)}|${python}`;
    const known = this.#known.get(dir);
    if (known?.signature === signature) return known.tree;
    const site = sitePackages(dir);
    const listed = this.#index.tree(join(dir, site), limitsOf(site));
    const entries = listed.entries.map(([path, sha, size]): TreeEntry => [`${site}/${path}`, sha, size]);
    const hash = createHash('sha256').update(JSON.stringify(entries)).digest('hex');
    const tree: EnvTree = { hash, entries, paths: listed.paths, python };
    this.#known.set(dir, { signature, tree });
    return tree;
  }
}

function limitsOf(site: string): TreeLimits {
  return {
    files: MAX_ENV_FILES,
    bytes: MAX_ENV_BYTES,
    what: `The project's Python environment (${site})`,
    advice: 'pin fewer packages for tools that run remotely',
    // All of site-packages goes (wheels keep shared libraries in dot-folders too, `pkg/.libs`) but
    // its bytecode: stamped with the files' times here, it would be stale on the worker, which
    // compiles its own (cache.ts).
    skip: (name) => name === '__pycache__',
  };
}

function stampSignature(dir: string): string {
  try {
    const st = statSync(join(dir, 'arium-env.json'));
    return `${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch {
    return 'missing';
  }
}

/** `lib/python3.X/site-packages` (or `lib/pypy3.X/…`) of a venv, relative to it. */
function sitePackages(dir: string): string {
  let names: string[] = [];
  try {
    names = readdirSync(join(dir, 'lib'));
  } catch {}
  const found = names.filter((name) => existsSync(join(dir, 'lib', name, 'site-packages')));
  if (found.length !== 1) {
    throw new ToolFailure(
      'execution',
      'MISCONFIGURED',
      `The project's Python environment has ${found.length === 0 ? 'no' : 'more than one'} lib/*/site-packages folder: run \`arium install\``,
      { details: { runner: 'py-runner', environment: 'broken' } },
    );
  }
  return `lib/${found[0]}/site-packages`;
}
