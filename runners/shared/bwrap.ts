import { execFile } from 'node:child_process';
import { existsSync, lstatSync, readlinkSync, statSync } from 'node:fs';
import { posix } from 'node:path';

// node:child_process, not execa: one short trial run of bubblewrap, on the engine's start path. Importing execa takes 0.1-0.4 s on the
// 2-core development machine, which every engine start would pay (ARCHITECTURE.md, "What a start costs").

/**
 * Bubblewrap as Arium's sandboxes use it: the namespaces, the trial that says whether it works here, and
 * the read-only view of the host a sandboxed program needs. The Python runner's fork server
 * (runners/python/isolation.ts) and `system.exec` (runners/builtin/exec/) build their command lines
 * from these, so both confine the same way.
 */

export const TRIAL_TIMEOUT_MS = 10_000;
const bwrapTrials = new Map<string, Promise<string | null>>();

/** Null when bubblewrap (`bwrap`, or the program at that path) can build the sandbox the runners use; otherwise why not. Tried once per process. */
export function bwrapProblem(bwrap = 'bwrap'): Promise<string | null> {
  let trial = bwrapTrials.get(bwrap);
  if (trial) return trial;
  trial = new Promise((resolve) => {
    const args = [...namespaceArgs(privileged()), '--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', 'true'];
    execFile(bwrap, args, { timeout: TRIAL_TIMEOUT_MS, env: {} }, (error, _stdout, stderr) => {
      if (!error) return resolve(null);
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return resolve(`bubblewrap (${bwrap}) is not installed: apt-get install bubblewrap`);
      resolve(`bubblewrap is installed but cannot build a sandbox here: ${String(stderr).trim().split('\n').pop() || error.message}`);
    });
  });
  bwrapTrials.set(bwrap, trial);
  return trial;
}

export function privileged(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

export function namespaceArgs(asRoot: boolean): string[] {
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

/** What of the host a sandbox shows, read-only at the same paths. */
export interface HostPaths {
  executable: string;
  /** Prefixes of the programs it runs (made readable at the same paths). */
  roots: string[];
  /** Folders and files the program reads besides its prefixes (Interpreter.needs). */
  needs?: string[];
  /** The shared libraries it loads (libraries.ts); null or absent: show the system's library folders whole. */
  libraries?: string[] | null;
}

/** Folders at the top of the host tree that hold the system's programs and libraries. */
export const SYSTEM = ['/usr', '/lib', '/lib64', '/lib32', '/bin', '/sbin'];
const SYSTEM_FILES = ['/etc/ld.so.cache', '/etc/localtime', '/etc/mime.types'];
/** How many symbolic links one path may pass through before it counts as a loop (as the kernel's 40). */
const MAX_LINKS = 40;

/**
 * The host's part of a bubblewrap sandbox, whichever tool builds it: only what the interpreter needs, read-only
 * — its prefixes (with the folders above them made searchable by anyone: on the host they may not be,
 * pyenv under /root is 0700, and each call runs as an unprivileged uid), the folders of its library path
 * that lie in the system's folders (a system Python's /usr/lib/python3.x, not all of /usr), its
 * executable, the shared libraries it and its extension modules load, with every symbolic link on the
 * way to them (/lib64 → usr/lib64, libz.so.1 → libz.so.1.2.13). No other program of the host is there
 * to run. Without the list of libraries (no `ldd`), the system's library folders are shown whole
 * instead. What the sandbox adds of its own (the Python harness, the tools, system.exec's working copy)
 * each user binds after these.
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

export function hostLayout(paths: HostPaths): SandboxLayout {
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
