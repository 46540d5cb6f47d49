import { createRequire } from 'node:module';
import { isolatedVmDir } from '../runners/js/locate.js';
import { median } from './stats.js';

/**
 * Raw isolated-vm costs, for comparison with the engine's JS calls: run by bench/js.ts in a process of
 * its own with `--no-node-snapshot` (isolated-vm needs it on Node 20+); prints one JSON line.
 */

interface Ivm {
  Isolate: new (options: {
    memoryLimit: number;
  }) => {
    createContextSync(): { release(): void; evalSync(code: string, options?: object): unknown };
    compileScriptSync(code: string): { runSync(context: unknown, options?: object): unknown };
  };
}

const ivm = createRequire(import.meta.url)(isolatedVmDir() ?? 'isolated-vm') as Ivm;
const isolate = new ivm.Isolate({ memoryLimit: 128 });
const code = "(function (input) { return { text: [...input.text].reverse().join('') }; })";

function time(n: number, fn: () => void): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    fn();
    out.push(performance.now() - t0);
  }
  return out;
}

// A fresh context per call: create, run the tool's code, release.
time(300, () => isolate.createContextSync().release());
const freshContext = time(2000, () => isolate.createContextSync().release());
const script = isolate.compileScriptSync(`${code}({ text: 'hello' })`);
const freshCall = time(2000, () => {
  const context = isolate.createContextSync();
  script.runSync(context, { copy: true });
  context.release();
});
// A call into one context that lives on (no clean global scope between calls).
const context = isolate.createContextSync();
time(1000, () => script.runSync(context, { copy: true }));
const existingContext = time(10_000, () => script.runSync(context, { copy: true }));

process.stdout.write(
  `${JSON.stringify({
    fresh_context_ms: median(freshContext),
    fresh_context_call_ms: median(freshCall),
    existing_context_call_ms: median(existingContext),
  })}\n`,
);
