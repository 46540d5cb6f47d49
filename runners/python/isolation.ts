import { execFile } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readlinkSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, posix, resolve, sep } from 'node:path';
import type { Interpreter } from './interpreter.js';

/**
 * What confines a Python call, decided once per runner from what the machine offers.
 *
 * - `bubblewrap`: the fork server runs in bubblewrap (new PID, network, IPC, UTS and mount namespaces,
 *   a read-only view of only the interpreter and the tools, an empty environment); each call then gets
 *   a PID and mount namespace of its own (see runners/python/sandbox/arium_server.py).
 * - `unshare`: the same sandbox built by the fork server itself with unshare(2), mounts and pivot_root
 *   (runners/python/sandbox/arium_unshare.py), for machines with namespaces but without bubblewrap.
 * - `rlimits`: no namespaces — resource limits, a session of its own, a private working folder, an
 *   unprivileged uid when the engine runs as root, seccomp. Processes a tool detaches with setsid
 *   survive a call unless the engine runs as root (then everything of the call's uid is killed).
 */

export type IsolationMode = 'bubblewrap' | 'unshare' | 'rlimits';

export interface Isolation {
  mode: IsolationMode;
  /** Why not bubblewrap, when it is not. */
  reason?: string;
}

/** The Landlock ABI that scopes abstract Unix sockets (Linux 6.12): calls get their own with it (runners/python/sandbox/arium_child.py). */
export const LANDLOCK_SCOPES = 6;

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

let unshareTrial: Promise<string | null> | null = null;

/**
 * Null when this process may make the namespaces the `unshare` tier needs (tried once with util-linux
 * `unshare`, which asks the kernel the same thing the fork server's unshare(2) will); otherwise why not.
 */
export function unshareProblem(): Promise<string | null> {
  unshareTrial ??= new Promise((resolve) => {
    const args = [...(privileged() ? [] : ['--user', '--map-root-user']), '--net', '--ipc', '--uts', '--mount', '--pid', '--fork', 'true'];
    execFile('unshare', args, { timeout: TRIAL_TIMEOUT_MS, env: {} }, (error, _stdout, stderr) => {
      if (!error) return resolve(null);
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return resolve('unshare (util-linux) is not installed');
      resolve(`namespaces are refused here: ${String(stderr).trim().split('\n').pop() || error.message}`);
    });
  });
  return unshareTrial;
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
  // (Not --disable-userns: bubblewrap implements it with a second, nested user namespace, which would
  // leave the server without the capabilities over its PID namespace it needs to make one per call. The
  // call processes' seccomp filter refuses new user namespaces instead.)
  if (!asRoot) args.push('--unshare-user', '--uid', '0', '--gid', '0', '--cap-add', 'ALL');
  return args;
}

export interface SandboxPaths {
  executable: string;
  /** Interpreter prefixes (made readable at the same paths). */
  roots: string[];
  harness: string;
  tools: string;
  /** Folders and files the interpreter reads besides its prefixes (Interpreter.needs). */
  needs?: string[];
  /** The shared libraries it loads (libraries.ts); null or absent: show the system's library folders whole. */
  libraries?: string[] | null;
  /**
   * A pinned project's environment (environment.ts), shown read-only at `ENV_MOUNT` and run from there.
   * Not at its own path: that may lie under /tmp, which each call covers with a fresh one.
   */
  environment?: string;
}

/** Where a pinned project's environment is inside the sandbox; a venv finds its prefix from its executable's path. */
export const ENV_MOUNT = '/venv';

/** Folders at the top of the host tree that hold the system's programs and libraries. */
const SYSTEM = ['/usr', '/lib', '/lib64', '/lib32', '/bin', '/sbin'];
const SYSTEM_FILES = ['/etc/ld.so.cache', '/etc/localtime', '/etc/mime.types'];
/** How many symbolic links one path may pass through before it counts as a loop (as the kernel's 40). */
const MAX_LINKS = 40;

/**
 * What a sandboxed fork server sees, whichever tool builds it: only what the interpreter needs, read-only
 * — its prefixes (with the folders above them made searchable by anyone: on the host they may not be,
 * pyenv under /root is 0700, and each call runs as an unprivileged uid), the folders of its library path
 * that lie in the system's folders (a system Python's /usr/lib/python3.x, not all of /usr), its
 * executable, the shared libraries it and its extension modules load, with every symbolic link on the
 * way to them (/lib64 → usr/lib64, libz.so.1 → libz.so.1.2.13) — and the harness at /arium and the
 * tools at /tools. No other program of the host is there to run. Without the list of libraries (no
 * `ldd`), the system's library folders are shown whole instead.
 */
export interface SandboxLayout {
  /** [host path, sandbox path] of folders, read-only. */
  binds: Array<[string, string]>;
  /** [link target, sandbox path]. */
  symlinks: Array<[string, string]>;
  /** Single files bound read-only at the same path, where they exist. */
  files: string[];
  /** Folders made (mode 0755) before the binds under them. */
  dirs: string[];
}

