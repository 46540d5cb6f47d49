/**
 * The client side of the engine daemon: find the workspace's daemon, or start one and wait until it
 * answers. Thin clients (the MCP bridge, the CLI's fast path, `connect()`) load this before anything else
 * of Arium, so it imports Node's built-ins and the two daemon modules beside it only.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync, readSync, renameSync, rmSync, type Stats } from 'node:fs';
import { request } from 'node:http';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DAEMON_PROTOCOL, type DaemonPaths, daemonPaths } from './paths.js';
import { SOCKET_HOST } from './socket-fetch.js';

export type Env = Readonly<Record<string, string | undefined>>;

/** A daemon that answered: where it listens and what it is. */
export interface DaemonLink {
  socket: string;
  pid: number;
  version: string;
  protocol: number;
  /** Its loopback HTTP address (`http://127.0.0.1:port`), or null when it serves the socket only. */
  http: string | null;
  log: string;
  workspace: string;
}

/**
 * - `UNAVAILABLE`: no daemon answered in time, or the one started stopped (the message quotes its log);
 * - `DENIED`: the daemon's folder or socket belongs to another user or lets others in;
 * - `VERSION`: the daemon speaks another protocol than this client.
 */
export type DaemonErrorCode = 'UNAVAILABLE' | 'DENIED' | 'VERSION';

