#!/usr/bin/env node
// The `arium` command: loads the compiled CLI. Kept as plain JS so it runs without a build step of its own.
import { existsSync } from 'node:fs';

const cli = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write('arium: the CLI is not built yet; run `npm run build` in the arium package first\n');
  process.exit(3);
}
const { main } = await import(cli.href);
const { processIo } = await import(new URL('../dist/src/cli/io.js', import.meta.url).href);
process.exitCode = await main(process.argv.slice(2), processIo());
