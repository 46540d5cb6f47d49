// `npm install` runs this in a checkout of Arium (and npm runs it in a clone when Arium is installed
// from a git URL, or from a folder): it builds dist/, which the package's entry points need.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
let tsc;
try {
  tsc = join(dirname(createRequire(join(root, 'package.json')).resolve('typescript/package.json')), 'bin', 'tsc');
} catch {
  if (existsSync(join(root, 'dist', 'src', 'index.js'))) process.exit(0);
  // Installed from a folder whose own dependencies were never installed: nothing here can build it.
  console.error(
    `arium: ${root} is not built (no dist/) and its dependencies are not installed, so it cannot be built here.\n` +
      `Run \`npm install\` in ${root} first (that builds it), then install it again.`,
  );
  process.exit(1);
}
const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { cwd: root, stdio: 'inherit' });
if (result.status !== 0) process.exit(result.status ?? 1);
// The build's other steps (package.json "build"): the schemas compiled ahead, the bridge's bundle, the inspector page.
for (const step of ['precompile-schemas.mjs', 'bundle-bridge.mjs', 'build-inspector.mjs']) {
  const done = spawnSync(process.execPath, [join(root, 'scripts', step)], { cwd: root, stdio: 'inherit' });
  if (done.status !== 0) process.exit(done.status ?? 1);
}
