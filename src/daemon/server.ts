/**
 * The engine daemon: the one process per workspace that holds its engines, serving the gateway on a Unix
 * socket (for the workspace's user: no API key there) and on loopback HTTP. `arium serve` runs it in the
 * foreground; clients start it detached (`arium daemon run`) through link.ts and it stops when idle.
 */
import { chmodSync, existsSync, lstatSync, realpathSync, renameSync, rmSync, type Stats, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { ProjectLock, ProjectLockedError } from '../store/lock.js';
import { createGateway, type DaemonHealth, type Gateway, type GatewayOptions } from '../surfaces/http/gateway.js';
import { ariumVersion, DaemonError, type Env, ensureDaemonFolder } from './link.js';
import { DAEMON_PROTOCOL, type DaemonPaths, daemonPaths } from './paths.js';

/** What the daemon writes to `paths.record` once it listens, and removes when it stops. */
export interface DaemonRecord {
  pid: number;
  version: string;
  protocol: number;
  socket: string;
  http: string | null;
  log: string;
  workspace: string;
  started_at: string;
}

export interface DaemonOptions {
  workspace: string;
  /** The project served at `/v1` and `/mcp`; the others are at `/p/<project>/…`. */
  project: string;
  /** Where the daemon's files are chosen from (`XDG_RUNTIME_DIR`). */
  env?: Env;
  /** Stop after this long with no connection, no MCP session and no call in flight; never when absent. */
  idleMs?: number;
  /** Also serve loopback (or, with an API key, another) HTTP here; socket only when absent. */
  http?: { host: string; port: number };
  /** The gateway's other options: API key, allowed hosts and origins, limits, engine options. */
  gateway?: Omit<GatewayOptions, 'workspace' | 'project' | 'daemon'>;
  /** How often the workspace is checked to still be where it was (default 2 s). */
  workspaceCheckMs?: number;
  /** Where the daemon says what it does (default: standard error, which a started daemon sends to its log). */
  log?: (line: string) => void;
}

/** Another daemon holds the workspace: this one does not start. */
export class DaemonHeldError extends Error {
  override readonly name = 'DaemonHeldError';
  constructor(
    message: string,
    readonly holder: number | null,
  ) {
    super(message);
  }
}

export interface Daemon {
  readonly paths: DaemonPaths;
  readonly record: DaemonRecord;
  readonly gateway: Gateway;
  /** Resolves once the daemon has stopped, with why. */
  readonly stopped: Promise<string>;
  /** Stops it (idempotent): the gateway and its engines closed, the record and socket removed, the lock released. */
  stop(reason: string): Promise<void>;
}

const WORKSPACE_CHECK_MS = 2_000;

/** Counts a server's open connections: any open one (an SSE stream, a call waiting for its result) keeps the daemon up. */
function countConnections(server: Server, counter: { open: number }): void {
  server.on('connection', (socket: Socket) => {
    counter.open++;
    socket.once('close', () => counter.open--);
  });
}

function writeRecord(path: string, record: DaemonRecord): void {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
  renameSync(temporary, path);
}

/** The socket is bound 0600 (umask) and then set so: the folder is 0700, so nobody else could reach it between. */
function listenLocal(server: Server, socket: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const umask = process.umask(0o177);
    try {
      server.listen(socket, () => {
        server.off('error', reject);
        chmodSync(socket, 0o600);
        resolve();
      });
    } finally {
      process.umask(umask);
    }
  });
}

function sameFolder(path: string, seen: Stats): boolean {
  try {
    if (realpathSync(path) !== path) return false;
    const now = statSync(path);
    return now.ino === seen.ino && now.dev === seen.dev;
  } catch {
    return false;
  }
}

/**
 * Starts the workspace's daemon. Throws DaemonHeldError when another one holds it, DaemonError when its
 * folder is not private (DENIED) or it cannot listen or open the workspace (UNAVAILABLE).
 */