export class DaemonError extends Error {
  override readonly name = 'DaemonError';
  constructor(
    readonly code: DaemonErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** How long a daemon has to answer `/healthz` before it counts as hung. */
const HEALTH_TIMEOUT_MS = 5_000;
/** How long ensureDaemon waits for a daemon it started, unless told otherwise. */
const START_TIMEOUT_MS = 15_000;
/** Bytes of the daemon's log quoted when it failed to start. */
const LOG_TAIL_BYTES = 4_096;

/** The installed package's folder (holding package.json and bin/arium.js), from src/ or dist/src/. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'bin', 'arium.js'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`No Arium package above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

let version: string | undefined;
/** This installation's version (package.json). */
export function ariumVersion(): string {
  version ??= (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
  return version;
}

function uid(): number | undefined {
  return process.getuid?.();
}

function statOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

/**
 * Checks the daemon's folder is a folder of this user that no one else may enter: anyone who can put a
 * socket there could pose as the daemon, and anyone who can reach the socket is taken for this user.
 * Returns false when it does not exist.
 */
export function checkDaemonFolder(dir: string): boolean {
  const stats = statOrNull(dir);
  if (!stats) return false;
  const me = uid();
  if (!stats.isDirectory()) {
    throw new DaemonError('DENIED', `The daemon folder ${dir} is not a folder (a link or a file): remove it, and Arium makes a private one`);
  }
  if (me !== undefined && stats.uid !== me) {
    throw new DaemonError(
      'DENIED',
      `The daemon folder ${dir} belongs to uid ${stats.uid}, not to you (uid ${me}): another user could pose as your daemon there. Remove it (as its owner or root), or point XDG_RUNTIME_DIR at a folder of yours`,
    );
  }
  if ((stats.mode & 0o077) !== 0) {
    throw new DaemonError('DENIED', `The daemon folder ${dir} lets other users in (mode ${(stats.mode & 0o777).toString(8)}): run chmod 700 ${dir}`);
  }
  return true;
}

function checkSocketOwner(socket: string, stats: Stats): void {
  const me = uid();
  if (me !== undefined && stats.uid !== me) {
    throw new DaemonError(
      'DENIED',
      `The daemon socket ${socket} belongs to uid ${stats.uid}, not to you (uid ${me}): it is not your daemon. Remove it (as its owner or root)`,
    );
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The pid holding the daemon lock when that process still runs on this host, else null. */
function liveLockHolder(lock: string): number | null {
  try {
    const owner = JSON.parse(readFileSync(lock, 'utf8')) as { pid?: unknown; host?: unknown };
    if (typeof owner.pid !== 'number') return null;
    // A lock of another host (a shared workspace folder) cannot be judged from here: taken as held.
    if (owner.host !== hostname()) return owner.pid;
    return alive(owner.pid) ? owner.pid : null;
  } catch {
    return null;
  }
}

interface Health {
  daemon?: { pid?: unknown; version?: unknown; protocol?: unknown; workspace?: unknown; http?: unknown };
}

function versionError(paths: DaemonPaths, pid: unknown, theirs: unknown, protocol: unknown): DaemonError {
  return new DaemonError(
    'VERSION',
    `The daemon of ${paths.workspace} (pid ${String(pid)}) is Arium ${String(theirs)} speaking protocol ${String(protocol)}; this client is Arium ${ariumVersion()} speaking protocol ${DAEMON_PROTOCOL}. Stop it with \`arium daemon stop --workspace ${paths.workspace}\` (the next client starts a matching one)`,
  );
}

/** The record's claim of another protocol, when its process still runs: such a daemon may not answer /healthz as this one expects. */
function recordedProtocol(paths: DaemonPaths): void {
  let record: { pid?: unknown; version?: unknown; protocol?: unknown };
  try {
    record = JSON.parse(readFileSync(paths.record, 'utf8'));
  } catch {
    return;
  }
  if (typeof record.pid === 'number' && alive(record.pid) && record.protocol !== DAEMON_PROTOCOL) {
    throw versionError(paths, record.pid, record.version, record.protocol);
  }
}

/**
 * `GET /healthz` over the socket with node:http itself: the first request through the Fetch API costs a
 * process about 15 ms more (web streams load), and every client asks this first.
 */
function askHealth(socket: string): Promise<Health> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: socket, path: '/healthz', headers: { host: SOCKET_HOST, connection: 'close' }, timeout: HEALTH_TIMEOUT_MS },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Health);
          } catch (error) {
            reject(new Error(`its /healthz answer is not JSON (HTTP ${res.statusCode}): ${(error as Error).message}`));
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer within ${HEALTH_TIMEOUT_MS} ms`), { name: 'TimeoutError' })));
    req.on('error', reject);
    req.end();
  });
}

/**
 * A daemon killed a moment ago may still be closing its sockets: a connection made then is accepted and
 * reset. Asked again shortly, the socket refuses (nobody there) or a live daemon answers.
 */
async function askHealthSettled(socket: string): Promise<Health> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await askHealth(socket);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== 'ECONNRESET' && code !== 'EPIPE') || attempt >= RESET_RETRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/** How often a reset connection is tried again (50 ms apart) before it counts as a daemon that does not answer. */
const RESET_RETRIES = 20;

/** The running daemon of the workspace, or null when none answers (a dead socket file is not one). Throws DaemonError for one that cannot be used (other user's folder, other protocol). */
export async function findDaemon(workspace: string, env: Env = process.env): Promise<DaemonLink | null> {
  const paths = daemonPaths(workspace, env);
  if (!checkDaemonFolder(paths.dir)) return null;
  const socketStats = statOrNull(paths.socket);
  if (!socketStats) return null;
  checkSocketOwner(paths.socket, socketStats);
  if (!socketStats.isSocket()) {
    throw new DaemonError('DENIED', `The daemon socket's path ${paths.socket} holds something else (not a socket): remove it`);
  }
  recordedProtocol(paths);
  let health: Health;
  try {
    health = await askHealthSettled(paths.socket);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ECONNREFUSED' || code === 'ENOENT') {
      removeStaleSocket(paths, socketStats);
      return null;
    }
    if (code === 'EACCES') {
      throw new DaemonError('DENIED', `The daemon socket ${paths.socket} refuses you (EACCES): it is not yours; remove it (as its owner or root)`, {
        cause: error,
      });
    }
    if ((error as Error).name === 'TimeoutError') {
      throw new DaemonError(
        'UNAVAILABLE',
        `The daemon on ${paths.socket} did not answer within ${HEALTH_TIMEOUT_MS} ms; see its log ${paths.log}, or stop it with \`arium daemon stop --workspace ${paths.workspace}\``,
        { cause: error },
      );
    }
    throw new DaemonError('UNAVAILABLE', `The daemon on ${paths.socket} did not answer: ${(error as Error).message}`, { cause: error });
  }
  const daemon = health.daemon;
  if (!daemon || daemon.protocol !== DAEMON_PROTOCOL)
    throw versionError(paths, daemon?.pid, daemon?.version ?? 'unknown', daemon?.protocol ?? 'unknown');
  return {
    socket: paths.socket,
    pid: daemon.pid as number,
    version: String(daemon.version),
    protocol: DAEMON_PROTOCOL,
    http: typeof daemon.http === 'string' ? daemon.http : null,
    log: paths.log,
    workspace: paths.workspace,
  };
}

/**
 * A socket nobody listens on is left by a daemon that died. It is removed only when no live process
 * holds the daemon lock: one that does is starting and replaces the file itself. The inode is compared
 * so that a socket just bound by a new daemon is never the one removed.
 */
function removeStaleSocket(paths: DaemonPaths, seen: Stats): void {
  if (liveLockHolder(paths.lock) !== null) return;
  const now = statOrNull(paths.socket);
  if (now && now.ino === seen.ino && now.dev === seen.dev) rmSync(paths.socket, { force: true });
}

