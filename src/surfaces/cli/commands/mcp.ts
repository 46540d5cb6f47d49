import { ProjectLockedError } from '../../../index.js';
import { bool, maxPositionals } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

/** `--no-daemon`, or ARIUM_NO_DAEMON=1: the engine runs in this process, as the only one on the project. */
export function noDaemon(noDaemonFlag: boolean, env: Readonly<Record<string, string | undefined>>): boolean {
  return noDaemonFlag || (env.ARIUM_NO_DAEMON !== undefined && env.ARIUM_NO_DAEMON !== '' && env.ARIUM_NO_DAEMON !== '0');
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, mcpSpec.usage);
  const streams = ctx.io.streams;
  if (!streams) throw new HostError('arium mcp speaks MCP on standard input and output, which this environment does not give it');
  if (!noDaemon(bool(ctx.parsed, 'no-daemon'), ctx.io.env)) {
    const { runBridge } = await import('../../../daemon/bridge.js');
    return await runBridge({
      workspace: ctx.workspace,
      project: ctx.project,
      env: ctx.io.env,
      stdin: streams.stdin,
      stdout: streams.stdout,
      stderr: ctx.io.stderr as import('node:stream').Writable,
    });
  }
  // Loaded here, not at the top: the MCP SDK (with zod) costs every other command to import. Started
  // before the engine opens, so the two overlap.
  const loading = Promise.all([import('@modelcontextprotocol/sdk/server/stdio.js'), import('../../mcp/server.js')]);
  let engine: Awaited<ReturnType<Context['open']>>;
  try {
    // Watching: tool files added, changed or removed while a client is connected reach it as list_changed.
    engine = await ctx.open({ watch: true, exclusive: true });
  } catch (error) {
    // An MCP client shows a server that exits only as "Connection closed": what happened goes to stderr
    // (main writes it there), which the client keeps as the server's log.
    if (error instanceof ProjectLockedError) {
      const message =
        `--no-daemon: project "${ctx.project}" of ${ctx.workspace} is held by another engine` +
        `${error.holder ? ` (pid ${error.holder}: the workspace's daemon, or another arium mcp --no-daemon, arium serve or program)` : ''}, ` +
        'and an in-process server needs it alone. Run arium mcp without --no-daemon (and without ARIUM_NO_DAEMON) to share that engine ' +
        '(when it is the daemon), or stop the other engine (arium daemon stop) and start this one again.';
      throw new HostError(message, { cause: error });
    }
    throw error;
  }
  const [{ StdioServerTransport }, { createMcpServer }] = await loading;
  const { server, detach } = createMcpServer(engine, { ...(engine.config.surfaces?.mcp ? { profile: engine.config.surfaces.mcp } : {}) });
  const transport = new StdioServerTransport(streams.stdin, streams.stdout);
  const closed = new Promise<void>((resolve) => {
    server.onclose = () => resolve();
    streams.stdin.once('end', () => resolve());
    ctx.io.interrupt().addEventListener('abort', () => resolve(), { once: true });
  });
  try {
    await server.connect(transport);
    ctx.io.stderr.write(`arium: MCP server for project "${engine.project}" on stdio (${engine.tools().length} tools)\n`);
    await closed;
  } finally {
    detach();
    await server.close().catch(() => {});
    await engine.close();
  }
  return EXIT.ok;
}

export const mcpSpec: CommandSpec = {
  name: 'mcp',
  usage: 'arium mcp [--no-daemon]',
  summary: 'serve the project’s tools to an MCP client over standard input and output',
  details: [
    'Speaks the Model Context Protocol (JSON-RPC on stdin/stdout; messages about the server go to stderr).',
    'A bridge to the workspace’s engine daemon (started when none runs; every MCP client, CLI command and',
    'connect() of the workspace share it): it forwards the messages to the daemon’s /mcp over its Unix socket.',
    'If the daemon stops during a call, that call answers UNAVAILABLE (whether it committed is unknown) and',
    'the next request starts a new daemon. --no-daemon (or ARIUM_NO_DAEMON=1) runs the engine in this',
    'process instead, which then needs the project alone.',
    '',
    'Tools: every tool, or those `surfaces.mcp.tools` in arium.json names, with `surfaces.mcp.grants` for',
    'their calls. Resources: arium://<project>/vfs/{+path}, arium://<project>/snapshots,',
    'arium://<project>/diff/{from}/{to}. Tool files changed while a client is connected are announced',
    '(notifications/tools/list_changed). Calls are named mcp:<the client’s name> in events and the audit log.',
    '',
    'A desktop or editor client’s configuration, with absolute paths: arium mcp-config [--client …].',
  ].join('\n'),
  flags: {
    'no-daemon': { help: 'run the engine in this process instead of bridging to the workspace’s daemon (also ARIUM_NO_DAEMON=1)' },
  },
  run,
};
