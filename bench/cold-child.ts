import { createRequire } from 'node:module';
import { isolatedVmDir } from '../runners/js/locate.js';

/**
 * One cold start, run by bench/cold.ts as a fresh process: gets the first answer of one kind, prints
 * `{ answer_ms }` (milliseconds since this process started, from `performance.now()`) and the answer,
 * and exits. Modes:
 * - `js <workspace> <project>` / `python <workspace> <project>`: imports Arium, opens the project (in
 *   memory, not watched), calls its tool once;
 * - `ivm`: isolated-vm alone: an isolate, a context, the same function run once;
 * - `quickjs`: quickjs-emscripten alone: its module, a context, the same function run once.
 */
const CODE = "(function (input) { return { text: [...input.text].reverse().join('') }; })";

async function answer(): Promise<unknown> {
  const [mode, workspace, project = 'cold'] = process.argv.slice(2);
  if (mode === 'js' || mode === 'python') {
    const { createEngine } = await import('../src/index.js');
    const engine = await createEngine({ workspace: workspace as string, project, persist: false, watch: false });
    const result = await engine.call(mode === 'js' ? 'cold.js' : 'cold.py', { text: 'hello' });
    // Answered: what follows (closing the engine) is not part of the first answer's time.
    const out = result.ok ? result.data : result.error;
    report(out);
    await engine.close();
    return null;
  }
  if (mode === 'ivm') {
    const ivm = createRequire(import.meta.url)(isolatedVmDir() ?? 'isolated-vm') as {
      Isolate: new (o: {
        memoryLimit: number;
      }) => {
        createContextSync(): unknown;
        compileScriptSync(code: string): { runSync(context: unknown, options: object): unknown };
      };
    };
    const isolate = new ivm.Isolate({ memoryLimit: 32 });
    const context = isolate.createContextSync();
    return isolate.compileScriptSync(`${CODE}({ text: 'hello' })`).runSync(context, { copy: true });
  }
  if (mode === 'quickjs') {
    const { getQuickJS } = await import('quickjs-emscripten');
    const quickjs = await getQuickJS();
    const vm = quickjs.newContext();
    const handle = vm.unwrapResult(vm.evalCode(`${CODE}({ text: 'hello' })`));
    const out = vm.dump(handle);
    handle.dispose();
    vm.dispose();
    return out;
  }
  throw new Error(`unknown mode ${mode}`);
}

function report(out: unknown): void {
  process.stdout.write(`${JSON.stringify({ answer_ms: performance.now(), answer: out })}\n`);
}

const out = await answer();
if (out !== null) report(out);
