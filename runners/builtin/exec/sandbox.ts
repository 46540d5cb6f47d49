import { spawn } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { dirname, posix } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { hostLayout, namespaceArgs, SYSTEM } from '../../shared/bwrap.js';
import { execFilter } from '../../shared/seccomp.js';
import type { ExecLimits } from './settings.js';

// node:child_process, not execa: the builtin runner loads this module at start, where importing execa
// (0.1-0.4 s on the 2-core development machine) would cost every engine start (ARCHITECTURE.md, "What a start
// costs"), and each call's process needs a fourth pipe and a process group of its own, which spawn gives as is.

/**
 * One program run in bubblewrap, as system.exec runs it. The engine (root) starts `unshare -m` and a
 * shell that mounts the call's overlay (the mirror's copy of `cwd` below, the call's own folder above)
 * in that private mount namespace, then execs bubblewrap, which shows it at /vfs<cwd>. Mounting the
 * overlay here, not with bubblewrap's --overlay, keeps to bubblewrap 0.8 (Debian 12's), which has none.
 *
 * Inside: new PID, network, IPC, UTS and mount namespaces, no network at all (only a loopback of its
 * own); the system's program folders read-only, the program's own prefix read-only when it lives
 * elsewhere (a pyenv interpreter under /root), a fresh /proc, /dev and /tmp; an empty environment but
 * for a fixed PATH, HOME and LANG and the additions the call was allowed. prlimit sets the rlimits, and
 * setpriv drops to the call's uid with no groups and no capabilities before the program starts
 * (bubblewrap sets no_new_privs, so no setuid or file capability raises it again). bubblewrap loads
 * seccomp.ts's filter first: no new namespaces (a user namespace would give the program every
 * capability in it), no mounts.
 */

/** Where the VFS root is inside the sandbox: a VFS path /a/b is /vfs/a/b there. */
export const VFS_MOUNT = '/vfs';
const BASE_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: '/usr/local/bin:/usr/bin:/bin',
  HOME: '/tmp',
  LANG: 'C.UTF-8',
  // The working copy belongs to the engine's user, not to the call's uid: without this, git refuses a
  // repository there ("detected dubious ownership"). Only the call's own copy is there to trust.
  GIT_CONFIG_COUNT: '1',
  GIT_CONFIG_KEY_0: 'safe.directory',
  GIT_CONFIG_VALUE_0: '*',
});
/** Read-only extras of /etc that programs commonly need: `cc` is a link through /etc/alternatives. */
const ETC_EXTRAS = ['/etc/alternatives'];
/** The descriptor bubblewrap reads the seccomp filter from (seccomp.ts): no new namespaces, no mounts. */
const SECCOMP_FD = 4;
const MOUNT_SCRIPT = 'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && shift 4 && exec "$@"';

export interface SandboxRun {
  /** Absolute host paths of bubblewrap, unshare, prlimit and setpriv (settings.ts found them). */
  tools: { bwrap: string; unshare: string; prlimit: string; setpriv: string };
  program: string;
  args: readonly string[];
  /** Overlay: the lower folder (a link to the mirror's copy of cwd), the call's upper and work folders, and where to mount it. */
  overlay: { lower: string; upper: string; work: string; merged: string };
  /** VFS path of the working folder (writable). */
  cwd: string;
  /** Read-only VFS paths besides it: [host path in the mirror, VFS path]. */
  reads: ReadonlyArray<[string, string]>;
  env: Readonly<Record<string, string>>;
  stdin: string | undefined;
  uid: number;
  limits: ExecLimits;
  signal: AbortSignal;
}

export interface Captured {
  text: string;
  bytes: number;
  truncated: boolean;
}

export interface SandboxOutcome {
  /** The program's exit code; null when it did not start or was killed. */
  exitCode: number | null;
  /** True when the sandbox itself could not be built (bubblewrap's own error in `stderr`). */
  sandboxFailed: boolean;
  stdout: Captured;
  stderr: Captured;
  /** Set when the process was killed because the call's signal fired (timeout or cancel). */
  killed: boolean;
}

/** The prefix of a program outside the system's folders (…/versions/3.12.1 for …/versions/3.12.1/bin/python3), shown read-only. */
export function programRoot(program: string): string | null {
  const real = realpathSync(program);
  const inSystem = (path: string) => SYSTEM.some((dir) => path === dir || path.startsWith(`${dir}/`));
  if (inSystem(program) && inSystem(real)) return null;
  return dirname(dirname(real));
}

