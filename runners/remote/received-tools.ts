import { basename, dirname, join } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import { type Permission, parsePermission } from '../../src/permissions.js';
import type { Tool, ToolSpec } from '../../src/tool.js';
import { safePath, type ToolCache, type WorkerPython } from './cache.js';
import type { BundleFile, CallMessage, TreeEntry } from './wire.js';

/** A request to the engine on the call's inbox (the worker's, which may send and receive in parts). */
export type Ask = (message: Record<string, unknown>) => Promise<Record<string, unknown>>;

/** Tools kept ready, by definition and tree: a warm call looks its tool up and touches no file. */
const MAX_TOOLS = 512;
const SHA = /^[0-9a-f]{64}$/;
/** File requests one call has in flight at once. */
const FETCHES_AT_ONCE = 8;
/** A tag as interpreterTag makes it: `cpython-3.11-linux-x86_64-glibc`. */
const PYTHON_TAG = /^[A-Za-z0-9._+-]{1,120}$/;

/**
 * The tools a worker was sent, as `Tool`s its local runners take: the definition from the call, the
 * files from the cache, fetched from the engine (tree, then each file it lacks by sha256) the first
 * time a version is seen; with them what the call ships besides (shipment.ts): a JS tool's bundle, run
 * in place of its entry, and a Python project's environment, laid out as a venv of this worker's
 * interpreter. Calls that need the same files at once wait for one fetch of each.
 */
export class ReceivedTools {
  readonly #cache: ToolCache;
  readonly #python: () => Promise<WorkerPython>;
  readonly #tools = new Map<string, Tool>();
  /** The cache folders each tool runs from: its tools version, its bundle, its environment. */
  readonly #folders = new WeakMap<Tool, string[]>();
  /** Work under way, by what it makes (`tool:…`, `blob:<sha>`): concurrent calls share it. */
  readonly #pending = new Map<string, Promise<unknown>>();

  constructor(cache: ToolCache, python: () => Promise<WorkerPython>) {
    this.#cache = cache;
    this.#python = python;
    // A tool whose folder the cache took away is made again (and its files fetched) on its next call.
    cache.onEvict = (dir) => {
      for (const [key, tool] of this.#tools) if (this.#folders.get(tool)?.includes(dir)) this.#tools.delete(key);
    };
  }

  /** Whether some call is fetching or laying out files now (the cache is swept only when none is). */
  get busy(): boolean {
    return this.#pending.size > 0;
  }

  /** Holds the folders `tool` runs from while a call runs it: the returned function lets them go. */
  hold(tool: Tool): () => void {
    return this.#cache.acquire(this.#folders.get(tool) ?? []);
  }

  async tool(call: CallMessage, ask: Ask): Promise<Tool> {
    const { bundle, env } = call.tool;
    // The definition's own hash names it; a worker that was sent a spec not matching it only fools itself.
    const key = `${String(call.tool.hash)}:${call.tool.tree}:${bundle?.sha ?? ''}:${env ? `${env.hash}:${env.python}` : ''}`;
    const known = this.#tools.get(key);
    if (known) {
      // Now, before anything else runs: a sweep leaves folders used in the last minute alone.
      this.#cache.touch(this.#folders.get(known) ?? []);
      return known;
    }
    // The tree hash names a folder of the cache: a path in its place would lead out of it.
    if (!SHA.test(String(call.tool.tree))) throw new ToolFailure('transport', 'UNAVAILABLE', 'The engine sent an unusable tree hash');
    if (call.tool.entry !== null && !safePath(call.tool.entry)) {
      throw new ToolFailure('transport', 'UNAVAILABLE', `The engine sent an unusable entry path: ${JSON.stringify(call.tool.entry).slice(0, 200)}`);
    }
    const python = env ? await this.#matching(call, env.python) : null;
    return this.#shared(`tool:${key}`, ask, async (own) => {
      if (!this.#cache.hasTree(call.tool.tree)) {
        const entries = await this.#entries(own, 'tree');
        await this.#blobs(entries, own);
        this.#cache.putTree(call.tool.tree, entries);
      }
      const bundlePath = bundle ? await this.#bundle(bundle, own) : null;
      let environment: string | undefined;
      if (env && python) {
        if (!SHA.test(env.hash)) throw new ToolFailure('transport', 'UNAVAILABLE', 'The engine sent an unusable environment hash');
        environment = this.#cache.hasEnv(env.hash, python) ?? (await this.#env(env.hash, python, own));
      }
      const tool = this.#make(call, key, bundlePath, environment);
      const folders = [this.#cache.treeDir(call.tool.tree), ...(bundlePath ? [dirname(bundlePath)] : []), ...(environment ? [environment] : [])];
      this.#folders.set(tool, folders);
      this.#cache.touch(folders);
      if (this.#tools.size >= MAX_TOOLS) this.#tools.delete(this.#tools.keys().next().value as string);
      this.#tools.set(key, tool);
      return tool;
    });
  }

  /** This worker's interpreter, when it is the one the engine's environment was made for; else why not. */
  async #matching(call: CallMessage, wanted: string): Promise<WorkerPython> {
    if (!PYTHON_TAG.test(String(wanted))) throw new ToolFailure('transport', 'UNAVAILABLE', 'The engine sent an unusable interpreter tag');
    const python = await this.#python();
    if (python.tag === wanted) return python;
    // Not retryable: every call of the project fails the same way until the worker gets another
    // interpreter. The worker's executable stays out of the message, as host paths do for callers.
    throw new ToolFailure(
      'execution',
      'MISCONFIGURED',
      `${String((call.tool.spec as { id?: unknown }).id)} needs Python ${wanted}, the interpreter its project's environment was installed for on the engine's machine; this worker runs ${python.tag}. Start the worker with a matching interpreter (arium worker --python <path>), or install the project's environment with the workers' Python`,
      { details: { runner: 'py-runner', environment: 'interpreter-mismatch', engine_python: wanted, worker_python: python.tag } },
    );
  }

