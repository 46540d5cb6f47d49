import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { maxPositionals, str, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

/**
 * The MCP configuration of a desktop or editor client that starts `arium mcp` (the bridge to the
 * workspace's engine daemon, which it starts when none runs) on this project. Every
 * path is absolute, and the command is this `node` running this package's bin/arium.js: the client
 * starts the server from its own working directory, where `npx arium` would not find this install and
 * would look `arium` up on the public registry instead.
 */

export const CLIENTS = ['claude-desktop', 'claude-code', 'cursor', 'vscode'] as const;
export type McpClient = (typeof CLIENTS)[number];

/** Where each client reads the configuration from, for the help and the text output. */
const WHERE: Record<McpClient, string> = {
  'claude-desktop': 'claude_desktop_config.json (Settings → Developer → Edit Config), under "mcpServers"',
  'claude-code': '.mcp.json in the folder you run claude in (or: claude mcp add-json arium \'<the "arium" entry>\')',
  cursor: '~/.cursor/mcp.json, or .cursor/mcp.json in a project',
  vscode: '.vscode/mcp.json in the workspace',
};

/** bin/arium.js of this package: the nearest above this module (dist/src/… when built, src/… under the tests). */
function binPath(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const bin = join(dir, 'bin', 'arium.js');
    if (existsSync(bin) && existsSync(join(dir, 'package.json'))) return bin;
    dir = dirname(dir);
  }
  return null;
}

export function mcpConfig(client: McpClient, server: { command: string; args: string[]; env: Record<string, string> }): Record<string, unknown> {
  // Claude Code and VS Code name the transport; Claude Desktop and Cursor take stdio as the default.
  if (client === 'vscode') return { servers: { arium: { type: 'stdio', ...server } } };
  if (client === 'claude-code') return { mcpServers: { arium: { type: 'stdio', ...server } } };
  return { mcpServers: { arium: server } };
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, mcpConfigSpec.usage);
  const client = (str(ctx.parsed, 'client') ?? 'claude-desktop') as McpClient;
  if (!CLIENTS.includes(client)) throw new UsageError(`Option --client takes ${CLIENTS.join(', ')} (got "${client}")`);
  const projectDir = join(ctx.workspace, ctx.project);
  if (!existsSync(projectDir) || !statSync(projectDir).isDirectory()) {
    throw new HostError(
      `there is no project "${ctx.project}" in ${ctx.workspace}: create it with arium init ${ctx.project} --workspace ${ctx.workspace}, or name another with --project`,
    );
  }
  const bin = binPath();
  if (!bin) throw new HostError('this arium install has no bin/arium.js next to its package.json; reinstall the package');
  // A client starts servers with a bare environment (Claude Desktop on macOS has almost no PATH): the
  // Python runner and system.exec find python3 and bwrap on this PATH.
  const env: Record<string, string> = { PATH: ctx.io.env.PATH ?? '/usr/local/bin:/usr/bin:/bin' };
  // The daemon's socket is under $XDG_RUNTIME_DIR when it is set: the client's bridge must look where
  // this shell's commands do, or the two would start a daemon each and one would find the project held.
  if (ctx.io.env.XDG_RUNTIME_DIR) env.XDG_RUNTIME_DIR = ctx.io.env.XDG_RUNTIME_DIR;
  const server = { command: process.execPath, args: [bin, '--workspace', ctx.workspace, '--project', ctx.project, 'mcp'], env };
  ctx.emit(mcpConfig(client, server));
  if (!ctx.json) ctx.io.stderr.write(`arium: put this in ${WHERE[client]}\n`);
  return EXIT.ok;
}

export const mcpConfigSpec: CommandSpec = {
  name: 'mcp-config',
  usage: 'arium mcp-config [--client claude-desktop|claude-code|cursor|vscode]',
  summary: 'print the MCP configuration that makes a desktop or editor client start arium mcp on this project',
  details: [
    'Prints JSON for the client’s MCP configuration: this node (absolute path) running this package’s',
    'bin/arium.js with the absolute --workspace and --project, then mcp: the bridge to the workspace’s engine',
    'daemon, which every client, CLI command and connect() of the workspace share (started when none runs).',
    'The environment carries PATH and XDG_RUNTIME_DIR (where the daemon’s socket is). Absolute, because the client',
    'starts the server from a directory of its own, where `npx arium` would fetch a package of that name',
    'from the public registry instead of running this install. Where each client reads it:',
    ...CLIENTS.map((c) => `  ${c}: ${WHERE[c]}`),
  ].join('\n'),
  flags: {
    client: { value: true, arg: '<client>', help: 'claude-desktop (default), claude-code, cursor or vscode' },
  },
  run,
};
