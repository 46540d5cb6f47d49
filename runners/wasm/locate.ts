import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * A file of the wasm worker (plain JavaScript kept in runners/wasm/worker/, run as it is from the sources
 * and from an installed package alike); compiled code in dist/runners/wasm/ finds it three levels up.
 */
export function wasmWorkerFile(name: string): string {
  const candidates = [new URL(`./worker/${name}`, import.meta.url), new URL(`../../../runners/wasm/worker/${name}`, import.meta.url)];
  for (const url of candidates) {
    const path = fileURLToPath(url);
    if (existsSync(path)) return path;
  }
  throw new Error(`the wasm sandbox worker (runners/wasm/worker/${name}) is missing from the installation`);
}
