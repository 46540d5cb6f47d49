import { chmodSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { isIP } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { findDaemon } from '../../../daemon/link.js';
import { daemonPaths } from '../../../daemon/paths.js';
import { int, list, maxPositionals, str, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

/** Hosts that only this machine reaches. */
export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}

/** Where the chosen address is written for clients to find (seed 002): $XDG_RUNTIME_DIR/arium.addr, else the workspace's .arium/. */
export function defaultAddrFile(env: Readonly<Record<string, string | undefined>>, workspace: string): string {
  return env.XDG_RUNTIME_DIR ? join(env.XDG_RUNTIME_DIR, 'arium.addr') : join(workspace, '.arium', 'arium.addr');
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, serveSpec.usage);
  const host = str(ctx.parsed, 'host') ?? '127.0.0.1';
  const port = int(ctx.parsed, 'port', 0) ?? 0;
  if (port > 65535) throw new UsageError(`Option --port needs a port from 0 to 65535 (got ${port})`);
  const apiKey = ctx.io.env.ARIUM_API_KEY || undefined;
  if (!isLoopback(host) && !apiKey) {
    throw new UsageError(
      `Refusing to listen on ${host}, which other machines can reach, without an API key: set ARIUM_API_KEY (clients then send Authorization: Bearer <key>), or bind 127.0.0.1`,
    );
  }
  const addrFile = resolve(ctx.io.cwd, str(ctx.parsed, 'addr-file') ?? defaultAddrFile(ctx.io.env, ctx.workspace));
  // Loaded here, not at the top: Fastify and the MCP SDK cost every other command ~0.1 s to import.
  const { createGateway } = await import('../../http/gateway.js');
  const { builtInspector } = await import('../../http/inspector.js');
  // The name it binds is one clients use; an address needs no listing (host-guard.ts).
  const allowedHosts = [...(list(ctx.parsed, 'allow-host') ?? []), ...(isIP(host) === 0 ? [host] : [])];
  const allowedOrigins = list(ctx.parsed, 'allow-origin') ?? [];
  let gateway: Awaited<ReturnType<typeof createGateway>>;
  try {
    gateway = await createGateway({ workspace: ctx.workspace, project: ctx.project, allowedHosts, allowedOrigins, ...(apiKey ? { apiKey } : {}) });
  } catch (error) {
    // The lists are checked first: a malformed name or origin is the command line's mistake.
    if (error instanceof TypeError) throw new UsageError(`${error.message} (--allow-host, --allow-origin)`);
    throw error;
  }
  let address: string;
  try {
    address = await gateway.app.listen({ host, port });
  } catch (error) {
    await gateway.close();
    throw new HostError(`Could not listen on ${host}:${port}: ${(error as Error).message}`);
  }
  try {
    mkdirSync(dirname(addrFile), { recursive: true });
    writeFileSync(addrFile, `${address}\n`, { mode: 0o600 });
  } catch (error) {
    await gateway.close();
    throw new HostError(`Could not write the address file ${addrFile}: ${(error as Error).message}`);
  }
  const paths = daemonPaths(ctx.workspace, ctx.io.env);
  let socketServer: Server;
  try {
    socketServer = await listenOnSocket(gateway, paths, ctx.io.env);
  } catch (error) {
    rmSync(addrFile, { force: true });
    await gateway.close();
    throw new HostError(`Could not listen on the socket ${paths.socket}: ${(error as Error).message}`);
  }
  ctx.io.stderr.write(
    `arium: serving ${ctx.workspace} on ${address} (project "${ctx.project}" at /v1 and /mcp, others at /p/<project>/…)${apiKey ? ', API key required' : ''}; address in ${addrFile}; Ctrl-C stops\n`,
  );
  ctx.io.stderr.write(
    builtInspector()
      ? `arium: inspector at ${address}/ (other projects at ${address}/p/<project>/)${apiKey ? '; it asks for the API key' : ''}\n`
      : 'arium: the inspector is not built in this installation (run `npm run build` in the Arium folder)\n',
  );
  if (ctx.json) ctx.emit({ address, addr_file: addrFile, project: ctx.project });
  const stop = ctx.io.interrupt();
  await new Promise<void>((done) => stop.addEventListener('abort', () => done(), { once: true }));
  rmSync(addrFile, { force: true });
  rmSync(paths.socket, { force: true });
  rmSync(paths.record, { force: true });
  socketServer.close();
  await gateway.close();
  socketServer.closeAllConnections();
  return EXIT.ok;
}

