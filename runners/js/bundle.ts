import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, realpathSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { basename, dirname, extname, isAbsolute, join, relative, sep } from 'node:path';
import type { BuildResult, Plugin } from 'esbuild';
import type { CodeProblem } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { jsPackagesDir, jsPackagesStatus } from './packages.js';
import { scanTool } from './syntax.js';

/**
 * A JS tool that imports npm packages runs as one module: the tool's files and the packages they use,
 * bundled by esbuild (ESM, no Node built-ins) from the project's installed packages
 * (`<project>/.arium/js-packages`, see packages.ts). Bundles are kept in `<project>/.arium/js-bundles/`
 * under the hash of what went into them, with an index per tool: a warm call checks a few file stamps,
 * and the first call after a restart hashes the tool's own files and reuses the bundle. A tool that
 * imports no package is loaded from its files as before, with no bundler involved.
 */

export const BUNDLES_FOLDER = 'js-bundles';
/** A bundle is one module: the sandbox's cap for a module's size (runners/js/worker/loader.mjs). */
export const MAX_BUNDLE_BYTES = 8 * 1024 * 1024;

export interface BundleRef {
  /** The bundle file, loaded as the tool's entry. */
  entry: string;
  /** The folder holding it (the loader keeps imports inside it; a bundle imports nothing). */
  root: string;
  bytes: number;
  /** Set when this request built the bundle: how long esbuild took. */
  built_ms?: number;
}

export type BundleOutcome = { ref: BundleRef } | { problem: CodeProblem };

interface Known {
  /** Files the stamps of which say whether the outcome still stands. */
  watched: Array<{ path: string; stamp: string }>;
  /** null: the tool imports no package. */
  outcome: BundleOutcome | null;
}

interface DiskIndex {
  key: string;
  /** The tool folder's files that went in, with their content hashes. */
  inputs: Record<string, string>;
  bundle: string;
}

type Esbuild = typeof import('esbuild');
let esbuild: Esbuild | null = null;

function stamp(path: string): string {
  try {
    const st = statSync(path);
    return `${st.mtimeMs}:${st.size}:${st.ino}`;
  } catch {
    return 'missing';
  }
}

const sha256 = (bytes: Uint8Array | string) => createHash('sha256').update(bytes).digest('hex');

const inside = (root: string, path: string) => {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
};

/** How a file is named in an import chain: a package by its name, a tool file by its path under tools/. */
function chainName(path: string, toolsDir: string): string {
  const at = path.lastIndexOf(`${sep}node_modules${sep}`);
  if (at === -1) return `tools/${relative(toolsDir, path).split(sep).join('/')}`;
  const parts = path.slice(at + 14).split(sep);
  return parts[0]?.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] as string);
}

export class Bundler {
  readonly #known = new Map<string, Known>();
  /** Builds under way, by entry: concurrent first calls wait for one build. */
  readonly #building = new Map<string, Promise<BundleOutcome | null>>();
  /**
   * How long each build no call has reported yet took, by entry: the first call after a build reports
   * it in `meta.bundle.built_ms`, whether the build was made for a call, the load-time check or warm-up.
   */
  readonly #unreported = new Map<string, number>();

  /** The time of the last build of `tool`'s bundle if no call has reported it yet; it is reported once. */
  takeBuildTime(tool: Tool): number | undefined {
    if (!tool.entryPath) return undefined;
    const ms = this.#unreported.get(tool.entryPath);
    this.#unreported.delete(tool.entryPath);
    return ms;
  }

  /**
   * The bundle a tool runs as, built if needed; null when the tool imports no package (it is loaded
   * from its files). A problem (a package not installed, a Node built-in somewhere in the chain, a
   * bundle over the cap) is a load problem: the registry shows it and a call fails with it.
   */
  async outcome(tool: Tool): Promise<BundleOutcome | null> {
    const entry = tool.entryPath;
    const toolsDir = tool.toolsDir;
    if (!entry || !toolsDir) return null;
    const current = this.current(tool);
    if (current !== undefined) return current;
    const pending = this.#building.get(entry);
    if (pending) return pending;
    const promise = this.#resolve(entry, toolsDir).finally(() => this.#building.delete(entry));
    this.#building.set(entry, promise);
    return promise;
  }

  /**
   * What `outcome` would answer at once, without waiting: the outcome found before, while none of the
   * files it depends on has changed (a stat each); undefined when it must be worked out again.
   */
  current(tool: Tool): BundleOutcome | null | undefined {
    if (!tool.entryPath || !tool.toolsDir) return null;
    const known = this.#known.get(tool.entryPath);
    return known?.watched.every((w) => stamp(w.path) === w.stamp) ? known.outcome : undefined;
  }

