import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export { installAdvice, isolatedVmDir, packageDir, permissionFlag } from '../shared/isolated-vm.js';

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
