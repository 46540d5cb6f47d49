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
import { closeSync, existsSync, openSync, readFileSync, readSync, realpathSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, posix } from 'node:path';
import { resolveProgram } from '../../runners/builtin/exec/settings.js';
import { bwrapProblem, hostLayout, namespaceArgs, privileged, SYSTEM } from '../../runners/shared/bwrap.js';
import { execFilter } from '../../runners/shared/seccomp.js';

/** Every limit of a sandboxed stdio server, with its default; a provider's `limits.sandbox` overrides them. */
export interface SandboxLimits {
  /**
   * The server's data memory per process (RLIMIT_DATA). Not RLIMIT_AS as for system.exec: Node reserves
   * gigabytes of address space for WebAssembly (its own fetch parses HTTP in wasm), which RLIMIT_AS refuses.
   */
  memory_mb: number;
  /** Processes and threads the server's uid may have at once (RLIMIT_NPROC): a fork bomb stops here. Node's own threads count (about ten). */
  processes: number;
  /** Largest file the server may write (RLIMIT_FSIZE). */
  file_bytes: number;
  /** Open files per process (RLIMIT_NOFILE). */
  open_files: number;
  /** Size of the server's /tmp (a tmpfs, in memory). */
  tmp_bytes: number;
}

export const DEFAULT_SANDBOX_LIMITS: Readonly<SandboxLimits> = Object.freeze({
  memory_mb: 1024,
  processes: 64,
  file_bytes: 64 * 1024 * 1024,
  open_files: 1024,
  tmp_bytes: 64 * 1024 * 1024,
});

/** JSON Schema of `SandboxLimits` overrides, for the provider settings' schema. */
export const SANDBOX_LIMITS_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  description: 'limits of the sandboxed server process',
  properties: Object.fromEntries(
    Object.entries(DEFAULT_SANDBOX_LIMITS).map(([key, value]) => [key, { type: 'integer', minimum: 1, description: `default ${value}` }]),
  ),
} as const;

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

/** What a provider says of its stdio server and its containment. Paths are absolute host paths. */
export interface SandboxSpec {
  /** The provider's name (errors name it; the default uid derives from it). */
  name: string;
  /** The program: a name looked up on the engine's PATH, or an absolute path. */
  command: string;
  args?: readonly string[];
  /** The server's environment (secret values already filled in); passed in the environment, never on a command line. */
  env?: Readonly<Record<string, string>>;
  /** The server's working folder (shown read-only unless `write` has it). Default `/`. */
  cwd?: string;
  /** The provider's declared permissions: `net.fetch` opens the network. */
  permissions?: readonly string[];
  /** With `net.fetch`: the hosts it may reach. Only `["*"]` (or none) can be enforced: any other list is refused. */
  hosts?: readonly string[];
  /** Host paths (files or folders) the server may read. */
  read?: readonly string[];
  /** Host paths the server may write (and read). As root they must be writable by the server's uid (`describe.uid`). */
  write?: readonly string[];
  limits?: Partial<SandboxLimits>;
  /** `false`: run the server as is, uncontained (the provider's explicit choice). */
  sandbox?: boolean;
  /** The uid to run as when the engine is root; default from the name (PROVIDER_UID_BASE..). */
  uid?: number;
}

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

/** Settings that cannot be honoured: the provider must not start. `reason` is a stable word, `fix` says what to change. */
export class SandboxRefusal extends Error {
  override readonly name = 'SandboxRefusal';
  readonly reason: string;
  readonly fix: string;
  constructor(message: string, reason: string, fix: string) {
    super(message);
    this.reason = reason;
    this.fix = fix;
  }
}

const BASE_PATH = '/usr/local/bin:/usr/bin:/bin';
const SECCOMP_FD = 4;
/**
 * Hands bubblewrap the seccomp filter on descriptor 4 without a file on disk and keeps the server's
 * stdin and stdout the transport's pipes: the filter travels base64 in $1, decoded into a pipe that
 * becomes fd 4 of the pipeline's last element, which execs bubblewrap with the saved stdin. bash's
 * `lastpipe` runs that last element in the shell itself, so bubblewrap replaces the shell: it is the
 * engine's own child, reaped by it, and `--die-with-parent` watches the engine, not a shell left behind.
 */
