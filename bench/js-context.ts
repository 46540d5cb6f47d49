import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isolatedVmDir } from '../runners/js/locate.js';
import { median } from './stats.js';

/**
 * What one fresh context costs the JS sandbox before any tool code runs, and what a V8 startup snapshot
 * of the setup code would leave of it. Every call gets a context where nothing but the setup script
 * (runners/js/worker/setup-script.mjs: memory-guard.js, values.js and prelude.js) has run; the pool makes
 * it ahead of the call, but under load that is the call's CPU all the same. Sides, each making contexts
 * one after another on one isolate, in rounds that alternate their order:
 *
 * - `empty`: `createContext()` alone, the floor of any fresh-context design;
 * - `setup script`: what the pool does now (pool.mjs #newContext without linking): `createContext()`,
 *   the three host globals set, the setup script run from its code cache;
 * - `snapshot + install`: an isolate made from a startup snapshot in which memory-guard.js, values.js
 *   and prelude.js were evaluated (their functions made, nothing installed), so a new context starts
 *   with them: `createContext()`, the three globals, and a short script calling `install` with them;
 * - `snapshot, nothing to run`: `createContext()` on that isolate, the floor if `install` itself
 *   were in the snapshot too (its host callbacks cannot be: a snapshot holds no host references).
 *
 * The snapshot is made from the project's own setup code, never from tool code (isolated-vm's README
 * warns against making snapshots of code that is not trusted). Each context of the setup and snapshot
 * sides is checked to answer the prelude's state query (0: no tool started) before it is released.
 * Figures: wall time and this process's CPU (isolate threads included) per context.
 */

interface Reference {
  applySync(self: undefined, args: unknown[], options?: object): unknown;
  release(): void;
}
interface Context {
  global: { setSync(name: string, value: unknown): void };
  evalSync(code: string): unknown;
  release(): void;
}
interface Script {
  run(context: Context, options: { reference: true }): Promise<Reference>;
  cachedData?: unknown;
}
interface Isolate {
  createContext(): Promise<Context>;
  compileScriptSync(code: string, options?: object): Script;
  dispose(): void;
}
interface Ivm {
  Isolate: (new (options: {
    memoryLimit: number;
    snapshot?: unknown;
  }) => Isolate) & {
    createSnapshot(scripts: Array<{ code: string; filename?: string }>): unknown;
  };
  Callback: new (fn: (...args: unknown[]) => void, options: object) => unknown;
}

const WORKER = new URL('../../runners/js/worker/', import.meta.url);
const GLOBALS = { send: '__ariumSend', done: '__ariumDone', config: '__ariumConfig' };
const KIT = '__ariumKit';

function part(name: string): string {
  return readFileSync(new URL(name, WORKER), 'utf8').trimEnd().replace(/;$/, '');
}

/** The snapshot's script: the setup code's functions made and kept on a global for install.js below. */
function snapshotSource(): string {
  return [
    '(function () {',
    "'use strict';",
    `const guardMemory = ${part('memory-guard.js')};`,
    `const values = ${part('values.js')};`,
    `const install = (${part('prelude.js')})(values);`,
    `Object.defineProperty(globalThis, '${KIT}', { value: { install, guardMemory }, configurable: true });`,
    '})();',
  ].join('\n');
}

/** Run in each context of a snapshot isolate: what the setup script's last lines do, with the kit taken off the global first. */
function installSource(): string {
  return [
    '(function () {',
    "'use strict';",
    'const G = globalThis;',
    `const kit = G.${KIT};`,
    `const host = [G.${GLOBALS.send}, G.${GLOBALS.done}, G.${GLOBALS.config}];`,
    `delete G.${KIT}; delete G.${GLOBALS.send}; delete G.${GLOBALS.done}; delete G.${GLOBALS.config};`,
    "const config = host[2].split(',').map(Number);",
    'return kit.install(host[0], host[1], config[0], config[1], config[2], kit.guardMemory);',
    '})();',
  ].join('\n');
}

async function setupSourceNow(): Promise<string> {
  const { setupSource } = (await import(new URL('setup-script.mjs', WORKER).href)) as { setupSource(): string };
  return setupSource();
}

type Side = () => Promise<void>;

/**
 * Whether this isolated-vm restores a snapshot's objects intact: with isolated-vm 5 on Node 20 an object
 * made in the snapshot comes back with garbage property names (measured here: `{ f }` read back with
 * one key, "E" or "8", and no function), while isolated-vm 6 on Node 24 restores it. Null when intact.
 */