/**
 * The gateway on the workspace's daemon socket too (0600 in a 0700 folder), where thin clients find it.
 * A socket file another daemon answers on is left alone; one nobody answers on is a dead daemon's.
 */
async function listenOnSocket(
  gateway: { app: { ready(): PromiseLike<unknown>; routing(req: unknown, res: unknown): void } },
  paths: ReturnType<typeof daemonPaths>,
  env: Readonly<Record<string, string | undefined>>,
): Promise<Server> {
  if (await findDaemon(paths.workspace, env)) throw new Error('another Arium daemon serves this workspace there');
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  rmSync(paths.socket, { force: true });
  await gateway.app.ready();
  const server = createServer((req, res) => gateway.app.routing(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(paths.socket, () => resolve());
  });
  chmodSync(paths.socket, 0o600);
  writeFileSync(paths.record, JSON.stringify({ pid: process.pid, socket: paths.socket, workspace: paths.workspace }), { mode: 0o600 });
  return server;
}

export const serveSpec: CommandSpec = {
  name: 'serve',
  usage: 'arium serve [--host <host>] [--port <port>] [--addr-file <path>] [--allow-host <name>]… [--allow-origin <origin>]…',
  summary: 'serve the workspace’s tools over HTTP (/v1 gateway, /mcp Streamable HTTP, the inspector at /) until Ctrl-C',
  details: [
    'Binds 127.0.0.1 on a free port by default and writes the address (http://host:port) to the address',
    'file ($XDG_RUNTIME_DIR/arium.addr, else <workspace>/.arium/arium.addr), removed on exit. A host other',
    'machines can reach needs ARIUM_API_KEY in the environment; every request but /healthz then needs',
    '`Authorization: Bearer <key>` (or X-API-Key). Routes: GET /healthz, GET /v1/tools, GET /v1/tools/{id},',
    'POST /v1/tools/{id}:run, GET|POST /v1/snapshots, GET /v1/diff, POST /v1/restore, GET /v1/events (SSE),',
    'GET /v1/project, GET /v1/fs/list, GET /v1/fs/read, GET /v1/runs/{run_id}/diff, GET /v1/approvals,',
    'POST /v1/approvals/{run_id}, /mcp, GET /v1/openapi.json;',
    'other projects of the workspace under /p/<project>/. The inspector (a web page: tools, live calls, files,',
    'snapshots and diffs) is at / and /p/<project>/; the page loads without the key and asks for it.',
    'Every request must name the server by a loopback name (localhost, *.localhost), an IP address, the',
    '--host name or an --allow-host name, and a browser page may call it only from its own origin or an',
    '--allow-origin one: anything else is 403 (a web page reaching it through DNS rebinding looks like that).',
  ].join('\n'),
  flags: {
    host: { value: true, arg: '<host>', help: 'address to bind (default 127.0.0.1)' },
    port: { value: true, arg: '<port>', help: 'port (default 0: a free one)' },
    'addr-file': { value: true, arg: '<path>', help: 'where to write the chosen address' },
    'allow-host': { value: true, repeat: true, arg: '<name>', help: 'a host name clients may use besides loopback names and IPs (repeatable)' },
    'allow-origin': {
      value: true,
      repeat: true,
      arg: '<origin>',
      help: 'an origin (http://host:port) whose pages may call the gateway besides its own (repeatable)',
    },
  },
  run,
};
