import { createRequire } from 'node:module';
import { isolatedVmDir } from '../runners/js/locate.js';
import { median } from './stats.js';

/**
 * The floor under the JS runner's warm call: the same architecture with none of the engine's work. A
 * fresh isolated-vm context per call, made ahead of time on the isolate's thread (two isolates, two
 * warm contexts each, as the runner's pool keeps), the tool's function compiled once per isolate and
 * run in the call's context, input and output copied. No validation, permissions, prelude, output
 * checks, events or logs. Run by bench/js.ts with `--no-node-snapshot`:
 *
 * - `serve`: a sandbox process of its own, answering `{ id, input }` messages on the IPC channel, as
 *   the runner's sandbox process does;
 * - `local`: the same calls in this process (no process between caller and isolate); prints one JSON
 *   line with the median.
 *
 * With `reuse` after the mode, every call runs in one long-lived context per isolate instead: no clean
 * global scope, so not something the runner may do — it shows what a design that reuses contexts
 * (a frozen realm) could reach at best.
 */

interface Reference {
  apply(self: undefined, args: unknown[], options: object): Promise<unknown>;
  release(): void;
}
interface Context {
  release(): void;
}
interface Isolate {
  createContext(): Promise<Context>;
  compileScriptSync(code: string): { run(context: Context, options: object): Promise<Reference> };
}
interface Ivm {
  Isolate: new (options: { memoryLimit: number }) => Isolate;
}

const ivm = createRequire(import.meta.url)(isolatedVmDir() ?? 'isolated-vm') as Ivm;
const code = "(function (input) { return { text: [...input.text].reverse().join('') }; })";

interface Slot {
  isolate: Isolate;
  script: ReturnType<Isolate['compileScriptSync']>;
  warm: { context: Context; fn: Reference }[];
  filling: boolean;
}

const slots: Slot[] = [0, 1].map(() => {
  const isolate = new ivm.Isolate({ memoryLimit: 64 });
  return { isolate, script: isolate.compileScriptSync(code), warm: [], filling: false };
});

async function make(slot: Slot): Promise<{ context: Context; fn: Reference }> {
  const context = await slot.isolate.createContext();
  return { context, fn: await slot.script.run(context, { reference: true }) };
}

async function fill(slot: Slot): Promise<void> {
  if (slot.filling) return;
  slot.filling = true;
  while (slot.warm.length < 2) slot.warm.push(await make(slot));
  slot.filling = false;
}

const reuse = process.argv[3] === 'reuse';
const kept = reuse ? await Promise.all(slots.map(make)) : [];

let next = 0;
async function call(input: unknown): Promise<unknown> {
  const index = next++ % slots.length;
  if (reuse)
    return (kept[index] as Awaited<ReturnType<typeof make>>).fn.apply(undefined, [input], { arguments: { copy: true }, result: { copy: true } });
  const slot = slots[index] as Slot;
  const warm = slot.warm.shift() ?? (await make(slot));
  const out = await warm.fn.apply(undefined, [input], { arguments: { copy: true }, result: { copy: true } });
  warm.fn.release();
  warm.context.release();
  void fill(slot);
  return out;
}

if (!reuse) for (const slot of slots) await fill(slot);

if (process.argv[2] === 'local') {
  const input = { text: 'hello' };
  for (let i = 0; i < 3000; i++) await call(input);
  const times: number[] = [];
  for (let i = 0; i < 5000; i++) {
    const t0 = performance.now();
    await call(input);
    times.push(performance.now() - t0);
  }
  process.stdout.write(`${JSON.stringify({ median_ms: median(times) })}\n`);
  process.exit(0);
} else {
  process.on('message', async (message: { id: number; input: unknown }) => {
    process.send?.({ id: message.id, out: await call(message.input) });
  });
  process.send?.({ ready: true });
}
