/**
 * The command line that runs a provider's stdio MCP server in bubblewrap, contained the way `system.exec`
 * contains a program (runners/builtin/exec/sandbox.ts), from the same parts (runners/shared/bwrap.ts for
 * the namespaces and the read-only view of the host, runners/shared/seccomp.ts for the filter):
 *
 * - New PID, IPC, UTS, mount and network namespaces: no network at all (a loopback of its own) unless the
 *   provider declares `net.fetch`, and then the host's network whole. A list of hosts cannot be enforced
 *   without a proxy the server's own code could not bypass, so a partial list is refused, never pretended.
 * - Of the host's files, only the system's program folders, the server's own program and install folder,
 *   and the host paths the provider declares, all read-only but the ones it declares writable; a fresh
 *   /proc, /dev and /tmp (a size-bounded tmpfs). Not /etc/shadow, not the home folders, not the project.
 * - As root: the server runs as an unprivileged uid of the provider's own, with no groups and no
 *   capabilities (setpriv, as system.exec). Otherwise: a user namespace mapping the engine's uid to 65534.
 * - rlimits (prlimit): data memory, processes (a fork bomb stops there), file size, open files.
 * - seccomp: no new namespaces, no mounts, no ptrace, bpf, keyrings and the rest seccomp.ts lists.
 *
 * `sandboxedServer` is a pure function of the provider's settings and what `sandboxAvailable` found: it
 * starts nothing. Its result goes to the MCP SDK's StdioClientTransport as `{ command, args, env }`.
 */
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { resolveProgram } from '../../runners/builtin/exec/settings.js';
import { bwrapProblem, namespaceArgs, privileged } from '../../runners/shared/bwrap.js';
import { execFilter } from '../../runners/shared/seccomp.js';
import { checkEnv, checkLimits, checkNetwork, checkPath, type SandboxLimits, SandboxRefusal, type SandboxSpec } from './sandbox-settings.js';
import { BASE_PATH, hostView, installFolders, shebangInterpreter, unique } from './sandbox-view.js';

export { DEFAULT_SANDBOX_LIMITS, SANDBOX_LIMITS_SCHEMA, type SandboxLimits, SandboxRefusal, type SandboxSpec } from './sandbox-settings.js';

/**
 * As root, each provider's server runs as a uid of its own from this range (system.exec's calls use
 * 1,690,000,000 and up, the Python runner's 1,700,000,000): RLIMIT_NPROC counts per uid, so one server's
 * fork bomb cannot starve another's or the engine. The uid is the provider name's hash in the range
 * unless the settings name one.
 */
export const PROVIDER_UID_BASE = 1_680_000_000;
export const PROVIDER_UID_SLOTS = 65_536;
/** The uid the server runs as without root (a user namespace maps the engine's uid to it): "nobody". */
const USERNS_UID = 65_534;

/** What the machine offers, from `sandboxAvailable()`. */
export interface SandboxHost {
  /** Null when stdio servers can be sandboxed here; otherwise why not. */
  problem: string | null;
  /** How to fix `problem`. */
  fix: string | null;
  /** Absolute path of bubblewrap, or null. */
  bwrap: string | null;
  /** The engine runs as root: the server drops to a uid of its own. Otherwise it runs in a user namespace. */
  root: boolean;
  /** The kernel lets an unprivileged process make a user namespace (null: unknown). Needed when not root. */
  userNamespaces: boolean | null;
  /** The seccomp filter exists for this architecture. */
  seccomp: boolean;
  /** Absolute paths of the helpers the command line runs. */
  tools: { bash: string; base64: string; prlimit: string; setpriv: string } | null;
  /** One line for `arium doctor`: what stdio servers get here, or why they cannot be sandboxed. */
  summary: string;
}

/** How the server is contained, for `status().details`, `arium doctor` and the inspector. */
export interface SandboxDescription {
  sandboxed: boolean;
  /** `setpriv` (root drops to `uid`) or `user-namespace`. */
  mode?: 'setpriv' | 'user-namespace';
  uid?: number;
  /** `none`: a network namespace of its own (only its loopback); `host`: the host's network, every address. */
  network?: 'none' | 'host';
  /** Host paths shown read-only besides the system's folders (the program, its install folder, declared reads). */
  reads?: string[];
  writes?: string[];
  limits?: SandboxLimits;
  /** One line for people. */
  summary: string;
}