const SECCOMP_SCRIPT = 'shopt -s lastpipe; f=$1; b=$2; shift 2; exec 3<&0; printf %s "$f" | "$b" -d | { exec 4<&0 0<&3 3<&-; exec "$@"; }';
/** /etc files a server needs to resolve names and check certificates, shown only with the network. */
const NETWORK_ETC = ['/etc/resolv.conf', '/etc/hosts', '/etc/nsswitch.conf', '/etc/gai.conf', '/etc/ssl', '/etc/ca-certificates', '/etc/pki'];
const ETC_EXTRAS = ['/etc/alternatives'];
/**
 * Environment names that change how a program is loaded: the sandbox's own helpers (bash, base64, bubblewrap,
 * running as root before they confine anything) see the server's environment too, so none of these may be set.
 */
const LOADER_ENV =
  /^(LD_[A-Z0-9_]*|GCONV_PATH|GLIBC_TUNABLES|LOCPATH|NLSPATH|HOSTALIASES|RESOLV_HOST_CONF|MALLOC_[A-Z0-9_]*|BASH[A-Z0-9_]*|ENV|IFS|SHELLOPTS|PS4|CDPATH|GLOBIGNORE)$/;

/** What this machine offers for sandboxed stdio servers. Probes once per bubblewrap path (a trial sandbox). */
export async function sandboxAvailable(bwrap = 'bwrap'): Promise<SandboxHost> {
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
  const installs = installFolders(command, interpreter !== null, args, cwd, where);
  const shown = unique([...installs, ...(cwd === '/' ? [] : [cwd]), ...reads].map((path) => realpathSync(path)));
  const writable = unique(writes.map((path) => realpathSync(path)));
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

  const roots = programs.flatMap((program) => programRoots(program, where));
  const layout = hostLayout({ executable: command, roots: unique(roots), libraries: null });
  // /tmp first: a program or install folder below it (a temporary checkout) is bound into the tmpfs, not hidden by it.
  bwrap.push('--proc', '/proc', '--dev', '/dev', '--perms', '1777', '--size', String(limits.tmp_bytes), '--tmpfs', '/tmp');
  bwrap.push('--perms', '0755', '--dir', '/etc');
  for (const dir of layout.dirs) if (dir !== '/tmp') bwrap.push('--perms', '0755', '--dir', dir);
  for (const [target, path] of layout.symlinks) bwrap.push('--symlink', target, path);
  for (const file of layout.files) bwrap.push('--ro-bind', file, file);
  for (const extra of [...ETC_EXTRAS, ...(network === 'host' ? NETWORK_ETC : [])]) if (existsSync(extra)) bwrap.push('--ro-bind', extra, extra);
  for (const [from, to] of layout.binds) bwrap.push('--ro-bind', from, to);

  // Outer paths first, so that a folder shown read-only does not hide a writable one below it.
  const mounts: Array<[how: string, path: string]> = [
    ...shown.filter((path) => !writable.includes(path)).map((path): [string, string] => ['--ro-bind', path]),
    ...writable.map((path): [string, string] => ['--bind', path]),
  ].sort((a, b) => a[1].length - b[1].length);
  const mounted = [...layout.binds.map(([, to]) => to), ...SYSTEM];
  const under = (path: string, dirs: string[]) => dirs.some((dir) => path === dir || path.startsWith(`${dir}/`));
  const made = new Set<string>(['/', '/tmp', '/etc', ...layout.dirs]);
  for (const [how, path] of mounts) {
    if (under(path, mounted)) {
      // Already visible (read-only) in a system folder: only a writable bind needs a mount of its own.
      if (how === '--ro-bind') continue;
    } else {
      // The folders above it, searchable by the server's uid (bubblewrap, as root, would make them 0700).
      for (const dir of ancestors(path)) {
        if (made.has(dir) || under(dir, mounted)) continue;
        bwrap.push('--perms', '0755', '--dir', dir);
        made.add(dir);
      }
    }
    bwrap.push(how, path, path);
    mounted.push(path);
  }
  // The symbolic links on the way to each path the server was given (a project's node_modules linked
  // elsewhere): it names them by those paths, and Node resolves packages through them.
  const links = new Map<string, string>();
  for (const given of [...installs, ...(cwd === '/' ? [] : [cwd]), ...reads, ...writes]) {
    for (const [target, link] of hostLayout({ executable: given, roots: [], libraries: [] }).symlinks) links.set(link, target);
  }
  for (const [link, target] of links) {
    if (under(link, mounted)) continue;
    for (const dir of ancestors(link)) {
      if (made.has(dir) || under(dir, mounted)) continue;
      bwrap.push('--perms', '0755', '--dir', dir);
      made.add(dir);
    }
    bwrap.push('--symlink', target, link);
  }
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
  const reads_ = unique([...roots, ...shown.filter((p) => !writable.includes(p))]);
  return {
    command: host.tools.bash,
    args: ['-c', SECCOMP_SCRIPT, 'bash', filter.toString('base64'), host.tools.base64, host.bwrap, ...bwrap],
    env: { HOME: '/tmp', LANG: 'C.UTF-8', ...env, PATH: path },
    describe: {
      sandboxed: true,
      mode: host.root ? 'setpriv' : 'user-namespace',
      uid,
      network,
      reads: reads_,
      writes: writable,
      limits,
      summary:
        `bubblewrap: ${network === 'none' ? 'no network' : 'the host’s network'}; system folders, ${reads_.length} more read-only, ` +
        `${writable.length} writable; uid ${uid}; rlimits data ${limits.memory_mb} MB, ${limits.processes} processes; seccomp`,
    },
  };
}