export function sandboxLayout(paths: SandboxPaths): SandboxLayout {
  const layout: SandboxLayout = { binds: [], symlinks: [], files: SYSTEM_FILES.filter((f) => existsSync(f)), dirs: [] };
  const libraries = paths.libraries ?? null;
  const inSystem = (path: string) => SYSTEM.some((dir) => path === dir || path.startsWith(`${dir}/`));
  if (libraries === null) {
    for (const dir of SYSTEM) {
      if (!existsSync(dir)) continue;
      const stat = lstatSync(dir);
      if (stat.isSymbolicLink()) layout.symlinks.push([readlinkSync(dir), dir]);
      else if (stat.isDirectory()) layout.binds.push([dir, dir]);
    }
  }
  const shown: string[] = [];
  const covered = (path: string) => shown.some((dir) => path === dir || path.startsWith(`${dir}/`));
  for (const root of paths.roots) {
    if (inSystem(root)) continue;
    const parts = root.split('/').filter(Boolean);
    for (let i = 1; i < parts.length; i++) {
      const dir = `/${parts.slice(0, i).join('/')}`;
      if (!layout.dirs.includes(dir)) layout.dirs.push(dir);
    }
    layout.binds.push([root, root]);
    shown.push(root);
  }
  if (libraries !== null) {
    const links = new Map<string, string>();
    const files = new Set<string>();
    for (const path of [...(paths.needs ?? []), paths.executable, ...libraries]) {
      if (covered(path)) continue;
      const real = resolveLinks(path, links);
      if (real === null || covered(real)) continue;
      if (statSync(real).isDirectory()) {
        layout.binds.push([real, real]);
        shown.push(real);
      } else {
        files.add(real);
      }
    }
    for (const [path, target] of links) if (!covered(path)) layout.symlinks.push([target, path]);
    for (const file of files) if (!covered(file)) layout.files.push(file);
    // The folders above what is shown, searchable by a call's uid (made by the tool that builds the
    // view, they would otherwise have its mode: bubblewrap makes them 0700 as root).
    for (const path of [...layout.symlinks.map(([, link]) => link), ...layout.files, ...layout.binds.map(([, to]) => to)]) {
      for (let dir = posix.dirname(path); dir !== '/' && !layout.dirs.includes(dir); dir = posix.dirname(dir)) layout.dirs.push(dir);
    }
    layout.dirs.sort((a, b) => a.length - b.length);
  }
  if (paths.environment) layout.binds.push([paths.environment, ENV_MOUNT]);
  layout.binds.push([paths.harness, '/arium'], [paths.tools, '/tools']);
  return layout;
}

/**
 * The real path of `path`, found one component at a time so that every symbolic link on the way is
 * recorded in `links` (link path → its target as written): the sandbox needs the links too, since
 * programs name libraries through them. Null when the path is missing or loops.
 */
function resolveLinks(path: string, links: Map<string, string>): string | null {
  let parts = path.split('/').filter(Boolean);
  let real = '';
  let hops = 0;
  for (let i = 0; i < parts.length; ) {
    const next = `${real}/${parts[i]}`;
    let stat: ReturnType<typeof lstatSync>;
    try {
      stat = lstatSync(next);
    } catch {
      return null;
    }
    if (stat.isSymbolicLink()) {
      if (++hops > MAX_LINKS) return null;
      const target = readlinkSync(next);
      links.set(next, target);
      // `real` holds no link, so ".." in the target can be resolved by the text.
      const resolved = posix.normalize(target.startsWith('/') ? target : `${real}/${target}`);
      parts = [...resolved.split('/').filter(Boolean), ...parts.slice(i + 1)];
      real = '';
      i = 0;
      continue;
    }
    real = next;
    i++;
  }
  return real || '/';
}

/**
 * What the sandbox shows for a server that runs in a pinned environment: the environment itself at
 * ENV_MOUNT, and around it what its interpreter needs of the host (the base interpreter the venv's
 * python links to, its prefixes, the shared libraries), never the environment's host path.
 */
export function environmentPaths(
  interpreter: Pick<Interpreter, 'roots' | 'needs'>,
  base: Pick<Interpreter, 'executable'>,
  environment: string,
  harness: string,
  tools: string,
  libraries: string[] | null,
): SandboxPaths {
  const outside = (path: string) => path !== environment && !path.startsWith(`${environment}${sep}`);
  const python = join(environment, 'bin', 'python3');
  let executable = base.executable;
  try {
    const target = readlinkSync(python);
    executable = isAbsolute(target) ? target : resolve(dirname(python), target);
  } catch {
    // Not a link (a venv made with --copies): the base interpreter is what it copied.
  }
  return {
    executable,
    roots: interpreter.roots.filter(outside),
    harness,
    tools,
    needs: interpreter.needs.filter(outside),
    libraries: libraries === null ? null : libraries.filter(outside),
    environment,
  };
}

/** The bubblewrap command line of a fork server. Only what the interpreter needs is visible, read-only. */
export function bwrapCommand(paths: SandboxPaths, serverArgs: string[]): string[] {
  const args = namespaceArgs(privileged());
  const layout = sandboxLayout(paths);
  for (const dir of layout.dirs) args.push('--perms', '0755', '--dir', dir);
  for (const [target, path] of layout.symlinks) args.push('--symlink', target, path);
  for (const file of layout.files) args.push('--ro-bind', file, file);
  for (const [from, to] of layout.binds) args.push('--ro-bind', from, to);
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--chdir', '/');
  args.push(paths.environment ? `${ENV_MOUNT}/bin/python3` : paths.executable, ...serverArgs);
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
  const namespaces =
    'PID, mount, network, IPC and UTS namespaces; a read-only view of only the interpreter and the tools; a PID namespace, /tmp and /proc of its own per call; rlimits; seccomp; no capabilities';
  if (isolation.mode === 'bubblewrap') return `bubblewrap: ${namespaces}`;
  if (isolation.mode === 'unshare') return `unshare (no bubblewrap; the fork server builds the sandbox itself): ${namespaces}`;
  return 'rlimits only: no namespaces (no network or filesystem isolation); rlimits, a session and working folder of its own per call, seccomp';
}
