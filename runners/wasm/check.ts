import { readFile, stat } from 'node:fs/promises';
import { relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { CodeProblem } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { wasmWorkerFile } from './locate.js';

const WASI = 'wasi_snapshot_preview1';

interface Instrumented {
  bytes: Uint8Array;
  imports: { module: string; name: string; kind: string }[];
}
type Instrument = (bytes: Uint8Array) => Instrumented;

/** V8's WebAssembly, typed here: the engine's TypeScript library (ES2023, no DOM) does not declare it. */
const wasm = (globalThis as unknown as { WebAssembly: { validate(bytes: Uint8Array): boolean; compile(bytes: Uint8Array): Promise<unknown> } })
  .WebAssembly;

let instrumentFn: Promise<Instrument> | null = null;
/** The worker's own instrumenter: the engine checks a module exactly as the sandbox will rewrite it. */
function loadInstrument(): Promise<Instrument> {
  instrumentFn ??= import(pathToFileURL(wasmWorkerFile('instrument.mjs')).href).then((m: { instrument: Instrument }) => m.instrument);
  return instrumentFn;
}

/** What checking a file found, by path, with the size and time it had then. */
const checked = new Map<string, { stamp: string; problem: CodeProblem | null }>();

/**
 * A module's load problem, or null: not a WebAssembly module, V8's compile error (the message the
 * compiler gives), a form the memory cap cannot instrument, or an import the host does not offer. V8
 * validates here (it decodes, it makes no code); the module is compiled only in the sandbox.
 */
export async function wasmProblem(tool: Tool): Promise<CodeProblem | null> {
  if (!tool.entryPath || !tool.toolsDir) return null;
  const file = relative(tool.toolsDir, tool.entryPath);
  let raw: Buffer;
  let stamp: string;
  try {
    const stats = await stat(tool.entryPath);
    stamp = `${stats.size}:${stats.mtimeMs}`;
    const known = checked.get(tool.entryPath);
    if (known?.stamp === stamp) return known.problem;
    raw = await readFile(tool.entryPath);
  } catch (error) {
    return { file, line: 1, column: 1, message: `the module cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})` };
  }
  const problem = await findProblem(file, new Uint8Array(raw.buffer, raw.byteOffset, raw.length));
  checked.set(tool.entryPath, { stamp, problem });
  return problem;
}

async function findProblem(file: string, raw: Uint8Array): Promise<CodeProblem | null> {
  const at = (message: string, kind?: CodeProblem['kind']): CodeProblem => ({ file, line: 1, column: 1, message, ...(kind ? { kind } : {}) });
  if (!wasm.validate(raw)) {
    const message = await wasm.compile(raw).then(
      () => 'the module does not validate',
      (error: Error) => String(error.message),
    );
    return at(message);
  }
  let done: Instrumented;
  try {
    done = (await loadInstrument())(raw);
  } catch (error) {
    return at(String((error as Error).message));
  }
  const foreign = done.imports.filter((i) => i.module !== WASI || i.kind !== 'function');
  if (foreign.length > 0) {
    const names = foreign.map((i) => `${i.module}.${i.name} (${i.kind})`).slice(0, 5);
    return at(
      `the module imports ${names.join(', ')}${foreign.length > 5 ? ` and ${foreign.length - 5} more` : ''}, which the host does not offer: a wasm-runner module may import only WASI preview 1 functions (${WASI})`,
      'import',
    );
  }
  return null;
}