  forget(tool: Tool): void {
    if (tool.entryPath) {
      this.#known.delete(tool.entryPath);
      this.#unreported.delete(tool.entryPath);
    }
  }

  async #resolve(entry: string, toolsDir: string): Promise<BundleOutcome | null> {
    const scan = await scanTool(entry, toolsDir);
    const projectDir = dirname(toolsDir);
    const stateDir = join(projectDir, '.arium');
    const pinFiles = [join(projectDir, 'package.json'), join(projectDir, 'package-lock.json'), join(jsPackagesDir(stateDir), 'arium-install.json')];
    if (scan.problem || scan.packages.length === 0) {
      // Not a bundled tool (or one the syntax check reports): looked at again when one of its files changes.
      this.#known.set(entry, { watched: scan.files.map((path) => ({ path, stamp: stamp(path) })), outcome: null });
      return null;
    }
    const status = jsPackagesStatus(projectDir, stateDir);
    const shownEntry = `tools/${relative(toolsDir, entry).split(sep).join('/')}`;
    if (status.state !== 'ready') {
      const why =
        status.state === 'unpinned'
          ? `list ${scan.packages.map((p) => `"${p}"`).join(', ')} in the project's package.json (next to tools/), then run \`arium install\``
          : status.detail;
      const problem = { file: relative(toolsDir, entry), line: 1, column: 1, message: `${shownEntry} imports ${scan.packages.join(', ')}: ${why}` };
      return this.#remember(entry, toolsDir, [entry], pinFiles, { problem });
    }
    const bundlesDir = join(stateDir, BUNDLES_FOLDER);
    const indexPath = join(bundlesDir, `${sha256(entry).slice(0, 24)}.json`);
    const key = status.stamp as string;
    // After a restart: the bundle built before stands if the tool's files have the same contents.
    try {
      const index = JSON.parse(readFileSync(indexPath, 'utf8')) as DiskIndex;
      const same = index.key === key && Object.entries(index.inputs).every(([path, hash]) => sha256(readFileSync(path)) === hash);
      if (same) {
        const bytes = statSync(index.bundle).size;
        return this.#remember(entry, toolsDir, Object.keys(index.inputs), pinFiles, {
          ref: { entry: index.bundle, root: dirname(index.bundle), bytes },
        });
      }
    } catch {}
    return this.#build(entry, toolsDir, { bundlesDir, indexPath, key, modules: join(jsPackagesDir(stateDir), 'node_modules'), pinFiles });
  }

  async #build(
    entry: string,
    toolsDir: string,
    at: { bundlesDir: string; indexPath: string; key: string; modules: string; pinFiles: string[] },
  ): Promise<BundleOutcome> {
    esbuild ??= createRequire(import.meta.url)('esbuild') as Esbuild;
    const started = performance.now();
    const realTools = realpathSync(toolsDir);
    const realModules = realpathSync(at.modules);
    /** Who imported each resolved file first: the chain shown for a built-in. */
    const parents = new Map<string, string>();
    const GUARD = Symbol('resolved by the guard');
    const chain = (from: string, last: string) => {
      const names = [last];
      const seen = new Set<string>();
      for (let file: string | undefined = from; file && !seen.has(file); file = parents.get(file)) {
        seen.add(file);
        const name = chainName(file, realTools);
        if (names[0] !== name) names.unshift(name);
      }
      return names.join(' → ');
    };
    const guard: Plugin = {
      name: 'arium-sandbox-imports',
      setup(build) {
        build.onResolve({ filter: /.*/ }, async (args) => {
          if (args.pluginData === GUARD || args.kind === 'entry-point') return undefined;
          const spec = args.path;
          if (isBuiltin(spec) || spec.startsWith('node:')) {
            return {
              errors: [
                {
                  text: `${chain(args.importer, spec)}: "${spec}" is a Node built-in, which the sandbox does not have; a package that needs it cannot run in a JS tool`,
                },
              ],
            };
          }
          const fromTool = inside(realTools, args.importer) && !inside(realModules, args.importer);
          const bare = !spec.startsWith('.') && !spec.startsWith('/');
          // A tool's packages come from the project's installation, never from folders above it.
          const resolveDir = fromTool && bare ? realModules : args.resolveDir;
          const found = await build.resolve(spec, { kind: args.kind, resolveDir, importer: args.importer, pluginData: GUARD });
          if (found.errors.length > 0) {
            return { errors: [{ text: `${chain(args.importer, spec)}: "${spec}" could not be found in the project's installed packages` }] };
          }
          if (found.external || found.namespace !== 'file') return found;
          const real = realpathSync(found.path);
          if (!inside(realTools, real) && !inside(realModules, real)) {
            return { errors: [{ text: `${chain(args.importer, spec)}: "${spec}" leads outside the tools folder and the project's packages` }] };
          }
          if (!parents.has(real)) parents.set(real, args.importer);
          return { path: real, sideEffects: found.sideEffects };
        });
      },
    };
    let result: BuildResult<{ write: false; metafile: true }>;
    try {
      result = await esbuild.build({
        entryPoints: [entry],
        absWorkingDir: realTools,
        bundle: true,
        write: false,
        metafile: true,
        format: 'esm',
        platform: 'neutral',
        target: 'es2022',
        // Every call evaluates the bundle in a fresh context: less code is less to load each time.
        minify: true,
        mainFields: ['module', 'main'],
        conditions: ['import', 'module', 'default'],
        resolveExtensions: ['.ts', '.mts', '.js', '.mjs', '.cjs', '.json'],
        define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
        logLevel: 'silent',
        plugins: [guard],
      });
    } catch (error) {
      const failure = error as { errors?: Array<{ text: string; location?: { file: string; line: number; column: number } | null }> };
      const first = failure.errors?.[0];
      // A place in the tool's own files is shown; one inside a package is named by the chain instead.
      const where = first?.location && !first.location.file.includes('node_modules') ? first.location : null;
      const problem = {
        file: where ? where.file : relative(toolsDir, entry),
        line: where?.line ?? 1,
        column: (where?.column ?? 0) + 1,
        message: first?.text ?? String((error as Error).message ?? error),
      };
      return this.#remember(entry, toolsDir, this.#toolFiles(realTools, parents, entry), at.pinFiles, { problem });
    }
    const [output] = result.outputFiles;
    const text = output?.contents ?? new Uint8Array();
    const toolInputs = Object.keys(result.metafile.inputs)
      .map((input) => join(realTools, input))
      .filter((path) => inside(realTools, path) && !inside(realModules, path));
    if (text.length > MAX_BUNDLE_BYTES) {
      const problem = {
        file: relative(toolsDir, entry),
        line: 1,
        column: 1,
        message: `the tool and its packages bundle to ${text.length} bytes, over the cap of ${MAX_BUNDLE_BYTES} bytes for a JS tool's code`,
      };
      return this.#remember(entry, toolsDir, toolInputs, at.pinFiles, { problem });
    }
    const digest = sha256(text);
    const dir = join(at.bundlesDir, digest.slice(0, 24));
    const name = `${basename(entry, extname(entry))}.mjs`;
    const bundle = join(dir, name);
    mkdirSync(dir, { recursive: true });
    // Written aside and renamed: another engine reading the same bundle never sees half of it.
    const aside = `${bundle}.tmp-${process.pid}`;
    writeFileSync(aside, text);
    renameSync(aside, bundle);
    const index: DiskIndex = { key: at.key, inputs: Object.fromEntries(toolInputs.map((path) => [path, sha256(readFileSync(path))])), bundle };
    writeFileSync(`${at.indexPath}.tmp-${process.pid}`, JSON.stringify(index));
    renameSync(`${at.indexPath}.tmp-${process.pid}`, at.indexPath);
    const builtMs = Math.round((performance.now() - started) * 10) / 10;
    this.#unreported.set(entry, builtMs);
    return this.#remember(entry, toolsDir, toolInputs, at.pinFiles, { ref: { entry: bundle, root: dir, bytes: text.length, built_ms: builtMs } });
  }

  /** The tool's own files a failed build read (the entry at least). */
  #toolFiles(realTools: string, parents: Map<string, string>, entry: string): string[] {
    return [entry, ...[...parents.keys()].filter((path) => inside(realTools, path) && !path.includes(`${sep}node_modules${sep}`))];
  }

  #remember(entry: string, _toolsDir: string, files: string[], pinFiles: string[], outcome: BundleOutcome): BundleOutcome {
    const watched = [...new Set([...files, ...pinFiles])].map((path) => ({ path, stamp: stamp(path) }));
    // Only the first request after a build reports its time.
    const kept: BundleOutcome = 'ref' in outcome ? { ref: { entry: outcome.ref.entry, root: outcome.ref.root, bytes: outcome.ref.bytes } } : outcome;
    this.#known.set(entry, { watched, outcome: kept });
    return outcome;
  }
}
