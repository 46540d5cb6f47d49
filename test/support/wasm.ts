import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** C and Rust sources of the wasm tests (fixtures/wasm), compiled by the tests themselves. */
export const WASM_SOURCES = fileURLToPath(new URL('../../fixtures/wasm/', import.meta.url));

/**
 * Debian's rustc: /usr/bin/rustc with libstd-rust-dev-wasm32. A rustup toolchain earlier on PATH may
 * lack the wasm32-wasi standard library, and CI has only Debian's.
 */
export const RUSTC = '/usr/bin/rustc';

function works(command: string, args: string[]): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'arium-wasm-probe-'));
  const r = spawnSync(command, [...args, '-o', join(dir, 'probe.wasm')], { input: 'int main(void){return 0;}', encoding: 'utf8' });
  return r.status === 0;
}

/**
 * Whether a toolchain is installed. Under CI a missing one fails the suite (it is in .ci/run's apt
 * line); elsewhere the suite is skipped and says why.
 */
export function toolchain(kind: 'c' | 'rust'): boolean {
  const ok =
    kind === 'c'
      ? works('clang', ['--target=wasm32-wasi', '-x', 'c', '-'])
      : spawnSync(RUSTC, ['--print', 'target-libdir', '--target', 'wasm32-wasi'], { encoding: 'utf8' }).status === 0 &&
        spawnSync(RUSTC, ['--version'], { encoding: 'utf8' }).stdout.startsWith('rustc');
  if (!ok && process.env.CI)
    throw new Error(
      `the ${kind === 'c' ? 'C (clang, lld, wasi-libc)' : 'Rust (rustc, libstd-rust-dev-wasm32)'} wasm toolchain is missing; .ci/run installs it`,
    );
  if (!ok)
    console.warn(
      `skipping: the ${kind} wasm32-wasi toolchain is not installed (apt-get install ${kind === 'c' ? 'clang lld wasi-libc libclang-rt-14-dev-wasm32' : 'rustc libstd-rust-dev-wasm32'})`,
    );
  return ok;
}

/** Compiles fixtures/wasm/<source> to `out` with clang for wasm32-wasi; `defines` select a hostile variant. */
export function compileC(source: string, out: string, defines: string[] = [], flags: string[] = []): string {
  execFileSync('clang', ['--target=wasm32-wasi', '-O2', ...defines.map((d) => `-D${d}`), ...flags, join(WASM_SOURCES, source), '-o', out], {
    stdio: 'pipe',
  });
  return out;
}

export function compileRust(source: string, out: string): string {
  execFileSync(RUSTC, ['--target', 'wasm32-wasi', '-O', '-C', 'strip=debuginfo', join(WASM_SOURCES, source), '-o', out], { stdio: 'pipe' });
  return out;
}
