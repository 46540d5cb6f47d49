#!/usr/bin/env node
// The `arium` command: loads the compiled CLI. Plain JS, so it runs before (and tells you about) a build.
import { existsSync } from 'node:fs';
import module from 'node:module';
import { resolve } from 'node:path';

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

/**
 * `arium mcp` with at most --workspace and --project: the bridge to the workspace's daemon, loaded
 * without the CLI (which imports the engine), so an MCP client's initialize is answered in about the
 * time Node takes to start. Anything else (--no-daemon, ARIUM_NO_DAEMON, --help, other flags) is the CLI's.
 */
function bridgeArgs(argv, env) {
  if (env.ARIUM_NO_DAEMON && env.ARIUM_NO_DAEMON !== '0') return null;
  const found = { command: null, workspace: 'workspace', project: 'demo' };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const named = /^--(workspace|project)(?:=(.+))?$/.exec(arg);
    if (named) {
      const value = named[2] ?? argv[++i];
      if (value === undefined || value === '' || value.startsWith('--')) return null;
      found[named[1]] = value;
    } else if (arg === 'mcp' && found.command === null) found.command = arg;
    else return null;
  }
  return found.command === 'mcp' ? { workspace: resolve(found.workspace), project: found.project } : null;
}

const bridge = bridgeArgs(process.argv.slice(2), process.env);
// One file (scripts/bundle-bridge.mjs) loads in about a third of the time of the modules it is made of.
const bundled = new URL('../dist/src/daemon/bridge.bundle.mjs', import.meta.url);
const bridgeModule = existsSync(bundled) ? bundled : new URL('../dist/src/daemon/bridge.js', import.meta.url);
if (bridge && existsSync(bridgeModule)) {
  const { runBridge } = await import(bridgeModule.href);
  process.exitCode = await runBridge({ ...bridge, env: process.env, stderr: process.stderr });
  process.exit();
}

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
