import { execFile } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readlinkSync, statSync } from 'node:fs';

/**
 * What confines a Python call, decided once per runner from what the machine offers.
 *
 * - `bubblewrap`: the fork server runs in bubblewrap (new PID, network, IPC, UTS and mount namespaces,
 *   a read-only view of only the interpreter and the tools, an empty environment); each call then gets
 *   a PID and mount namespace of its own (see python/arium_server.py).
 * - `rlimits`: no namespaces — resource limits, a session of its own, a private working folder, an
 *   unprivileged uid when the engine runs as root, seccomp. Processes a tool detaches with setsid
 *   survive a call unless the engine runs as root (then everything of the call's uid is killed).
 */

export type IsolationMode = 'bubblewrap' | 'rlimits';

export interface Isolation {
  mode: IsolationMode;
  /** Why not bubblewrap, when it is not. */
  reason?: string;
}

const TRIAL_TIMEOUT_MS = 10_000;
let bwrapTrial: Promise<string | null> | null = null;

/** Null when bubblewrap can build the sandbox the runner uses; otherwise why not. Tried once per process. */
export function bwrapProblem(): Promise<string | null> {
  bwrapTrial ??= new Promise((resolve) => {
    const args = [...namespaceArgs(privileged()), '--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', 'true'];
    execFile('bwrap', args, { timeout: TRIAL_TIMEOUT_MS, env: {} }, (error, _stdout, stderr) => {
      if (!error) return resolve(null);
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return resolve('bubblewrap (bwrap) is not installed: apt-get install bubblewrap');
      resolve(`bubblewrap is installed but cannot build a sandbox here: ${String(stderr).trim().split('\n').pop() || error.message}`);
    });
  });
  return bwrapTrial;
}

export function privileged(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

function namespaceArgs(asRoot: boolean): string[] {
  const args = ['--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--die-with-parent', '--new-session'];
  // As root, bubblewrap needs no user namespace (and one would map the sandbox back to uid 0): the
  // server keeps root's capabilities inside to build each call's namespaces, and every call's process
  // drops to a uid of its own. Otherwise a user namespace in which the server holds capabilities;
  // each call's process drops all of them.
  if (!asRoot) args.push('--unshare-user', '--uid', '0', '--gid', '0', '--cap-add', 'ALL', '--disable-userns');
  return args;
}

export interface SandboxPaths {
  executable: string;
  /** Interpreter prefixes (made readable at the same paths). */
  roots: string[];
  harness: string;
  tools: string;
}

/** Folders at the top of the host tree that hold libraries the interpreter may load. */
const SYSTEM = ['/usr', '/lib', '/lib64', '/lib32', '/bin', '/sbin'];
const SYSTEM_FILES = ['/etc/ld.so.cache', '/etc/localtime', '/etc/mime.types'];

/** The bubblewrap command line of a fork server. Only what the interpreter needs is visible, read-only. */
export function bwrapCommand(paths: SandboxPaths, serverArgs: string[]): string[] {
  const args = namespaceArgs(privileged());
  for (const dir of SYSTEM) {
    if (!existsSync(dir)) continue;
    const stat = lstatSync(dir);
    if (stat.isSymbolicLink()) args.push('--symlink', readlinkSync(dir), dir);
    else if (stat.isDirectory()) args.push('--ro-bind', dir, dir);
  }
  for (const file of SYSTEM_FILES) args.push('--ro-bind-try', file, file);
  const made = new Set<string>();
  for (const root of paths.roots) {
    if (SYSTEM.some((dir) => root === dir || root.startsWith(`${dir}/`))) continue;
    // The folders above it are made in the sandbox as searchable by anyone: on the host they may not be
    // (pyenv under /root, mode 0700), and each call runs as an unprivileged uid.
    const parts = root.split('/').filter(Boolean);
    for (let i = 1; i < parts.length; i++) {
      const dir = `/${parts.slice(0, i).join('/')}`;
      if (!made.has(dir)) args.push('--perms', '0755', '--dir', dir);
      made.add(dir);
    }
    args.push('--ro-bind', root, root);
  }
  args.push('--ro-bind', paths.harness, '/arium', '--ro-bind', paths.tools, '/tools');
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--chdir', '/');
  args.push(paths.executable, ...serverArgs);
  return args;
}

/** Processes of this uid now: without a uid of its own, a call's RLIMIT_NPROC must leave room for them. */
export function processesOfThisUser(): number {
  const uid = typeof process.getuid === 'function' ? process.getuid() : -1;
  let count = 0;
  try {
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      try {
        if (statSync(`/proc/${name}`).uid === uid) count++;
      } catch {
        // gone meanwhile
      }
    }
  } catch {
    return 0;
  }
  return count;
}

export function describe(isolation: Isolation): string {
  return isolation.mode === 'bubblewrap'
    ? 'bubblewrap: PID, mount, network, IPC and UTS namespaces; a PID namespace, /tmp and /proc of its own per call; rlimits; seccomp; no capabilities'
    : 'rlimits only: no namespaces (no network or filesystem isolation); rlimits, a session and working folder of its own per call, seccomp';
}
