import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createEngine, DEFAULT_GRANTS, type Engine } from '../src/index.js';
import { median, percentile } from './stats.js';

/**
 * The wasm runner: a warm call of a C and a Rust tool summing 100 numbers, against a warm JS call of
 * the same tool and the same C program compiled natively and run by system.exec; a compute-heavy call
 * (a prime sieve) the same three ways; the WASI bridge (a module's synchronous VFS call served by the
 * engine); the first call after load of a 1 MB module. Tools are compiled here (clang, Debian's rustc);
 * a missing toolchain skips its figures. `node --no-node-snapshot dist/bench/run.js wasm` runs it.
 */

const ms = (value: number) => Math.round(value * 100) / 100;
const stats = (times: number[]) => ({ median_ms: ms(median(times)), p95_ms: ms(percentile(times, 0.95)), n: times.length });
const SOURCES = fileURLToPath(new URL('../../fixtures/wasm/', import.meta.url));
const BENCH_SOURCES = fileURLToPath(new URL('../../bench/wasm-src/', import.meta.url));

const JS_SUM = 'export default function run(input) { let sum = 0; for (const x of input.numbers) sum += x; return { sum }; }\n';
const JS_HEAVY = `export default function run(input) {
  const n = input.n; const composite = new Uint8Array(n); let primes = 0; let sum = 0;
  for (let i = 2; i < n; i++) { if (composite[i]) continue; primes++; sum += i; for (let j = i * 2; j < n; j += i) composite[j] = 1; }
  return { primes, sum };
}
`;

