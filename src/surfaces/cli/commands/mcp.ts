import { maxPositionals } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, mcpSpec.usage);
  const streams = ctx.io.streams;
  if (!streams) throw new HostError('arium mcp speaks MCP on standard input and output, which this environment does not give it');
  // Loaded here, not at the top: the MCP SDK (with zod) costs every other command to import. Started
  // before the engine opens, so the two overlap.
  const loading = Promise.all([import('@modelcontextprotocol/sdk/server/stdio.js'), import('../../mcp/server.js')]);
  // Watching: tool files added, changed or removed while a client is connected reach it as list_changed.
  const engine = await ctx.open({ watch: true, exclusive: true });
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
  usage: 'arium mcp',
  summary: 'serve the project’s tools to an MCP client over standard input and output',
  details: [
    'Speaks the Model Context Protocol (JSON-RPC on stdin/stdout; messages about the server go to stderr).',
    'Tools: every tool, or those `surfaces.mcp.tools` in arium.json names, with `surfaces.mcp.grants` for',
    'their calls. Resources: arium://<project>/vfs/{+path}, arium://<project>/snapshots,',
    'arium://<project>/diff/{from}/{to}. Tool files changed while a client is connected are announced',
    '(notifications/tools/list_changed). The project must not be held by another engine.',
    '',
    'A desktop or editor client’s configuration, with absolute paths: arium mcp-config [--client …].',
  ].join('\n'),
  flags: {},
  run,
};