/** The folders above an absolute path, outermost first, without `/`. */
function ancestors(path: string): string[] {
  const dirs: string[] = [];
  for (let dir = posix.dirname(path); dir !== '/'; dir = posix.dirname(dir)) dirs.unshift(dir);
  return dirs;
}

function unique<T>(items: T[]): T[] {
  return [...new Set(items)];
}

function checkEnv(spec: SandboxSpec, where: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(spec.env ?? {})) {
    // A name with `%` is how bash imports a function (BASH_FUNC_printf%%), which would replace a command of the script.
    if (spec.sandbox !== false && (LOADER_ENV.test(key) || key.startsWith('BASH_FUNC_') || key.includes('%'))) {
      throw new SandboxRefusal(
        `${where}: "env" may not set ${key}: it changes how programs are loaded, and the sandbox's own helpers see the server's environment`,
        'loader-env',
        `remove ${key} from the provider's "env" (or set it from a wrapper script inside the server's install folder)`,
      );
    }
    if (typeof value !== 'string' || value.includes('\0') || key.includes('=') || key.includes('\0') || key === '') {
      throw new SandboxRefusal(`${where}: "env".${key} must be a string without NUL, and its name non-empty without "="`, 'bad-env', 'fix the entry');
    }
    env[key] = value;
  }
  return env;
}

function checkLimits(spec: SandboxSpec, where: string): SandboxLimits {
  const limits = { ...DEFAULT_SANDBOX_LIMITS };
  for (const [key, value] of Object.entries(spec.limits ?? {})) {
    if (!(key in DEFAULT_SANDBOX_LIMITS)) {
      throw new SandboxRefusal(
        `${where}: unknown sandbox limit "${key}"; known: ${Object.keys(DEFAULT_SANDBOX_LIMITS).join(', ')}`,
        'bad-limit',
        'remove or rename it',
      );
    }
    if (!Number.isSafeInteger(value) || (value as number) < 1) {
      throw new SandboxRefusal(
        `${where}: sandbox limit "${key}" must be a positive integer, not ${JSON.stringify(value)}`,
        'bad-limit',
        `set "${key}" to a positive integer`,
      );
    }
    limits[key as keyof SandboxLimits] = value as number;
  }
  return limits;
}

function checkNetwork(spec: SandboxSpec, where: string): 'none' | 'host' {
  const fetch = (spec.permissions ?? []).includes('net.fetch');
  const hosts = spec.hosts ?? null;
  if (!fetch) {
    if (hosts !== null && hosts.length > 0) {
      throw new SandboxRefusal(
        `${where}: "hosts" names hosts, but the provider does not declare net.fetch`,
        'hosts-without-net',
        'add "net.fetch" to its "permissions", or remove "hosts"',
      );
    }
    return 'none';
  }
  if (hosts === null || (hosts.length === 1 && hosts[0] === '*')) return 'host';
  if (hosts.length === 0) {
    throw new SandboxRefusal(
      `${where}: declares net.fetch with an empty "hosts" list, which allows no host`,
      'hosts-empty',
      'drop "net.fetch" for no network, or set "hosts": ["*"]',
    );
  }
  throw new SandboxRefusal(
    `${where}: net.fetch limited to hosts ${JSON.stringify(hosts)} cannot be enforced: a sandboxed server gets either no network or the host's whole network (every address, loopback included), and would not be held to a list`,
    'hosts-not-enforceable',
    'set "hosts": ["*"] to give the server the whole network, or drop "net.fetch" to give it none',
  );
}

