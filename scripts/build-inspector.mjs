// Builds the inspector page (inspector/ → dist/inspector/) with Vite: the third step of `npm run
// build`, and of `prepare` (scripts/prepare.mjs), so `arium serve` needs no build step at run time.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const config = join(root, 'inspector', 'vite.config.ts');
if (!existsSync(config)) {
  console.error(`arium: ${config} is missing: the inspector cannot be built`);
  process.exit(1);
}
let vite;
try {
  vite = await import('vite');
} catch {
  // Vite is a development dependency: an installation without it serves the page built before, if any.
  if (existsSync(join(root, 'dist', 'inspector', 'index.html'))) process.exit(0);
  console.error('arium: Vite is not installed, so the inspector page cannot be built; run `npm install` in the Arium folder');
  process.exit(1);
}
await vite.build({ configFile: config, logLevel: 'warn' });