export interface SandboxedCommand {
  command: string;
  args: string[];
  env: Record<string, string>;
  describe: SandboxDescription;
}

const SECCOMP_FD = 4;
/**
 * Hands bubblewrap the seccomp filter on descriptor 4 without a file on disk and keeps the server's
 * stdin and stdout the transport's pipes: the filter travels base64 in $1, decoded into a pipe that
 * becomes fd 4 of the pipeline's last element, which execs bubblewrap with the saved stdin. bash's
 * `lastpipe` runs that last element in the shell itself, so bubblewrap replaces the shell: it is the
 * engine's own child, reaped by it, and `--die-with-parent` watches the engine, not a shell left behind.
 */
const SECCOMP_SCRIPT = 'shopt -s lastpipe; f=$1; b=$2; shift 2; exec 3<&0; printf %s "$f" | "$b" -d | { exec 4<&0 0<&3 3<&-; exec "$@"; }';

/** What this machine offers for sandboxed stdio servers. Probes once per bubblewrap path (a trial sandbox). */
export async function sandboxAvailable(bwrap = 'bwrap'): Promise<SandboxHost> {
  const host = await probe(bwrap);
  const summary =
    host.problem !== null
      ? `stdio servers cannot be sandboxed here: ${host.problem}`
      : `stdio servers run in bubblewrap (${host.bwrap}): ${host.root ? 'each as a uid of its own' : 'each in a user namespace, as uid 65534'}, seccomp for ${process.arch}`;
  return { ...host, summary };
}

async function probe(bwrap: string): Promise<Omit<SandboxHost, 'summary'>> {
  const root = privileged();
  const userNamespaces = readUserNamespaces();
  const seccomp = execFilter() !== null;
  const found: Record<string, string> = {};
  for (const name of ['bash', 'base64', 'prlimit', 'setpriv']) {
    const program = resolveProgram(name, '/');
    if (program.path !== null) found[name] = program.path;
  }
  const tools = Object.keys(found).length === 4 ? (found as SandboxHost['tools']) : null;
  const bwrapPath = resolveProgram(bwrap, '/').path;
  const host = { root, userNamespaces, seccomp, tools, bwrap: bwrapPath };
  const trial = await bwrapProblem(bwrap);
  if (trial !== null) {
    const userns = !root && userNamespaces === false ? ' (unprivileged user namespaces are off: sysctl user.max_user_namespaces)' : '';
    return {
      ...host,
      problem: `${trial}${userns}`,
      fix: 'install bubblewrap (apt-get install bubblewrap) and let it run here, or set "sandbox": false on the provider to run its server uncontained',
    };
  }
  if (!seccomp) {
    return {
      ...host,
      problem: `there is no seccomp filter for this machine's architecture (${process.arch}; x64 and arm64 have one)`,
      fix: 'run the engine on x86-64 or arm64, or set "sandbox": false on the provider',
    };
  }
  if (tools === null) {
    return {
      ...host,
      problem: 'sandboxed servers need bash, base64 (coreutils), prlimit and setpriv (util-linux) on the host',
      fix: 'apt-get install bash coreutils util-linux',
    };
  }
  return { ...host, problem: null, fix: null };
}

function readUserNamespaces(): boolean | null {
  try {
    return Number(readFileSync('/proc/sys/user/max_user_namespaces', 'utf8').trim()) > 0;
  } catch {
    return null;
  }
}

/** The uid a provider's server runs as when the engine is root: FNV-1a of its name in PROVIDER_UID_BASE.. */
export function providerUid(name: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(name, 'utf8')) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return PROVIDER_UID_BASE + (hash % PROVIDER_UID_SLOTS);
}

