/**
 * Where a workspace's engine daemon is found: its socket, its record, its log and its lock. Clients load
 * this before anything else of Arium, so it imports Node's built-ins only.
 */
import { createHash } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** Bumped when a client and a daemon of different builds could no longer understand each other. */
export const DAEMON_PROTOCOL = 1;

/** Linux's `sun_path` holds 108 bytes with the final NUL; a longer socket path cannot be bound. */
const SOCKET_PATH_MAX = 107;

export interface DaemonPaths {
  /** The workspace's real path (links resolved): the same workspace reached two ways has one daemon. */
  workspace: string;
  /** 16 hex digits of the SHA-256 of `workspace`: names the files below. */
  id: string;
  /** The private folder (0700) holding the files below. */
  dir: string;
  /** The Unix socket the daemon listens on (0600). */
  socket: string;
  /** JSON written by the daemon once it listens: pid, version, protocol, socket, HTTP address, log. */
  record: string;
  /** The detached daemon's standard output and error. */
  log: string;
  /** Held by the one daemon of the workspace (a ProjectLock file). */
  lock: string;
}

function realWorkspace(workspace: string): string {
  const absolute = resolve(workspace);
  try {
    return realpathSync(absolute);
  } catch {
    // Not made yet: the daemon says so when it opens it.
    return absolute;
  }
}

/**
 * `$XDG_RUNTIME_DIR/arium/` (a per-user folder the login session owns), else `<workspace>/.arium/run/`;
 * when the socket's path would not fit in `sun_path` there, `<tmpdir>/arium-<uid>/`.
 */
export function daemonPaths(workspace: string, env: Readonly<Record<string, string | undefined>> = process.env): DaemonPaths {
  const real = realWorkspace(workspace);
  const id = createHash('sha256').update(real).digest('hex').slice(0, 16);
  const candidates = [
    ...(env.XDG_RUNTIME_DIR ? [join(env.XDG_RUNTIME_DIR, 'arium')] : []),
    join(real, '.arium', 'run'),
    join(tmpdir(), `arium-${process.getuid?.() ?? 'user'}`),
  ];
  const dir = candidates.find((each) => Buffer.byteLength(join(each, `${id}.sock`)) <= SOCKET_PATH_MAX) ?? (candidates.at(-1) as string);
  return {
    workspace: real,
    id,
    dir,
    socket: join(dir, `${id}.sock`),
    record: join(dir, `${id}.json`),
    log: join(dir, `${id}.log`),
    lock: join(dir, `${id}.lock`),
  };
}