  /** Fetches the environment's files (each path checked first) and lays them out as a venv of `python`. */
  async #env(hash: string, python: WorkerPython, ask: Ask): Promise<string> {
    const entries = await this.#entries(ask, 'env');
    for (const [path, sha] of entries) {
      if (!SHA.test(String(sha)) || !safePath(path) || !/^lib\/[^/]+\/site-packages\//.test(path)) {
        throw new ToolFailure(
          'transport',
          'UNAVAILABLE',
          `The engine sent an environment file with an unusable path: ${JSON.stringify(path).slice(0, 200)}`,
        );
      }
    }
    await this.#blobs(entries, ask);
    return this.#cache.putEnv(hash, entries, python);
  }

  /** The blobs of `entries` it lacks, a few requests at a time: an environment can list thousands of files. */
  async #blobs(entries: readonly TreeEntry[], ask: Ask): Promise<void> {
    let next = 0;
    const fetcher = async () => {
      while (next < entries.length) await this.#blob((entries[next++] as TreeEntry)[1], ask);
    };
    await Promise.all(Array.from({ length: Math.min(FETCHES_AT_ONCE, entries.length) }, fetcher));
  }

  async #entries(ask: Ask, kind: 'tree' | 'env'): Promise<TreeEntry[]> {
    const answer = await ask({ t: kind });
    return (Array.isArray(answer.entries) ? answer.entries : []) as TreeEntry[];
  }

  async #bundle(bundle: BundleFile, ask: Ask): Promise<string> {
    const name = String(bundle.name);
    if (!SHA.test(String(bundle.sha)) || !safePath(name) || name.includes('/') || !name.endsWith('.mjs')) {
      throw new ToolFailure('transport', 'UNAVAILABLE', `The engine sent an unusable bundle: ${JSON.stringify(name).slice(0, 200)}`);
    }
    await this.#blob(bundle.sha, ask);
    return this.#cache.putBundle(bundle.sha, name);
  }

  #blob(sha: string, ask: Ask): Promise<void> {
    if (this.#cache.hasBlob(sha)) return Promise.resolve();
    return this.#shared(`blob:${sha}`, ask, async (own) => {
      if (!this.#cache.hasBlob(sha)) this.#cache.putBlob(sha, await fetchBlob(own, sha));
    });
  }

  /**
   * Runs `work` once for every call that needs it at the same time. Each asks its own engine's call
   * inbox: when the call whose inbox was used ends first, the others do the work again with theirs.
   */
  async #shared<T>(key: string, ask: Ask, work: (ask: Ask) => Promise<T>): Promise<T> {
    const pending = this.#pending.get(key) as Promise<T> | undefined;
    if (pending) {
      try {
        return await pending;
      } catch {
        // Fetched through another call that failed: done again below with this call's inbox.
      }
    }
    const mine = work(ask);
    this.#pending.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.#pending.get(key) === mine) this.#pending.delete(key);
    }
  }

  #make(call: CallMessage, key: string, bundlePath: string | null, environment: string | undefined): Tool {
    const spec = call.tool.spec as unknown as ToolSpec;
    const declared: Permission[] = [];
    for (const text of Array.isArray(spec.permissions) ? spec.permissions : []) {
      try {
        declared.push(parsePermission(text));
      } catch {
        // The engine checked the definition; a permission it knows and this version does not is not one to act on.
      }
    }
    return {
      spec,
      source: String(call.tool.source),
      // A bundled tool runs its bundle: one module that imports nothing, loaded as any tool file.
      entryPath: bundlePath ?? (call.tool.entry ? join(this.#cache.treeDir(call.tool.tree), call.tool.entry) : null),
      // One tools folder for every version: the runners' processes (and the JS sandbox's read
      // permissions) are made per tools folder, so a version (or a bundle) is a folder below it.
      toolsDir: this.#cache.toolsDir,
      root: basename(bundlePath ? dirname(bundlePath) : this.#cache.treeDir(call.tool.tree)),
      declared,
      // The engine validated the input and checks the output; the runners never call these.
      validateInput: (() => null) as unknown as Tool['validateInput'],
      validateOutput: null,
      hash: key,
      ...(environment ? { environment } : {}),
    };
  }
}

async function fetchBlob(ask: Ask, sha: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let got = 0;
  for (;;) {
    const answer = await ask({ t: 'blob', sha, offset: got });
    if (typeof answer.data !== 'string' || !Number.isSafeInteger(answer.size)) {
      throw new ToolFailure('transport', 'UNAVAILABLE', `The engine could not send a tool file: ${String(answer.error ?? 'no data')}`);
    }
    const part = Buffer.from(answer.data, 'base64');
    parts.push(part);
    got += part.length;
    if (got >= (answer.size as number) || part.length === 0) return Buffer.concat(parts);
  }
}