export async function startDaemon(options: DaemonOptions): Promise<Daemon> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const paths = daemonPaths(options.workspace, options.env);
  let workspaceStats: Stats;
  try {
    workspaceStats = statSync(paths.workspace);
    if (!workspaceStats.isDirectory()) throw new Error('not a folder');
  } catch (error) {
    throw new DaemonError('UNAVAILABLE', `The workspace ${paths.workspace} cannot be served: ${(error as Error).message}; make it with arium init`);
  }
  ensureDaemonFolder(paths.dir);
  const lock = new ProjectLock(paths.lock);
  try {
    lock.acquire();
  } catch (error) {
    if (!(error instanceof ProjectLockedError)) throw error;
    throw new DaemonHeldError(
      `Another Arium daemon${error.holder ? ` (pid ${error.holder})` : ''} already serves ${paths.workspace} (lock ${paths.lock}); \`arium daemon status\` shows it, \`arium daemon stop\` stops it`,
      error.holder,
    );
  }
  let gateway: Gateway | undefined;
  let local: Server | undefined;
  try {
    // A socket file here is a dead daemon's: a live one would hold the lock.
    if (existsSync(paths.socket) && !lstatSync(paths.socket).isSocket()) {
      throw new DaemonError('DENIED', `The daemon socket's path ${paths.socket} holds something else (not a socket): remove it`);
    }
    rmSync(paths.socket, { force: true });
    rmSync(paths.record, { force: true });
    let http: string | null = null;
    const health = (): DaemonHealth => ({ pid: process.pid, version: ariumVersion(), protocol: DAEMON_PROTOCOL, workspace: paths.workspace, http });
    gateway = await createGateway({ ...options.gateway, workspace: paths.workspace, project: options.project, daemon: health });
    const connections = { open: 0 };
    countConnections(gateway.app.server, connections);
    if (options.http) {
      try {
        http = await gateway.app.listen({ host: options.http.host, port: options.http.port });
      } catch (error) {
        throw new DaemonError('UNAVAILABLE', `Could not listen on ${options.http.host}:${options.http.port}: ${(error as Error).message}`, {
          cause: error,
        });
      }
    } else {
      await gateway.app.ready();
    }
    const served = gateway;
    const tcp = served.app.server;
    local = createServer({ requestTimeout: tcp.requestTimeout, headersTimeout: tcp.headersTimeout }, (req, res) => served.app.routing(req, res));
    countConnections(local, connections);
    try {
      await listenLocal(local, paths.socket);
    } catch (error) {
      throw new DaemonError('UNAVAILABLE', `Could not listen on the socket ${paths.socket}: ${(error as Error).message}`, { cause: error });
    }
    const record: DaemonRecord = {
      pid: process.pid,
      version: ariumVersion(),
      protocol: DAEMON_PROTOCOL,
      socket: paths.socket,
      http,
      log: paths.log,
      workspace: paths.workspace,
      started_at: new Date().toISOString(),
    };
    writeRecord(paths.record, record);
    return running({ options, paths, record, gateway: served, local, lock, connections, workspaceStats, log });
  } catch (error) {
    if (local) {
      local.close();
      rmSync(paths.socket, { force: true });
    }
    await gateway?.close();
    lock.release();
    throw error;
  }
}

function running(parts: {
  options: DaemonOptions;
  paths: DaemonPaths;
  record: DaemonRecord;
  gateway: Gateway;
  local: Server;
  lock: ProjectLock;
  connections: { open: number };
  workspaceStats: Stats;
  log: (line: string) => void;
}): Daemon {
  const { options, paths, record, gateway, local, lock, connections, workspaceStats, log } = parts;
  let finish: (reason: string) => void = () => {};
  const stopped = new Promise<string>((resolve) => {
    finish = resolve;
  });
  let stopping: Promise<void> | null = null;
  const timers: NodeJS.Timeout[] = [];

  const stop = (reason: string): Promise<void> => {
    stopping ??= (async () => {
      for (const timer of timers) clearInterval(timer);
      log(`arium daemon: stopping (${reason})`);
      local.close();
      local.closeAllConnections();
      try {
        await gateway.close();
      } finally {
        rmSync(paths.record, { force: true });
        rmSync(paths.socket, { force: true });
        lock.release();
        log('arium daemon: stopped');
        finish(reason);
      }
    })();
    return stopping;
  };

  // Anything open counts as use: a connection (an SSE stream, a call waiting for its result, a keep-alive
  // client) or an MCP session, whose client may be between requests.
  if (options.idleMs !== undefined) {
    const idleMs = options.idleMs;
    let lastBusy = Date.now();
    const timer = setInterval(
      () => {
        if (connections.open > 0 || gateway.mcpSessions().sessions > 0) lastBusy = Date.now();
        else if (Date.now() - lastBusy >= idleMs) void stop(`idle for ${idleMs / 1000} s: no connection, MCP session or call in flight`);
      },
      Math.max(50, Math.min(1_000, Math.floor(idleMs / 4))),
    );
    timer.unref();
    timers.push(timer);
  }

  // A daemon for a folder that moved would keep serving (and writing) a state that is no longer the
  // workspace's, and a new daemon would start for the new path beside it.
  const watch = setInterval(() => {
    if (!sameFolder(paths.workspace, workspaceStats)) void stop(`the workspace ${paths.workspace} was moved or removed`);
  }, options.workspaceCheckMs ?? WORKSPACE_CHECK_MS);
  watch.unref();
  timers.push(watch);

  log(
    `arium daemon: pid ${process.pid} serves ${paths.workspace} on ${paths.socket}${record.http ? ` and ${record.http}` : ''}${options.idleMs !== undefined ? `; stops after ${options.idleMs / 1000} s idle` : ''}`,
  );
  return { paths, record, gateway, stopped, stop };
}
