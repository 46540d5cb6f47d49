import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Finds what the sandbox process needs without loading any of it here: the engine process never loads
 * isolated-vm (it would need `--no-node-snapshot`, and a V8 abort in an isolate would take it down).
 */

const require = createRequire(import.meta.url);

/**
 * The worker script. It is plain JavaScript kept in runners/js/worker/: Node runs it as it is, from the
 * sources (tests) and from an installed package alike. Compiled code in dist/runners/js/ finds it three
 * levels up, in the package's runners/js/worker/ (listed in package.json "files").
 */
export function workerPath(): string {
  const candidates = [new URL('./worker/main.mjs', import.meta.url), new URL('../../../runners/js/worker/main.mjs', import.meta.url)];
  for (const url of candidates) {
    const path = fileURLToPath(url);
    if (existsSync(path)) return path;
  }
  throw new Error('the JS sandbox worker (runners/js/worker/main.mjs) is missing from the installation');
}

/** The folder of an installed package, or null. Walks up from its main file (6.x may not export package.json). */
export function packageDir(name: string): string | null {
  let main: string;
  try {
    main = require.resolve(name);
  } catch {
    return null;
  }
  for (let dir = dirname(main); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (!existsSync(manifest)) continue;
    try {
      if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === name) return dir;
    } catch {}
  }
  return null;
}

/** What to run to make isolated-vm loadable here, for UNAVAILABLE messages and `status()`. */
export function installAdvice(node = process.versions.node): string {
  const major = Number(node.split('.')[0]);
  const version = major >= 22 ? 'isolated-vm@6' : 'isolated-vm@5';
  return (
    `JavaScript tools need the native package isolated-vm. On Node ${node}, install it with ` +
    `\`npm install ${version}\` (isolated-vm 5.x builds on Node 20, 6.x on Node 22 and 24); building it needs ` +
    'python3, make and a C++ compiler when no prebuilt binary matches.'
  );
}

/** Node's permission flag: `--permission` from Node 22.13/23.5, `--experimental-permission` before. */
export function permissionFlag(): string | null {
  const flags = process.allowedNodeEnvironmentFlags;
  if (flags.has('--permission')) return '--permission';
  if (flags.has('--experimental-permission') && flags.has('--allow-addons')) return '--experimental-permission';
  return null;
}
