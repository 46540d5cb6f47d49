/**
 * The thin client's side of finding a workspace's daemon. This version only finds a daemon that
 * already listens on the workspace's socket; starting one (`arium daemon run`) comes with the daemon
 * itself. Built-ins only: thin clients load it.
 */
import { readFileSync } from 'node:fs';
import { connect as connectSocket } from 'node:net';
import { DAEMON_PROTOCOL, daemonPaths } from './paths.js';

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

/** Whether something accepts connections on the socket (a socket file left by a dead daemon does not). */
function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = connectSocket(socket);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
}

/** The running daemon of the workspace, or null when none answers (a dead socket file is not one). */
export async function findDaemon(workspace: string, env: Env = process.env): Promise<DaemonLink | null> {
  const paths = daemonPaths(workspace, env);
  if (!(await answers(paths.socket))) return null;
  let record: Partial<DaemonLink> = {};
  try {
    record = JSON.parse(readFileSync(paths.record, 'utf8')) as Partial<DaemonLink>;
  } catch {
    // A daemon that has not written its record yet is still the one that answers.
  }
  if (typeof record.protocol === 'number' && record.protocol !== DAEMON_PROTOCOL) {
    throw new DaemonError(
      'VERSION',
      `The Arium daemon of ${paths.workspace} speaks protocol ${record.protocol}, this client ${DAEMON_PROTOCOL}; stop it (arium daemon stop) to let this version start its own`,
    );
  }
  return {
    socket: paths.socket,
    pid: typeof record.pid === 'number' ? record.pid : 0,
    version: typeof record.version === 'string' ? record.version : '',
    protocol: DAEMON_PROTOCOL,
    http: typeof record.http === 'string' ? record.http : null,
    log: paths.log,
    workspace: paths.workspace,
  };
}

/** findDaemon; when none runs, says how to start one. */
export async function ensureDaemon(workspace: string, options: { env?: Env; idleMs?: number; timeoutMs?: number } = {}): Promise<DaemonLink> {
  const found = await findDaemon(workspace, options.env);
  if (found) return found;
  throw new DaemonError('UNAVAILABLE', `No Arium daemon runs for ${daemonPaths(workspace, options.env).workspace}; start one with \`arium serve\``);
}