/** The last lines of the daemon's log, for an error that says why it did not start. */
function logTail(log: string): string {
  try {
    const fd = openSync(log, 'r');
    try {
      const size = lstatSync(log).size;
      const length = Math.min(size, LOG_TAIL_BYTES);
      const buffer = Buffer.alloc(length);
      readSync(fd, buffer, 0, length, size - length);
      const text = buffer.toString('utf8').trimEnd();
      return text === '' ? '(the log is empty)' : text;
    } finally {
      closeSync(fd);
    }
  } catch {
    return '(no log)';
  }
}

/** Makes the daemon's private folder (0700) when missing, and checks it when present. */
export function ensureDaemonFolder(dir: string): void {
  if (checkDaemonFolder(dir)) return;
  mkdirSync(dirname(dir), { recursive: true });
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  checkDaemonFolder(dir);
}

/** Past this size the log is moved to `<id>.log.old` when a daemon is started: every start appends to it. */
const LOG_ROTATE_BYTES = 1024 * 1024;

function rotateLog(log: string): void {
  if ((statOrNull(log)?.size ?? 0) > LOG_ROTATE_BYTES) renameSync(log, `${log}.old`);
}

/** Daemons one ensureDaemon starts at most, each having lost the lock to one that then stopped. */
const MAX_STARTS = 3;

/** `bin/arium.js daemon run …` detached from this process, its output appended to the log. */
function startDetached(args: string[], logPath: string, env: Env): { pid: number | undefined; exited: number | string | null } {
  const log = openSync(logPath, 'a', 0o600);
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', log, log], env: env as NodeJS.ProcessEnv, cwd: '/' });
  } finally {
    closeSync(log);
  }
  const state: { pid: number | undefined; exited: number | string | null } = { pid: child.pid, exited: null };
  child.on('exit', (code, signal) => {
    state.exited = code ?? signal ?? 'unknown';
  });
  child.on('error', (error) => {
    state.exited = error.message;
  });
  child.unref();
  return state;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** findDaemon, else starts one detached (`node --no-node-snapshot <bin/arium.js> daemon run …`) and waits until it answers; racing starters end with one daemon. */
export async function ensureDaemon(workspace: string, options: { env?: Env; idleMs?: number; timeoutMs?: number } = {}): Promise<DaemonLink> {
  const env = options.env ?? process.env;
  if (options.idleMs !== undefined && !(Number.isSafeInteger(options.idleMs) && options.idleMs >= 0)) {
    throw new RangeError(`idleMs must be a whole number of milliseconds, 0 for never (got ${String(options.idleMs)})`);
  }
  const found = await findDaemon(workspace, env);
  if (found) return found;
  const paths = daemonPaths(workspace, env);
  // Checked here: the daemon's folder may be inside the workspace, and making it would make the workspace.
  if (!statOrNull(paths.workspace)?.isDirectory()) {
    throw new DaemonError(
      'UNAVAILABLE',
      `The workspace ${paths.workspace} is not a folder: make it (arium init --workspace ${paths.workspace}) or pass the right one`,
    );
  }
  ensureDaemonFolder(paths.dir);
  rotateLog(paths.log);
  const args = ['--no-node-snapshot', join(packageRoot(), 'bin', 'arium.js'), 'daemon', 'run', '--workspace', paths.workspace];
  if (options.idleMs !== undefined) args.push('--idle', String(options.idleMs / 1000));
  let child = startDetached(args, paths.log, env);
  let starts = 1;
  const timeoutMs = options.timeoutMs ?? START_TIMEOUT_MS;
  const until = Date.now() + timeoutMs;
  // Short: finding no socket costs a stat, and every poll missed is latency added to a cold start.
  let wait = 5;
  for (;;) {
    const link = await findDaemon(workspace, env);
    if (link) return link;
    const holder = liveLockHolder(paths.lock);
    if (child.exited !== null && holder === null) {
      // It lost the lock to a daemon that has stopped since (one stopping when idle as this client came): start another.
      if (child.exited === 0 && starts < MAX_STARTS) {
        child = startDetached(args, paths.log, env);
        starts++;
        continue;
      }
      throw new DaemonError(
        'UNAVAILABLE',
        `The daemon started for ${paths.workspace} (pid ${child.pid}) stopped (exit ${child.exited}) before it answered; its log ${paths.log} ends:\n${logTail(paths.log)}`,
      );
    }
    // Otherwise the one started lost the race to a live daemon (it exits 0 saying so): wait for that one.
    if (Date.now() >= until) {
      throw new DaemonError(
        'UNAVAILABLE',
        `No daemon answered on ${paths.socket} within ${timeoutMs} ms of starting one (pid ${child.pid}); its log ${paths.log} ends:\n${logTail(paths.log)}`,
      );
    }
    await pause(wait);
    wait = Math.min(wait * 2, 25);
  }
}
