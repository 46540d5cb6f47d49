#!/usr/bin/env node
// The `arium` command: loads the compiled CLI. Plain JS, so it runs before (and tells you about) a build.
import { existsSync } from 'node:fs';
import module from 'node:module';

// Node 22.1 and later keep V8's compiled code of the modules on disk between runs (a no-op before):
// every command starts by loading the same modules.
module.enableCompileCache?.();

const cli = new URL('../dist/src/surfaces/cli/main.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write('arium: the CLI is not built (dist/ is missing): run npm run build in the arium package, then try again\n');
  process.exit(3);
}

// `arium tools | head` closes the pipe early; that is the reader's choice, not an error worth a stack trace.
process.stdout.on('error', (error) => {
  if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw error;
});

// A command for a project's engine goes to the workspace's daemon when one answers: it runs there, on the
// live project, and this process loads nothing of the engine. Otherwise (or --no-daemon) it runs here.
const { tryDaemon } = await import(new URL('../dist/src/daemon/thin-cli.js', import.meta.url).href);
const forwarded = await tryDaemon(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
  cwd: process.cwd(),
  stdoutTty: process.stdout.isTTY === true,
  stderrTty: process.stderr.isTTY === true,
});

if (forwarded !== null) process.exitCode = forwarded;
else {
  const { main } = await import(cli.href);
  const { processIo } = await import(new URL('../dist/src/surfaces/cli/io.js', import.meta.url).href);
  // Holds the event loop open until main settles. Runners unref their idle sandbox processes so a host is
  // never kept alive by them; a promise that waits only on such a process (a runner's status() did, while
  // the JS runner was being built) would let Node exit early with code 13 and no output at all.
  const keepAlive = setInterval(() => {}, 1 << 30);
  try {
    process.exitCode = await main(process.argv.slice(2), processIo());
  } finally {
    clearInterval(keepAlive);
  }
}