async function snapshotProblem(ivm: Ivm): Promise<string | null> {
  const snapshot = ivm.Isolate.createSnapshot([{ code: "globalThis.probe = { f: () => 'ok', n: [1, 2, 3] };" }]);
  const isolate = new ivm.Isolate({ memoryLimit: 32, snapshot });
  try {
    const context = await isolate.createContext();
    const seen = context.evalSync(
      "typeof probe === 'object' && typeof probe.f === 'function' ? probe.f() + ':' + probe.n.join(',') : 'keys ' + JSON.stringify(Object.getOwnPropertyNames(probe))",
    );
    context.release();
    return seen === 'ok:1,2,3' ? null : `an object made in the snapshot came back corrupt (${String(seen)})`;
  } catch (error) {
    return `a snapshot could not be restored (${(error as Error).message})`;
  } finally {
    isolate.dispose();
  }
}

export async function benchJsContext(flags: Map<string, string> = new Map()): Promise<Record<string, unknown>> {
  const ivm = createRequire(import.meta.url)(isolatedVmDir() ?? 'isolated-vm') as Ivm;
  const perRound = Number(flags.get('contexts')) || 400;
  const rounds = Number(flags.get('rounds')) || 5;
  const send = new ivm.Callback(() => {}, { ignored: true });
  const done = new ivm.Callback(() => {}, { ignored: true });
  const setHost = (context: Context, serial: number) => {
    context.global.setSync(GLOBALS.send, send);
    context.global.setSync(GLOBALS.done, done);
    context.global.setSync(GLOBALS.config, `64,262144,${serial}`);
  };
  const check = (entry: Reference, side: string) => {
    const state = entry.applySync(undefined, [2], { timeout: 1000 });
    if (state !== 0) throw new Error(`${side}: the prelude answered ${String(state)} to its state query, not 0`);
  };

  const problem = await snapshotProblem(ivm);
  const plain = new ivm.Isolate({ memoryLimit: 64 });
  const setupCode = await setupSourceNow();
  const first = plain.compileScriptSync(setupCode, { filename: 'arium:sandbox', produceCachedData: true });
  const setup = plain.compileScriptSync(setupCode, { filename: 'arium:sandbox', cachedData: first.cachedData });
  const snapshotStarted = performance.now();
  const snapshot = problem === null ? ivm.Isolate.createSnapshot([{ code: snapshotSource(), filename: 'arium:sandbox' }]) : undefined;
  const snapshotMs = performance.now() - snapshotStarted;
  // Where snapshots come back corrupt its sides are not measured (the isolates are made, unused).
  const snapped = new ivm.Isolate({ memoryLimit: 64, snapshot });
  const installFirst = snapped.compileScriptSync(installSource(), { filename: 'arium:sandbox', produceCachedData: true });
  const install = snapped.compileScriptSync(installSource(), { filename: 'arium:sandbox', cachedData: installFirst.cachedData });
  const bare = new ivm.Isolate({ memoryLimit: 64, snapshot });

  let serial = 0;
  const sides: Array<[string, Side]> = [
    [
      'empty',
      async () => {
        (await plain.createContext()).release();
      },
    ],
    [
      'setup script',
      async () => {
        const context = await plain.createContext();
        setHost(context, ++serial);
        const entry = await setup.run(context, { reference: true });
        if (serial % 50 === 0) check(entry, 'setup script');
        entry.release();
        context.release();
      },
    ],
    [
      'snapshot + install',
      async () => {
        const context = await snapped.createContext();
        setHost(context, ++serial);
        const entry = await install.run(context, { reference: true });
        if (serial % 50 === 0) check(entry, 'snapshot + install');
        entry.release();
        context.release();
      },
    ],
    [
      'snapshot, nothing to run',
      async () => {
        (await bare.createContext()).release();
      },
    ],
  ];
  if (problem !== null) sides.splice(2);
  const samples = new Map<string, { wall: number[]; cpu: number[] }>(sides.map(([name]) => [name, { wall: [], cpu: [] }]));
  try {
    for (let r = -1; r < rounds; r++) {
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const [name, side] of order) {
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < perRound; i++) await side();
        const wall = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        if (r < 0) continue; // warm-up: code caches, V8's own
        const s = samples.get(name) as { wall: number[]; cpu: number[] };
        s.wall.push((wall * 1000) / perRound);
        s.cpu.push((cpu.user + cpu.system) / perRound);
      }
    }
  } finally {
    for (const isolate of [plain, snapped, bare]) isolate.dispose();
  }
  const out: Record<string, unknown> = {};
  const emptyCpu = median((samples.get('empty') as { cpu: number[] }).cpu);
  for (const [name] of sides) {
    const s = samples.get(name) as { wall: number[]; cpu: number[] };
    const cpu = median(s.cpu);
    out[name] = {
      wall_us: Math.round(median(s.wall)),
      cpu_us: Math.round(cpu),
      cpu_over_empty_us: Math.round(cpu - emptyCpu),
    };
  }
  return {
    what: 'making one fresh context, one after another on one isolate (median of rounds)',
    contexts_per_round: perRound,
    rounds,
    ...(problem === null ? { snapshot_made_ms: Math.round(snapshotMs) } : { snapshot: `not measured: ${problem}` }),
    ...out,
  };
}
