import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isolatedVmDir, packageDir, workerPath } from '../runners/js/locate.js';

/**
 * The JS sandbox's own code, driven in this process: the worker's modules (runners/js/worker/) with
 * their real isolate pool, loader, persistent contexts and CallRun, and no IPC. A call is timed from
 * the `call` message's arrival (a CallRun made) to its `done` message posted: what the sandbox process
 * spends on a call, without the engine and the channel between them. Needs `--no-node-snapshot`.
 */

type Post = (message: { t: string; id?: number; ok?: boolean; error?: { message: string } }) => void;

interface Worker {
  CallRun: new (msg: unknown, deps: unknown) => { start(): Promise<void> };
  deps: Record<string, unknown>;
  setPost(post: Post): void;
  close(): void;
}

async function worker(): Promise<Worker> {
  const dir = dirname(workerPath());
  const load = (name: string) => import(pathToFileURL(`${dir}/${name}`).href);
  const [{ CallRun }, { HostGate }, { ModuleLoader }, { IsolatePool }, { PersistentContexts }, { setupSource }] = await Promise.all([
    load('call.mjs'),
    load('host-gate.mjs'),
    load('loader.mjs'),
    load('pool.mjs'),
    load('persistent.mjs'),
    load('setup-script.mjs'),
  ]);
  const ivm = createRequire(import.meta.url)(isolatedVmDir() ?? 'isolated-vm');
  const compiler = new ivm.Isolate({ memoryLimit: 512 });
  const logCap = 256 * 1024;
  const pool = new IsolatePool(ivm, setupSource(), { maxIsolates: 16, logCap, onCatastrophe: () => {} });
  const persistent = new PersistentContexts(pool);
  let post: Post = () => {};
  const deps = {
    ivm,
    pool,
    persistent,
    loader: new ModuleLoader(ivm, compiler, packageDir('typescript')),
    gate: new HostGate(),
    post: (message: Parameters<Post>[0]) => post(message),
    postBulk: null,
    logCap,
    onFinished: () => {},
  };
  return {
    CallRun,
    deps,
    setPost: (next) => {
      post = next;
    },
    close: () => {
      persistent.close();
      pool.close();
      compiler.dispose();
    },
  };
}

export interface InSandboxTool {
  /** The tool's id in the call's facts (a persistent context is kept per id). */
  id: string;
  entry: string;
  root: string;
  persistent: boolean;
}

/**
 * Calls of each tool, interleaved in rounds (`perRound` calls of one tool, then the next), after
 * `warmup` calls each, back to back or `gapMs` apart: the time of each call in the sandbox, in ms, by tool id.
 */
export async function inSandboxCalls(
  tools: InSandboxTool[],
  rounds: number,
  perRound: number,
  warmup: number,
  gapMs = 0,
): Promise<Record<string, number[]>> {
  const w = await worker();
  let seq = 0;
  const one = (tool: InSandboxTool, n: number) =>
    new Promise<number>((resolve, reject) => {
      const id = ++seq;
      const msg = {
        t: 'call',
        id,
        tool: { entry: tool.entry, root: tool.root },
        input: { n },
        limits: { timeout_ms: 5_000, memory_mb: 128, output_bytes: 1_000_000 },
        info: { tool: tool.id, runId: `r${id}`, traceId: 't' },
        ...(tool.persistent ? { persistent: true } : {}),
      };
      const t0 = process.hrtime.bigint();
      w.setPost((message) => {
        if (message.t !== 'done' || message.id !== id) return;
        const elapsed = Number(process.hrtime.bigint() - t0) / 1e6;
        if (message.ok) resolve(elapsed);
        else reject(new Error(`${tool.id}: ${message.error?.message}`));
      });
      new w.CallRun(msg, w.deps).start().catch(reject);
    });
  try {
    for (const tool of tools) for (let i = 0; i < warmup; i++) await one(tool, i);
    const times: Record<string, number[]> = Object.fromEntries(tools.map((t) => [t.id, []]));
    for (let round = 0; round < rounds; round++) {
      for (const tool of tools) {
        for (let i = 0; i < perRound; i++) {
          // A gap before a call, as between an agent's steps: what is made ahead is ready when it starts.
          if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
          (times[tool.id] as number[]).push(await one(tool, i));
        }
      }
    }
    return times;
  } finally {
    w.close();
  }
}
