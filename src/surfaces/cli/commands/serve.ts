import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { dirname, join, resolve } from 'node:path';
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

/** `--idle <seconds>` in milliseconds (0: never); undefined when not given. */
export function idleOption(ctx: Context): number | undefined {
  const given = str(ctx.parsed, 'idle');
  if (given === undefined) return undefined;
  if (!/^\d+(\.\d+)?$/.test(given)) throw new UsageError(`Option --idle needs a number of seconds, 0 for never (got "${given}")`);
  return Math.round(Number(given) * 1000);
}

export interface ServeHow {
  /** Loopback HTTP and its rules, as `arium serve` takes them from its options. */
  http: { host: string; port: number; apiKey?: string; allowedHosts: string[]; allowedOrigins: string[] };
  /** Stop after this long with nothing open; never when absent or 0. */
  idleMs?: number;
  /** Where the HTTP address is written for clients (removed on exit); none when absent. */
  addrFile?: string;
  /** Another daemon serving the workspace is not an error (a client-started daemon that lost the race). */
  heldIsFine?: boolean;
  /** Each line the daemon logs starts with the time (a detached daemon's log). */
  stamped?: boolean;
}

/** The HTTP options of `arium serve` and `arium daemon run`, checked. */
export function httpOptions(ctx: Context): ServeHow['http'] {
  const host = str(ctx.parsed, 'host') ?? '127.0.0.1';
  const port = int(ctx.parsed, 'port', 0) ?? 0;
  if (port > 65535) throw new UsageError(`Option --port needs a port from 0 to 65535 (got ${port})`);
  const apiKey = ctx.io.env.ARIUM_API_KEY || undefined;
  if (!isLoopback(host) && !apiKey) {
    throw new UsageError(
      `Refusing to listen on ${host}, which other machines can reach, without an API key: set ARIUM_API_KEY (clients then send Authorization: Bearer <key>), or bind 127.0.0.1`,
    );
  }
  // The name it binds is one clients use; an address needs no listing (host-guard.ts).
  const allowedHosts = [...(list(ctx.parsed, 'allow-host') ?? []), ...(isIP(host) === 0 ? [host] : [])];
  const allowedOrigins = list(ctx.parsed, 'allow-origin') ?? [];
  return { host, port, ...(apiKey ? { apiKey } : {}), allowedHosts, allowedOrigins };
}

/** Runs the workspace's daemon (src/daemon/server.ts) until Ctrl-C, SIGTERM, idleness or the workspace moving. */
export async function serveDaemon(ctx: Context, how: ServeHow): Promise<number> {
  // Loaded here, not at the top: Fastify and the MCP SDK cost every other command ~0.1 s to import.
  const { DaemonHeldError, startDaemon } = await import('../../../daemon/server.js');
  const { DaemonError } = await import('../../../daemon/link.js');
  const { builtInspector } = await import('../../http/inspector.js');
  const { host, port, apiKey, allowedHosts, allowedOrigins } = how.http;
  const say = (line: string) => ctx.io.stderr.write(how.stamped ? `${new Date().toISOString()} ${line}\n` : `${line}\n`);
  // Taken before the daemon starts: a SIGTERM while it opens would otherwise kill it with its lock and socket left behind.
  const interrupted = ctx.io.interrupt();
  let daemon: Awaited<ReturnType<typeof startDaemon>>;
  try {
    daemon = await startDaemon({
      workspace: ctx.workspace,
      project: ctx.project,
      env: ctx.io.env,
      http: { host, port },
      gateway: { allowedHosts, allowedOrigins, ...(apiKey ? { apiKey } : {}) },
      ...(how.idleMs ? { idleMs: how.idleMs } : {}),
      log: say,
    });
  } catch (error) {
    if (error instanceof DaemonHeldError && how.heldIsFine) {
      say(`arium daemon: ${error.message}`);
      return EXIT.ok;
    }
    if (error instanceof DaemonHeldError || error instanceof DaemonError) throw new HostError(error.message);
    // The lists are checked first: a malformed name or origin is the command line's mistake.
    if (error instanceof TypeError) throw new UsageError(`${error.message} (--allow-host, --allow-origin)`);
    throw error;
  }
  const address = daemon.record.http as string;
  const stop = () => void daemon.stop('asked to stop (SIGTERM or SIGINT)');
  if (interrupted.aborted) stop();
  else interrupted.addEventListener('abort', stop, { once: true });
  if (how.addrFile) {
    try {
      mkdirSync(dirname(how.addrFile), { recursive: true });
      writeFileSync(how.addrFile, `${address}\n`, { mode: 0o600 });
    } catch (error) {
      await daemon.stop('the address file could not be written');
      throw new HostError(`Could not write the address file ${how.addrFile}: ${(error as Error).message}`);
    }
  }
  say(
    `arium: serving ${daemon.paths.workspace} on ${address} and ${daemon.paths.socket} (project "${ctx.project}" at /v1 and /mcp, others at /p/<project>/…)${apiKey ? ', API key required over HTTP' : ''}${how.addrFile ? `; address in ${how.addrFile}` : ''}; Ctrl-C stops`,
  );
  say(
    builtInspector()
      ? `arium: inspector at ${address}/ (other projects at ${address}/p/<project>/)${apiKey ? '; it asks for the API key' : ''}`
      : 'arium: the inspector is not built in this installation (run `npm run build` in the Arium folder)',
  );
  if (ctx.json) ctx.emit({ address, addr_file: how.addrFile ?? null, project: ctx.project, socket: daemon.paths.socket, pid: process.pid });
  await daemon.stopped;
  if (how.addrFile) rmSync(how.addrFile, { force: true });
  return EXIT.ok;
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, serveSpec.usage);
  const http = httpOptions(ctx);
  const addrFile = resolve(ctx.io.cwd, str(ctx.parsed, 'addr-file') ?? defaultAddrFile(ctx.io.env, ctx.workspace));
  const idleMs = idleOption(ctx);
  return await serveDaemon(ctx, { http, addrFile, ...(idleMs !== undefined ? { idleMs } : {}) });
}

export const serveSpec: CommandSpec = {
  name: 'serve',
  usage: 'arium serve [--host <host>] [--port <port>] [--addr-file <path>] [--allow-host <name>]… [--allow-origin <origin>]… [--idle <seconds>]',
  summary: 'run the workspace’s engine daemon in the foreground: its socket, and HTTP (/v1, /mcp, the inspector at /) until Ctrl-C',
  details: [
    'The daemon of the workspace: clients (arium mcp, the CLI, connect()) find it on its Unix socket',
    '($XDG_RUNTIME_DIR/arium/<id>.sock, else <workspace>/.arium/run/; see arium daemon status), where no API key',
    'is asked: the socket is 0600 in a 0700 folder, only your user reaches it. A second daemon for the same',
    'workspace is refused. --idle stops it after that many seconds with no connection, MCP session or call.',
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
    idle: { value: true, arg: '<seconds>', help: 'stop after this long with nothing open (default: never)' },
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