/** The command line that starts the provider's stdio server contained (or as is with `sandbox: false`). Throws SandboxRefusal. */
export function sandboxedServer(spec: SandboxSpec, host: SandboxHost): SandboxedCommand {
  const where = `provider "${spec.name}"`;
  const env = checkEnv(spec, where);
  const args = [...(spec.args ?? [])];
  if (spec.sandbox === false) {
    return {
      command: spec.command,
      args,
      env: { ...env },
      describe: { sandboxed: false, summary: 'not sandboxed ("sandbox": false): the server has the engine’s uid, files and network' },
    };
  }
  if (host.problem !== null || host.tools === null || host.bwrap === null) {
    throw new SandboxRefusal(
      `${where}: will not start its stdio server uncontained: ${host.problem ?? 'bubblewrap was not found'}`,
      'no-sandbox',
      host.fix ?? 'install bubblewrap, or set "sandbox": false on the provider',
    );
  }
  const filter = execFilter();
  if (filter === null) throw new SandboxRefusal(`${where}: no seccomp filter for ${process.arch}`, 'no-seccomp', 'run the engine on x86-64 or arm64');
  const limits = checkLimits(spec, where);
  const network = checkNetwork(spec, where);
  // A working folder of `/` shows nothing more: it is where the server starts when it names none.
  const cwd = spec.cwd === undefined || spec.cwd === '/' ? '/' : checkPath(spec.cwd, `${where}: "cwd"`);
  const reads = (spec.read ?? []).map((path, i) => checkPath(path, `${where}: "read"[${i}]`));
  const writes = (spec.write ?? []).map((path, i) => checkPath(path, `${where}: "write"[${i}]`));
  const program = resolveProgram(spec.command, cwd);
  if (program.path === null) {
    throw new SandboxRefusal(
      `${where}: its command cannot run: ${program.problem}`,
      'no-command',
      'install the server, or give the absolute path of its program as "command"',
    );
  }
  const command = program.path;
  const interpreter = shebangInterpreter(command, env.PATH);
  const programs = [command, ...(interpreter ? [interpreter] : [])];
  const view = hostView({
    command,
    programs,
    installs: installFolders(command, interpreter !== null, args, cwd, where),
    cwd,
    reads,
    writes,
    network,
    tmpBytes: limits.tmp_bytes,
    where,
  });
  const uid = host.root ? (spec.uid ?? providerUid(spec.name)) : USERNS_UID;
  if (!Number.isInteger(uid) || uid < 1 || uid > 0xfffffffe) {
    throw new SandboxRefusal(
      `${where}: "uid" must be an integer from 1 to 4294967294, not ${spec.uid}`,
      'bad-uid',
      'remove "uid" to get a uid of the provider’s own',
    );
  }

  const bwrap: string[] = [];
  if (host.root) {
    // As system.exec: bubblewrap (root) needs no user namespace; setpriv drops to the server's uid.
    bwrap.push(...namespaceArgs(true));
  } else {
    // A user namespace in which the server is uid 65534 with no capabilities (not namespaceArgs(false)'s
    // uid 0 with every capability, which the Python runner's fork server needs and a server must not have).
    bwrap.push(...namespaceArgs(true), '--unshare-user', '--uid', String(uid), '--gid', String(uid), '--cap-drop', 'ALL');
  }
  if (network === 'host') bwrap.splice(bwrap.indexOf('--unshare-net'), 1);

  bwrap.push(...view.args);
  bwrap.push('--chdir', cwd);
  if (host.root) bwrap.push('--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID');
  bwrap.push('--seccomp', String(SECCOMP_FD));
  bwrap.push(
    host.tools.prlimit,
    `--data=${limits.memory_mb * 1024 * 1024}`,
    `--nproc=${limits.processes}`,
    `--fsize=${limits.file_bytes}`,
    `--nofile=${limits.open_files}`,
    '--core=0',
    '--',
  );
  if (host.root) bwrap.push(host.tools.setpriv, `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--inh-caps=-all', '--');
  bwrap.push(command, ...args);

  const path = unique([...programs.map(dirname), ...(env.PATH ?? BASE_PATH).split(':')]).join(':');
  return {
    command: host.tools.bash,
    args: ['-c', SECCOMP_SCRIPT, 'bash', filter.toString('base64'), host.tools.base64, host.bwrap, ...bwrap],
    env: { HOME: '/tmp', LANG: 'C.UTF-8', ...env, PATH: path },
    describe: {
      sandboxed: true,
      mode: host.root ? 'setpriv' : 'user-namespace',
      uid,
      network,
      reads: view.reads,
      writes: view.writes,
      limits,
      summary:
        `bubblewrap: ${network === 'none' ? 'no network' : 'the host’s network'}; system folders, ${view.reads.length} more read-only, ` +
        `${view.writes.length} writable; uid ${uid}; rlimits data ${limits.memory_mb} MB, ${limits.processes} processes; seccomp`,
    },
  };
}
