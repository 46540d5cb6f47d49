import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isolatedVmDir } from '../runners/js/locate.js';
import { createEngine, installProject } from '../src/index.js';
import { median } from './stats.js';

/**
 * JS tools importing npm packages (issue 19): warm calls of tools that import `ms` (a small CommonJS
 * package), `semver` (a larger CommonJS one) and `yaml` (a large ES-module one) against the same tool
 * importing nothing, interleaved in one run; the first call after a change to the tool (its bundle
 * rebuilt). Every call of a JS tool runs in a fresh context, so the package's code is evaluated again
 * each time: the floor measured beside it is that evaluation alone, in a bare isolated-vm isolate (the
 * bundle compiled once with its code cache, then instantiated and evaluated in a new context per
 * iteration), against an empty module the same way.
 */

const ROUNDS = 8;
const PER_ROUND = 40;
const PACKAGES = { ms: '2.1.3', semver: '7.7.2', yaml: '2.8.1' };

const TOOLS: Record<string, string> = {
  none: 'export default async function run(input) { return { n: input.n }; }\n',
  ms: "import ms from 'ms';\nexport default async function run(input) { return { n: input.n, t: ms('2 days') }; }\n",
  semver:
    "import semver from 'semver';\nexport default async function run(input) { return { n: input.n, t: semver.satisfies('1.2.3', '^1.0.0') }; }\n",
  yaml: "import { parse } from 'yaml';\nexport default async function run(input) { return { n: input.n, t: parse('a: 1').a }; }\n",
};

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
      const bundles = join(workspace, 'p', '.arium', 'js-bundles');
      const sources: Record<string, string> = { none: TOOLS.none as string };
      for (const name of names.filter((n) => n !== 'none')) {
        for (const dir of readdirSync(bundles)) {
          try {
            sources[name] = readFileSync(join(bundles, dir, `${name}.mjs`), 'utf8');
          } catch {}
        }
      }
      for (const name of names) floor[name] = Math.round(median(await evaluationFloor(ivm, sources[name] as string, 200)) * 1000) / 1000;

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