function checkPath(path: string, where: string): string {
  if (typeof path !== 'string' || !isAbsolute(path)) {
    throw new SandboxRefusal(
      `${where}: ${JSON.stringify(path)} must be an absolute host path`,
      'relative-path',
      'resolve it against the project folder',
    );
  }
  if (!existsSync(path))
    throw new SandboxRefusal(`${where}: ${path} does not exist`, 'missing-path', `create ${path}, or remove it from the settings`);
  const real = realpathSync(path);
  if (real === '/') throw new SandboxRefusal(`${where}: ${path} is the whole host file system`, 'whole-host', 'name the folders the server needs');
  return path;
}

/** The interpreter a `#!` script names (`#!/usr/bin/env node` → node on PATH), or null for a binary. */
function shebangInterpreter(command: string, path: string | undefined): string | null {
  const head = Buffer.alloc(256);
  let fd: number | null = null;
  let read = 0;
  try {
    fd = openSync(command, 'r');
    read = readSync(fd, head, 0, head.length, 0);
  } catch {
    return null;
  } finally {
    if (fd !== null) closeSync(fd);
  }
  const text = head.subarray(0, read).toString('utf8');
  if (!text.startsWith('#!')) return null;
  const words = text.slice(2).split('\n')[0]?.trim().split(/\s+/) ?? [];
  let name = words[0] ?? '';
  if (posix.basename(name) === 'env') name = words.slice(1).find((word) => !word.startsWith('-')) ?? '';
  if (name === '') return null;
  if (name.includes('/')) return existsSync(name) ? name : null;
  for (const dir of (path ?? BASE_PATH).split(':')) {
    const candidate = join(dir, name);
    if (isAbsolute(candidate) && existsSync(candidate)) return candidate;
  }
  return resolveProgram(name, '/').path;
}

/**
 * The folders of a program outside the system folders, shown read-only: for each of the path it is
 * named by and the file that links to, its prefix when it lies in a `bin` folder (a virtualenv's
 * …/.venv for …/.venv/bin/python, with its site-packages; …/node/v20 for …/node/v20/bin/node), else its
 * own folder. None for a program of the system's.
 */
function programRoots(program: string, where: string): string[] {
  const inSystem = (path: string) => SYSTEM.some((dir) => path === dir || path.startsWith(`${dir}/`));
  const roots: string[] = [];
  for (const path of [program, realpathSync(program)]) {
    if (inSystem(path)) continue;
    const folder = dirname(path);
    const root = posix.basename(folder) === 'bin' ? dirname(folder) : folder;
    if (root.split('/').filter(Boolean).length < 2) {
      throw new SandboxRefusal(
        `${where}: its program ${path} lies in ${root}, which the sandbox would have to show whole`,
        'install-too-wide',
        'install the program in a folder of its own (e.g. /opt/<server>/bin/)',
      );
    }
    roots.push(root);
  }
  return roots;
}

/**
 * The server's own install folder, shown read-only: for its script (the command itself when it is a `#!`
 * script, else the first argument that names a file), the outermost `node_modules` folder it lies in, or
 * else its folder and the `node_modules` folders above it (where Node looks for its packages). Folders
 * an argument names are not shown on their own: they are data, which the provider declares in `read`
 * or `write`.
 */
function installFolders(command: string, isScript: boolean, args: string[], cwd: string, where: string): string[] {
  const scripts: string[] = [];
  if (isScript) scripts.push(command);
  const first = args.find((arg) => !arg.startsWith('-'));
  if (first !== undefined) {
    const path = isAbsolute(first) ? first : join(cwd, first);
    try {
      if (statSync(path).isFile()) scripts.push(path);
    } catch {
      // not a file: an argument like any other
    }
  }
  const folders: string[] = [];
  for (const script of scripts) {
    const real = realpathSync(script);
    if (SYSTEM.some((dir) => real.startsWith(`${dir}/`))) continue;
    const at = real.indexOf('/node_modules/');
    if (at !== -1) {
      folders.push(real.slice(0, at + '/node_modules'.length));
      continue;
    }
    const folder = dirname(real);
    if (folder.split('/').filter(Boolean).length < 2) {
      throw new SandboxRefusal(
        `${where}: the server's script ${script} lies in ${folder}, which the sandbox would have to show whole`,
        'install-too-wide',
        'put the server in a folder of its own (e.g. /opt/<server>/), or install it with npm into a folder of its own',
      );
    }
    folders.push(folder);
    for (let dir = folder; dir !== '/'; dir = dirname(dir)) {
      const modules = join(dir, 'node_modules');
      if (existsSync(modules)) folders.push(modules);
    }
  }
  return folders;
}
