/**
 * The thin client's side of the daemon: find the workspace's daemon, or start one and wait for it.
 * Built-ins and the two daemon modules only: thin clients load it before anything of the engine.
 *
 * This is the short form that finds a daemon by its socket and starts `arium serve` detached; the
 * record, the protocol check and the start lock of the full daemon take its place.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DAEMON_PROTOCOL, daemonPaths } from './paths.js';
import { socketFetch } from './socket-fetch.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface DaemonLink {
  socket: string;
  pid: number;
  version: string;
  protocol: number;
  http: string | null;
  log: string;
  workspace: string;
}

export class DaemonError extends Error {
  override readonly name = 'DaemonError';
  constructor(
    readonly code: 'UNAVAILABLE' | 'DENIED' | 'VERSION',
    message: string,
  ) {
    super(message);
  }
}

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'bin', 'arium.js');

/** The running daemon of the workspace, or null when none answers (a dead socket file is not one). */
export async function findDaemon(workspace: string, env: Env = process.env): Promise<DaemonLink | null> {
  const paths = daemonPaths(workspace, env);
  try {
    const response = await socketFetch(paths.socket)('/healthz', { signal: AbortSignal.timeout(2000) });
    if (!response.ok) return null;
    await response.body?.cancel();
    const record = JSON.parse(readFileSync(paths.record, 'utf8')) as { pid?: number; version?: string };
    return {
      socket: paths.socket,
      pid: record.pid ?? 0,
      version: record.version ?? '',
      protocol: DAEMON_PROTOCOL,
      http: null,
      log: paths.log,
      workspace: paths.workspace,
    };
  } catch {
    return null;
  }
}

/** findDaemon, else starts one detached and waits until it answers; racing starters end with one daemon. */
export async function ensureDaemon(workspace: string, options: { env?: Env; idleMs?: number; timeoutMs?: number } = {}): Promise<DaemonLink> {
  const env = options.env ?? process.env;
  const found = await findDaemon(workspace, env);
  if (found) return found;
  const paths = daemonPaths(workspace, env);
  const timeoutMs = options.timeoutMs ?? 30_000;
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  // One starter at a time: the others wait for its daemon. A marker older than the timeout is a starter that died.
  const starting = `${paths.lock}.starting`;
  try {
    if (Date.now() - statSync(starting).mtimeMs > timeoutMs) rmSync(starting, { force: true });
  } catch {}
  let starter = false;
  try {
    closeSync(openSync(starting, 'wx', 0o600));
    starter = true;
  } catch {}
  try {
    if (starter) {
      const log = openSync(paths.log, 'a', 0o600);
      const child = spawn(process.execPath, ['--no-node-snapshot', BIN, 'serve', '--workspace', paths.workspace], {
        detached: true,
        stdio: ['ignore', log, log],
        env: { ...process.env, ...env } as NodeJS.ProcessEnv,
      });
      child.unref();
      closeSync(log);
    }
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const link = await findDaemon(workspace, env);
      if (link) return link;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new DaemonError('UNAVAILABLE', `The Arium daemon of ${paths.workspace} did not answer within ${timeoutMs} ms; see its log ${paths.log}`);
  } finally {
    if (starter) rmSync(starting, { force: true });
  }
}
