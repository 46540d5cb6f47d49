import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isolatedVmDir } from '../runners/js/locate.js';
import { createEngine, installProject } from '../src/index.js';
import { inSandboxCalls } from './js-in-sandbox.js';
import { median } from './stats.js';

/**
 * JS tools importing npm packages: warm calls of tools that import `ms` (a small CommonJS package),
 * `semver` (a larger CommonJS one), `yaml` (a large ES-module one) and `@sindresorhus/slugify` (called,
 * and imported but not called) against the same tool importing nothing, interleaved in one run; the
 * first call after a change to the tool (its bundle rebuilt). Every call of a fresh-context tool has a
 * context of its own, whose modules the pool evaluates ahead of the call when it can (tools of 16 KB of
 * source or more: worker/pool.mjs).
 * Beside it: the floor of evaluating each bundle in a fresh context (bare isolated-vm: the bundle
 * compiled once with its code cache, then instantiated and evaluated in a new context per iteration);
 * each tool's own work per call in plain Node (its default export called warm), which no sandbox takes
 * off; and the same tools in the sandbox alone with calls 5 ms apart (bench/js-in-sandbox.ts).
 */

const ROUNDS = 8;
const PER_ROUND = 40;
const PACKAGES = { ms: '2.1.3', semver: '7.7.2', yaml: '2.8.1', '@sindresorhus/slugify': '2.2.1' };

const TOOLS: Record<string, string> = {
  none: 'export default async function run(input) { return { n: input.n }; }\n',
  ms: "import ms from 'ms';\nexport default async function run(input) { return { n: input.n, t: ms('2 days') }; }\n",
  semver:
    "import semver from 'semver';\nexport default async function run(input) { return { n: input.n, t: semver.satisfies('1.2.3', '^1.0.0') }; }\n",
  yaml: "import { parse } from 'yaml';\nexport default async function run(input) { return { n: input.n, t: parse('a: 1').a }; }\n",
  slugify:
    "import slugify from '@sindresorhus/slugify';\nexport default async function run(input) { return { n: input.n, t: slugify('Hello World') }; }\n",
  // The same import, the package not called: what importing it costs a call, apart from what its work costs.
  slugify_unused:
    "import slugify from '@sindresorhus/slugify';\nexport default async function run(input) { return { n: input.n, t: typeof slugify }; }\n",
};

/** Warm calls of a bundle's default export in plain Node (no sandbox, one module instance): the package's own work per call, in ms. */
async function plainNodeCall(path: string, count: number): Promise<number> {
  const run = ((await import(pathToFileURL(path).href)) as { default: (input: { n: number }) => Promise<unknown> }).default;
  for (let i = 0; i < 50; i++) await run({ n: i });
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    await run({ n: i });
    times.push(performance.now() - t0);
  }
  return median(times);
}

/** The part of isolated-vm this uses: the package is an optional alias of one line or another (runners/js/locate.ts). */
interface Ivm {
  Isolate: new (options: {
    memoryLimit: number;
  }) => {
    compileModule(
      source: string,
      options: { produceCachedData?: boolean; cachedData?: unknown },
    ): Promise<{
      instantiate(context: { release(): void }, resolve: () => never): Promise<void>;
      evaluate(): Promise<unknown>;
      release(): void;
    }>;
    createContext(): Promise<{ release(): void }>;
    dispose(): void;
  };
}

/** Evaluating a module in a fresh context per iteration, in a bare isolate: ms each. */
async function evaluationFloor(ivm: Ivm, source: string, count: number): Promise<number[]> {
  const isolate = new ivm.Isolate({ memoryLimit: 128 });
  try {
    const first = await isolate.compileModule(source, { produceCachedData: true });
    const cachedData = (first as unknown as { cachedData?: unknown }).cachedData;
    first.release();
    const times: number[] = [];
    for (let i = 0; i < count + 5; i++) {
      const t0 = performance.now();
      const context = await isolate.createContext();
      const module = await isolate.compileModule(source, cachedData ? { cachedData } : {});
      await module.instantiate(context, () => {
        throw new Error('a bundle imports nothing');
      });
      await module.evaluate();
      module.release();
      context.release();
      if (i >= 5) times.push(performance.now() - t0);
    }
    return times;
  } finally {
    isolate.dispose();
  }
}

