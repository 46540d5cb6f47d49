// Bundles the `arium mcp` bridge (dist/src/daemon/bridge.js and the MCP SDK's two transports it uses)
// into one module next to it, dist/src/daemon/bridge.bundle.mjs, which bin/arium.js loads: Node then
// reads one file instead of resolving and compiling some seventy, and a client's initialize is answered
// sooner (importing the bridge: about 90 ms unbundled, 35 ms bundled, measured on the 2-core machine
// of BENCHMARKS.md). A step of `npm run build` and of `prepare`; bin/arium.js falls back to the
// unbundled module when the bundle is missing.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const entry = join(root, 'dist', 'src', 'daemon', 'bridge.js');
if (!existsSync(entry)) {
  console.error(`arium: ${entry} is missing: compile first (tsc -p tsconfig.json)`);
  process.exit(1);
}
// Next to the modules it was made from: their paths relative to import.meta.url (bin/arium.js) hold in it too.
await build({
  entryPoints: [entry],
  outfile: join(dirname(entry), 'bridge.bundle.mjs'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  logLevel: 'warning',
});
