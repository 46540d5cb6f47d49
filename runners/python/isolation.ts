import { execFile } from 'node:child_process';
import { readdirSync, readlinkSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve, sep } from 'node:path';
import { type HostPaths, hostLayout, namespaceArgs, privileged, type SandboxLayout, TRIAL_TIMEOUT_MS } from '../shared/bwrap.js';
import type { Interpreter } from './interpreter.js';

// node:child_process, not execa: one short trial run of unshare, on the engine's start path. Importing execa takes 0.1-0.4 s on the
// 2-core development machine, which every engine start would pay (ARCHITECTURE.md, "What a start costs").

export { bwrapProblem, privileged, type SandboxLayout } from '../shared/bwrap.js';

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

export interface SandboxPaths extends HostPaths {
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

/**
 * What a sandboxed fork server sees: the host's part (hostLayout: the interpreter, its libraries), then
 * its environment at ENV_MOUNT, the harness at /arium and the tools at /tools.
 */
export function sandboxLayout(paths: SandboxPaths): SandboxLayout {
  const layout = hostLayout(paths);
  if (paths.environment) layout.binds.push([paths.environment, ENV_MOUNT]);
  layout.binds.push([paths.harness, '/arium'], [paths.tools, '/tools']);
  return layout;
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
