import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Engine } from '../src/index.js';
import type { ScaleReply, ScaleRequest } from './scale.js';
import { threadCpu, treeCpu } from './stats.js';

/**
 * One engine for bench/scale.ts, in a process of its own (started under taskset by the parent, so the
 * engine, its sandbox processes and its fork servers all get the cores it names): `scale-child.js
 * <dist> <fixtures>` opens a project with the tools of `<fixtures>` (fixtures/scale) and answers
 * `{ runner, callers, ms }` with how many calls `callers` callers made back to back in `ms`.
 */
const TOOLS = { js: 'scale.sum-js', python: 'scale.sum-py' } as const;
const NUMBERS = Array.from({ length: 100 }, (_, i) => i + 1);

function mainCpuMs(): number {
  return threadCpu(process.pid).get(String(process.pid))?.ms ?? Number.NaN;
}

async function round(engine: Engine, { runner, callers, ms }: ScaleRequest): Promise<ScaleReply> {
  const tool = TOOLS[runner];
  let calls = 0;
  const tree0 = treeCpu(process.pid);
  const cpu0 = mainCpuMs();
  const t0 = performance.now();
  const end = t0 + ms;
  const caller = async () => {
    while (performance.now() < end) {
      const result = await engine.call(tool, { numbers: NUMBERS });
      if (!result.ok) throw new Error(`bench call ${tool} failed: ${result.error.code} ${result.error.message}`);
      if ((result.data as { sum: number }).sum !== 5050) throw new Error(`${tool} answered ${JSON.stringify(result.data)}`);
      calls++;
    }
  };
  await Promise.all(Array.from({ length: callers }, caller));
  const wall = performance.now() - t0;
  const mainMs = mainCpuMs() - cpu0;
  const tree = treeCpu(process.pid);
  const status = (await engine.status()).runners;
  const members =
    runner === 'js'
      ? ((status['js-runner']?.processes as { running?: number } | undefined)?.running ?? 1)
      : ((status['py-runner']?.servers as number | undefined) ?? 1);
  return {
    calls,
    ms: wall,
    main_cpu_ms: mainMs,
    engine_cpu_ms: tree.self - tree0.self,
    members_cpu_ms: tree.below - tree0.below,
    members,
  };
}

async function main(): Promise<void> {
  const [dist, fixtures] = process.argv.slice(2) as [string, string];
  const { createEngine } = (await import(pathToFileURL(join(dist, 'src', 'index.js')).href)) as typeof import('../src/index.js');
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-scale-'));
  cpSync(fixtures, join(workspace, 'scale'), { recursive: true });
  // The engine's own limits on calls at once stay out of the way: the runners' pools are measured.
  const engine = await createEngine({
    workspace,
    project: 'scale',
    watch: false,
    persist: false,
    policy: { concurrency: 1024, tool_concurrency: 1024, queue_length: 4096 },
  });
  const send = (message: unknown) => new Promise<void>((resolve) => process.send?.(message, () => resolve()));
  process.on('message', (message: ScaleRequest | { close: true }) => {
    void (async () => {
      if ('close' in message) {
        await engine.close();
        rmSync(workspace, { recursive: true, force: true });
        process.disconnect();
        return;
      }
      try {
        await send(await round(engine, message));
      } catch (error) {
        await send({ error: (error as Error).stack ?? String(error) });
      }
    })();
  });
  const js = (await engine.status()).runners['js-runner']?.processes as { pinning?: { reason: string } } | undefined;
  await send({ ready: true, cores: availableParallelism(), pinning: js?.pinning?.reason ?? 'unknown' });
}

await main();
