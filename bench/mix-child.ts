import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Engine } from '../src/index.js';
import { IN_FLIGHT, type RoundReply, type RoundRequest } from './mix.js';
import { threadCpu } from './stats.js';

/**
 * One build's engine for bench/mix.ts, in a process of its own: `mix-child.js <dist> <fixtures>` imports
 * `<dist>/src/index.js` (this checkout's build or another's), opens a durable project on disk with the
 * tools of `<fixtures>` (fixtures/mix), and answers the parent's messages: `{ pattern, calls, round }`
 * runs one round and replies `{ ms, times, runs, main_cpu_ms }`; `{ close: true }` closes the engine and exits.
 *
 * A round keeps `IN_FLIGHT` calls going until `calls` have been made; call i is of kind
 * `pattern[i % pattern.length]`: `w` an `fs.write` to one of 100 paths, `j` the JS tool and `p` the
 * Python tool, each writing one of 50 paths through `ctx.vfs`. Nothing reads, so no call conflicts.
 */
const KINDS: Record<string, { tool: string; folder: string; paths: number }> = {
  w: { tool: 'fs.write', folder: '/mix/w', paths: 100 },
  j: { tool: 'mix.write-js', folder: '/mix/js', paths: 50 },
  p: { tool: 'mix.write-py', folder: '/mix/py', paths: 50 },
};

function mainCpuMs(): number {
  return threadCpu(process.pid).get(String(process.pid))?.ms ?? Number.NaN;
}

async function round(engine: Engine, { pattern, calls, round: tag }: RoundRequest): Promise<RoundReply> {
  const times = new Array<number>(calls);
  const written = new Set<string>();
  let next = 0;
  let runs = 0;
  const caller = async () => {
    while (next < calls) {
      const i = next++;
      const kind = KINDS[pattern[i % pattern.length] as string];
      if (!kind) throw new Error(`unknown call kind in pattern ${pattern}`);
      const path = `${kind.folder}/${i % kind.paths}.txt`;
      written.add(path);
      const t0 = performance.now();
      const result = await engine.call(kind.tool, { path, content: `${tag} call ${i}\n` });
      times[i] = performance.now() - t0;
      if (!result.ok) throw new Error(`bench call ${kind.tool} failed: ${result.error.message}`);
      // A run lost to another call's commit is made again (builds before serializable calls never do).
      runs += (result.meta as { attempts?: number }).attempts ?? 1;
    }
  };
  const cpu0 = mainCpuMs();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, caller));
  const ms = performance.now() - t0;
  const mainCpu = mainCpuMs() - cpu0;
  // Every path written in this round holds one of this round's contents.
  for (const path of written) {
    const text = engine.vfs.read(path).toString();
    if (!text.startsWith(`${tag} call `)) throw new Error(`${path} holds ${JSON.stringify(text)}, not a write of round ${tag}`);
  }
  return { ms, times, runs, main_cpu_ms: mainCpu };
}

async function main(): Promise<void> {
  const [dist, fixtures] = process.argv.slice(2) as [string, string];
  const { createEngine } = (await import(pathToFileURL(join(dist, 'src', 'index.js')).href)) as typeof import('../src/index.js');
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-mix-'));
  cpSync(fixtures, join(workspace, 'mix'), { recursive: true });
  const engine = await createEngine({ workspace, project: 'mix', watch: false, persist: true });
  const send = (message: unknown) => new Promise<void>((resolve) => process.send?.(message, () => resolve()));
  process.on('message', (message: RoundRequest | { close: true }) => {
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
  await send({ ready: true });
}

await main();