function tryBuild(command: string, args: string[]): boolean {
  try {
    execFileSync(command, args, { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

/** C source of about `functions` distinct functions: a module of about 1 MB of code. */
function bigSource(functions: number): string {
  const parts = ['#include <stdio.h>\n'];
  for (let i = 0; i < functions; i++) {
    parts.push(`__attribute__((noinline)) double f${i}(double x) { double y = x;`);
    for (let k = 0; k < 12; k++) parts.push(` y = y * ${1 + ((i + k) % 7)}.${k} + ${(i * 31 + k) % 97}.0 / (y + ${k + 1}.5);`);
    parts.push(' return y; }\n');
  }
  parts.push('typedef double (*fn)(double);\nstatic fn table[] = {');
  for (let i = 0; i < functions; i++) parts.push(`f${i},`);
  parts.push(
    '};\nint main(void) { double s = 0; for (unsigned i = 0; i < sizeof table / sizeof *table; i += 97) s += table[i](1.0); printf("{\\"s\\":%g}\\n", s); return 0; }\n',
  );
  return parts.join('');
}

async function times(engine: Engine, id: string, input: unknown, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const result = await engine.call(id, input);
    out.push(performance.now() - t0);
    if (!result.ok) throw new Error(`bench call ${id} failed: ${result.error.code} ${result.error.message}`);
  }
  return out;
}

export async function benchWasm(): Promise<Record<string, unknown>> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-wasm-'));
  const tools = join(workspace, 'p', 'tools');
  const bin = join(workspace, 'bin');
  mkdirSync(tools, { recursive: true });
  mkdirSync(bin);
  const def = (id: string, runner: string, entry: string, permissions: string[], limits: Record<string, number> = {}) =>
    writeFileSync(
      join(tools, `${id}.json`),
      JSON.stringify({ id, description: id, runner, entry, schema: { type: 'object' }, permissions, limits: { timeout_ms: 60_000, ...limits } }),
    );
  const wasi = ['--target=wasm32-wasi', '-O2'];
  const built = {
    c: tryBuild('clang', [...wasi, join(SOURCES, 'sum.c'), '-o', join(tools, 'sum-c.wasm')]),
    rust: tryBuild('/usr/bin/rustc', [
      '--target',
      'wasm32-wasi',
      '-O',
      '-C',
      'strip=debuginfo',
      join(SOURCES, 'sum.rs'),
      '-o',
      join(tools, 'sum-rust.wasm'),
    ]),
    heavy: tryBuild('clang', [...wasi, join(BENCH_SOURCES, 'heavy.c'), '-o', join(tools, 'heavy-c.wasm')]),
    stats: tryBuild('clang', [...wasi, join(BENCH_SOURCES, 'stats.c'), '-o', join(tools, 'stats-c.wasm')]),
    native:
      tryBuild('clang', ['-O2', join(SOURCES, 'sum.c'), '-o', join(bin, 'sum')]) &&
      tryBuild('clang', ['-O2', join(BENCH_SOURCES, 'heavy.c'), '-o', join(bin, 'heavy')]),
  };
  writeFileSync(join(workspace, 'big.c'), bigSource(2600));
  const bigBuilt = tryBuild('clang', [...wasi, '-O1', join(workspace, 'big.c'), '-o', join(workspace, 'big.wasm')]);
  def('sum-c', 'wasm-runner', 'sum-c.wasm', ['exec.wasm']);
  def('sum-rust', 'wasm-runner', 'sum-rust.wasm', ['exec.wasm']);
  def('heavy-c', 'wasm-runner', 'heavy-c.wasm', ['exec.wasm']);
  def('stats-c', 'wasm-runner', 'stats-c.wasm', ['exec.wasm', 'vfs.read:/data/**']);
  writeFileSync(join(tools, 'sum.js'), JS_SUM);
  writeFileSync(join(tools, 'heavy.js'), JS_HEAVY);
  def('sum-js', 'js-runner', 'sum.js', ['exec.js']);
  def('heavy-js', 'js-runner', 'heavy.js', ['exec.js'], { memory_mb: 256 });
  writeFileSync(join(workspace, 'p', 'arium.json'), JSON.stringify({ exec: { allow: [join(bin, 'sum'), join(bin, 'heavy')] } }));

  const numbers = { numbers: Array.from({ length: 100 }, (_, i) => i * 1.5) };
  const heavy = { n: 2_000_000 };
  const results: Record<string, unknown> = { toolchains: built };
  const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false, grants: [...DEFAULT_GRANTS, 'exec.wasm', 'sys.exec'] });
  try {
    const warm = async (id: string, input: unknown, n: number) => {
      await times(engine, id, input, 5);
      return stats(await times(engine, id, input, n));
    };
    results.sum_js = await warm('sum-js', numbers, 100);
    if (built.c) results.sum_wasm_c = await warm('sum-c', numbers, 100);
    if (built.rust) results.sum_wasm_rust = await warm('sum-rust', numbers, 100);
    if (built.native) {
      results.sum_native_exec = await warm('system.exec', { argv: [join(bin, 'sum')], stdin: JSON.stringify(numbers) }, 30);
    }
    results.heavy_js = await warm('heavy-js', heavy, 10);
    if (built.heavy) results.heavy_wasm_c = await warm('heavy-c', heavy, 10);
    if (built.native) results.heavy_native_exec = await warm('system.exec', { argv: [join(bin, 'heavy')], stdin: JSON.stringify(heavy) }, 10);
    if (built.stats) {
      engine.vfs.write('/data/in.txt', 'x');
      const none = median(await times(engine, 'stats-c', { n: 0 }, 20));
      const many = median(await times(engine, 'stats-c', { n: 2000 }, 10));
      results.wasi_vfs_call_us = Math.round(((many - none) / 2000) * 1000);
    }
  } finally {
    await engine.close();
  }
  if (bigBuilt) {
    // A fresh engine: the module is read, instrumented and compiled for its first call.
    copyFileSync(join(workspace, 'big.wasm'), join(tools, 'big.wasm'));
    def('big', 'wasm-runner', 'big.wasm', ['exec.wasm']);
    const first = await createEngine({ workspace, project: 'p', watch: false, persist: false, grants: [...DEFAULT_GRANTS, 'exec.wasm'] });
    try {
      await times(first, 'sum-c', numbers, 3);
      const [firstCall = 0] = await times(first, 'big', {}, 1);
      results.module_1mb = {
        bytes: statSync(join(tools, 'big.wasm')).size,
        first_call_ms: ms(firstCall),
        warm: stats(await times(first, 'big', {}, 20)),
      };
    } finally {
      await first.close();
    }
  }
  rmSync(workspace, { recursive: true, force: true });
  return results;
}
