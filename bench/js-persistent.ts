import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine } from '../src/index.js';
import { inSandboxCalls } from './js-in-sandbox.js';
import { median, percentile } from './stats.js';

/**
 * A trivial JS tool with a persistent context against the same tool in a fresh context per call
 * (`"context": "persistent"`, runners/js/worker/persistent.mjs): warm calls in the sandbox alone
 * (bench/js-in-sandbox.ts: from the call message to the done message, no IPC) and through the whole
 * engine, each side interleaved with the other in rounds, medians. Part of the `js` suite.
 */

const ROUNDS = 10;
const PER_ROUND = 200;
const CODE = 'export default async function run(input) { return { n: input.n }; }\n';

const ms = (value: number) => Math.round(value * 1000) / 1000;

export async function benchPersistent(): Promise<Record<string, unknown>> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-persistent-'));
  const tools = join(workspace, 'p', 'tools');
  mkdirSync(tools, { recursive: true });
  for (const [name, context] of [
    ['fresh', 'fresh'],
    ['kept', 'persistent'],
  ] as const) {
    writeFileSync(join(tools, `${name}.js`), CODE);
    writeFileSync(
      join(tools, `${name}.json`),
      JSON.stringify({
        id: `b.${name}`,
        description: name,
        runner: 'js-runner',
        entry: `${name}.js`,
        context,
        schema: { type: 'object' },
        permissions: ['exec.js'],
      }),
    );
  }
  try {
    const root = realpathSync(tools);
    const sandbox = await inSandboxCalls(
      [
        { id: 'b.fresh', entry: join(root, 'fresh.js'), root, persistent: false },
        { id: 'b.kept', entry: join(root, 'kept.js'), root, persistent: true },
      ],
      ROUNDS,
      PER_ROUND,
      1_000,
    );
    const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false, warmUp: false });
    const e2e: Record<string, number[]> = { 'b.fresh': [], 'b.kept': [] };
    try {
      for (let i = 0; i < 1_000; i++) for (const id of Object.keys(e2e)) await engine.call(id, { n: i });
      for (let round = 0; round < ROUNDS; round++) {
        for (const id of Object.keys(e2e)) {
          for (let i = 0; i < PER_ROUND; i++) {
            const t0 = performance.now();
            const r = await engine.call(id, { n: i });
            (e2e[id] as number[]).push(performance.now() - t0);
            if (!r.ok || (r.data as { n: number }).n !== i) throw new Error(`${id} answered wrongly: ${JSON.stringify(r.ok ? r.data : r.error)}`);
          }
        }
      }
    } finally {
      await engine.close();
    }
    const figure = (times: number[]) => ({ median_ms: ms(median(times)), p90_ms: ms(percentile(times, 0.9)) });
    const inSandbox = { fresh: figure(sandbox['b.fresh'] as number[]), persistent: figure(sandbox['b.kept'] as number[]) };
    const endToEnd = { fresh: figure(e2e['b.fresh'] as number[]), persistent: figure(e2e['b.kept'] as number[]) };
    return {
      in_sandbox: inSandbox,
      end_to_end: endToEnd,
      ratio_persistent_to_fresh_in_sandbox: Math.round((inSandbox.persistent.median_ms / inSandbox.fresh.median_ms) * 100) / 100,
      ratio_persistent_to_fresh_end_to_end: Math.round((endToEnd.persistent.median_ms / endToEnd.fresh.median_ms) * 100) / 100,
      rounds: ROUNDS,
      calls_per_round: PER_ROUND,
    };
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
}