export function bwrapArgs(run: SandboxRun): string[] {
  // namespaceArgs(true): the engine is root, so bubblewrap needs no user namespace; setpriv drops to the call's uid.
  const args = namespaceArgs(true);
  const root = programRoot(run.program);
  const layout = hostLayout({ executable: run.program, roots: root ? [root] : [], libraries: null });
  // /etc searchable by the call's uid: bubblewrap, as root, makes the folders above a bind 0700.
  args.push('--perms', '0755', '--dir', '/etc');
  for (const dir of layout.dirs) args.push('--perms', '0755', '--dir', dir);
  for (const [target, path] of layout.symlinks) args.push('--symlink', target, path);
  for (const file of layout.files) args.push('--ro-bind', file, file);
  for (const extra of ETC_EXTRAS) if (existsSync(extra)) args.push('--ro-bind', extra, extra);
  for (const [from, to] of layout.binds) args.push('--ro-bind', from, to);
  args.push('--proc', '/proc', '--dev', '/dev', '--perms', '1777', '--size', String(run.limits.tmp_bytes), '--tmpfs', '/tmp');
  // Outer paths first, so a read-only folder above cwd does not hide it.
  const mounts: Array<[string, string, string]> = [
    ...run.reads.map(([host, path]): [string, string, string] => ['--ro-bind', host, path]),
    ['--bind', run.overlay.merged, run.cwd],
  ];
  mounts.sort((a, b) => a[2].length - b[2].length);
  // The folders above each mount point, searchable by the call's uid (bubblewrap, as root, would make them 0700).
  const above = new Set<string>([VFS_MOUNT]);
  for (const [, , path] of mounts) for (let dir = posix.dirname(inside(path)); dir.startsWith(VFS_MOUNT); dir = posix.dirname(dir)) above.add(dir);
  for (const dir of [...above].sort((a, b) => a.length - b.length)) if (dir !== inside(run.cwd)) args.push('--perms', '0755', '--dir', dir);
  for (const [how, host, path] of mounts) args.push(how, host, inside(path));
  args.push('--chdir', inside(run.cwd));
  for (const [key, value] of Object.entries({ ...BASE_ENV, ...run.env })) args.push('--setenv', key, value);
  args.push('--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID', '--json-status-fd', '3', '--seccomp', String(SECCOMP_FD));
  const { limits } = run;
  args.push(
    run.tools.prlimit,
    `--as=${limits.memory_mb * 1024 * 1024}`,
    `--nproc=${limits.processes}`,
    `--fsize=${limits.file_bytes}`,
    `--nofile=${limits.open_files}`,
    '--core=0',
    '--',
    run.tools.setpriv,
    `--reuid=${run.uid}`,
    `--regid=${run.uid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--',
    run.program,
    ...run.args,
  );
  return args;
}

export function inside(vfsPath: string): string {
  return vfsPath === '/' ? VFS_MOUNT : posix.join(VFS_MOUNT, vfsPath);
}

/** Runs the program; resolves when bubblewrap and everything in its PID namespace are gone. */
export function runSandboxed(run: SandboxRun): Promise<SandboxOutcome> {
  const { overlay } = run;
  const argv = [
    '--mount',
    '--propagation',
    'private',
    '--',
    '/bin/sh',
    '-c',
    MOUNT_SCRIPT,
    'sh',
    overlay.lower,
    overlay.upper,
    overlay.work,
    overlay.merged,
    run.tools.bwrap,
    ...bwrapArgs(run),
  ];
  return new Promise((resolve, reject) => {
    // A process group of its own, so that a timeout kills unshare, the shell and bubblewrap at once;
    // bubblewrap's --die-with-parent and its PID namespace take everything inside with it.
    const filter = execFilter();
    if (filter === null) {
      reject(new Error(`no seccomp filter for ${process.arch}`));
      return;
    }
    const child = spawn(run.tools.unshare, argv, { env: {}, detached: true, stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'] });
    const seccomp = child.stdio[SECCOMP_FD] as Writable;
    seccomp.on('error', () => {});
    seccomp.end(filter);
    const stdout = capture(child.stdout, run.limits.output_bytes);
    const stderr = capture(child.stderr, run.limits.output_bytes);
    let status = '';
    (child.stdio[3] as Readable).setEncoding('utf8').on('data', (chunk: string) => {
      if (status.length < 65_536) status += chunk;
    });
    let killed = false;
    const kill = () => {
      killed = true;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    if (run.signal.aborted) kill();
    else run.signal.addEventListener('abort', kill, { once: true });
    const stdin = child.stdin as Writable;
    stdin.on('error', () => {});
    stdin.end(run.stdin ?? '');
    child.on('error', (error) => {
      run.signal.removeEventListener('abort', kill);
      reject(error);
    });
    child.on('close', (code) => {
      run.signal.removeEventListener('abort', kill);
      const exit = /"exit-code"\s*:\s*(\d+)/.exec(status);
      const started = /"child-pid"/.test(status);
      resolve({
        exitCode: exit ? Number(exit[1]) : killed ? null : started ? code : null,
        sandboxFailed: !started && !killed,
        stdout: stdout.done(),
        stderr: stderr.done(),
        killed,
      });
    });
  });
}

/** Keeps the first `limit` bytes of a stream and counts the rest. */
function capture(stream: Readable | null, limit: number): { done(): Captured } {
  const kept: Buffer[] = [];
  let have = 0;
  let bytes = 0;
  stream?.on('data', (chunk: Buffer) => {
    bytes += chunk.length;
    if (have < limit) {
      const part = chunk.length > limit - have ? chunk.subarray(0, limit - have) : chunk;
      kept.push(part);
      have += part.length;
    }
  });
  return {
    done: () => ({ text: Buffer.concat(kept).toString('utf8'), bytes, truncated: bytes > have }),
  };
}

/**
 * The tree the program left, as the overlay shows it (upper over lower), listed by `find` in a mount
 * namespace of its own: the only way to see through an opaque folder without reading extended
 * attributes. Output: `find -printf '%y %P\0'`.
 */
export function listMerged(tools: SandboxRun['tools'] & { find: string }, overlay: SandboxRun['overlay']): Promise<string> {
  const script = 'mount -t overlay overlay -o "ro,lowerdir=$1:$2" "$3" && exec "$4" "$3" -mindepth 1 -printf "%y %P\\0"';
  return new Promise((resolve, reject) => {
    const child = spawn(
      tools.unshare,
      ['--mount', '--propagation', 'private', '--', '/bin/sh', '-c', script, 'sh', overlay.upper, overlay.lower, overlay.merged, tools.find],
      { env: {}, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      err += chunk;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out).toString('utf8'));
      else reject(new Error(`listing the program's tree failed (${code}): ${err.trim()}`));
    });
  });
}