export async function benchPackages(): Promise<Record<string, unknown>> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-packages-'));
  const tools = join(workspace, 'p', 'tools');
  mkdirSync(tools, { recursive: true });
  writeFileSync(join(workspace, 'p', 'package.json'), JSON.stringify({ name: 'bench-tools', private: true, dependencies: PACKAGES }));
  for (const [name, code] of Object.entries(TOOLS)) {
    writeFileSync(join(tools, `${name}.js`), code);
    writeFileSync(
      join(tools, `${name}.json`),
      JSON.stringify({
        id: `b.${name}`,
        description: name,
        runner: 'js-runner',
        entry: `${name}.js`,
        schema: { type: 'object' },
        permissions: ['exec.js'],
      }),
    );
  }
  try {
    const installed = await installProject({ workspace, project: 'p', offline: true });
    const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false, warmUp: false });
    try {
      const names = Object.keys(TOOLS);
      const bundleBytes: Record<string, number> = {};
      const firstCallMs: Record<string, number> = {};
      const buildMs: Record<string, number> = {};
      for (const name of names) {
        const t0 = performance.now();
        const r = await engine.call(`b.${name}`, { n: 0 });
        firstCallMs[name] = Math.round((performance.now() - t0) * 10) / 10;
        if (!r.ok) throw new Error(`${name}: ${r.error.message}`);
        const bundle = r.meta.bundle as { bytes: number; built_ms?: number } | undefined;
        if (bundle) {
          bundleBytes[name] = bundle.bytes;
          buildMs[name] = bundle.built_ms ?? 0;
        }
      }
      for (let i = 0; i < 200; i++) for (const name of names) await engine.call(`b.${name}`, { n: i });
      const times: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
      for (let round = 0; round < ROUNDS; round++) {
        for (const name of names) {
          for (let i = 0; i < PER_ROUND; i++) {
            const t0 = performance.now();
            const r = await engine.call(`b.${name}`, { n: i });
            (times[name] as number[]).push(performance.now() - t0);
            if (!r.ok || (r.data as { n: number }).n !== i) throw new Error(`${name} answered wrongly`);
          }
        }
      }
      // The first call after the tool's file changed: its bundle is built again.
      writeFileSync(join(tools, 'yaml.js'), `${TOOLS.yaml}// changed\n`);
      const t0 = performance.now();
      const rebuilt = await engine.call('b.yaml', { n: 1 });
      const rebuildCallMs = performance.now() - t0;

      // The floor: each bundle's evaluation in a fresh context, bare isolated-vm, same run.
      const ivm = createRequire(import.meta.url)(isolatedVmDir() ?? 'isolated-vm') as Ivm;
      const floor: Record<string, number> = {};
      const plain: Record<string, number> = {};
      const bundles = join(workspace, 'p', '.arium', 'js-bundles');
      const sources: Record<string, string> = { none: TOOLS.none as string };
      const files: Record<string, string> = { none: join(tools, 'none.js') };
      for (const name of names.filter((n) => n !== 'none')) {
        for (const dir of readdirSync(bundles)) {
          try {
            sources[name] = readFileSync(join(bundles, dir, `${name}.mjs`), 'utf8');
            files[name] = join(bundles, dir, `${name}.mjs`);
          } catch {}
        }
      }
      for (const name of names) floor[name] = Math.round(median(await evaluationFloor(ivm, sources[name] as string, 200)) * 1000) / 1000;
      for (const name of names) plain[name] = Math.round((await plainNodeCall(files[name] as string, 300)) * 1000) / 1000;
      // The same tools in the sandbox alone (no engine, no IPC), calls 5 ms apart: the warm contexts made
      // ahead are ready when a call starts, as between an agent's steps.
      const paced = await inSandboxCalls(
        names.map((name) => {
          const entry = realpathSync(files[name] as string);
          return { id: name, entry, root: dirname(entry), persistent: false };
        }),
        4,
        40,
        40,
        5,
      );
      const pacedMedian = Object.fromEntries(names.map((n) => [n, Math.round(median(paced[n] as number[]) * 1000) / 1000]));

      const ms = (n: number) => Math.round(n * 1000) / 1000;
      const warm = Object.fromEntries(names.map((n) => [n, ms(median(times[n] as number[]))]));
      const none = warm.none as number;
      return {
        install_seconds: installed.js?.seconds ?? null,
        bundle_bytes: bundleBytes,
        bundle_build_ms: buildMs,
        first_call_ms: firstCallMs,
        warm_call_median_ms: warm,
        warm_ratio_to_no_package: Object.fromEntries(names.map((n) => [n, Math.round(((warm[n] as number) / none) * 100) / 100])),
        floor_fresh_context_evaluation_ms: floor,
        floor_added_over_no_package_ms: Object.fromEntries(names.map((n) => [n, ms((floor[n] as number) - (floor.none as number))])),
        call_added_over_no_package_ms: Object.fromEntries(names.map((n) => [n, ms((warm[n] as number) - none)])),
        // The package's own work per call, which no sandbox can take off: its default export in plain Node.
        plain_node_call_ms: plain,
        in_sandbox_5ms_apart_median_ms: pacedMedian,
        in_sandbox_5ms_apart_ratio_to_no_package: Object.fromEntries(
          names.map((n) => [n, Math.round(((pacedMedian[n] as number) / (pacedMedian.none as number)) * 100) / 100]),
        ),
        warm_ratio_without_own_work: Object.fromEntries(
          names.map((n) => [n, Math.round((((warm[n] as number) - ((plain[n] as number) - (plain.none as number))) / none) * 100) / 100]),
        ),
        rebuild_first_call_ms: Math.round(rebuildCallMs * 10) / 10,
        rebuild_bundle_ms: (rebuilt.meta.bundle as { built_ms?: number } | undefined)?.built_ms ?? null,
        rounds: ROUNDS,
        calls_per_round: PER_ROUND,
      };
    } finally {
      await engine.close();
    }
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
}
