/**
 * A sandboxed stdio server's settings, checked: its limits and their defaults, and what cannot be
 * honoured (a `SandboxRefusal` saying what is wrong, where, and how to fix it).
 */
import { existsSync, realpathSync } from 'node:fs';
import { isAbsolute } from 'node:path';

/** Every limit of a sandboxed stdio server, with its default; a provider's `limits.sandbox` overrides them. */
export interface SandboxLimits {
  /**
   * The server's data memory per process (RLIMIT_DATA). Not RLIMIT_AS as for system.exec: Node reserves
   * gigabytes of address space for WebAssembly (its own fetch parses HTTP in wasm), which RLIMIT_AS refuses.
   * RLIMIT_DATA still counts what V8 reserves at start: Node 24 does not start under about 600 MB
   * (`Failed to reserve virtual memory for CodeRange`), Node 20 under about 48 MB.
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
  memory_mb: 2048,
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

/**
 * Environment names that change how a program is loaded: the sandbox's own helpers (bash, base64, bubblewrap,
 * running as root before they confine anything) see the server's environment too, so none of these may be set.
 */
const LOADER_ENV =
  /^(LD_[A-Z0-9_]*|GCONV_PATH|GLIBC_TUNABLES|LOCPATH|NLSPATH|HOSTALIASES|RESOLV_HOST_CONF|MALLOC_[A-Z0-9_]*|BASH[A-Z0-9_]*|ENV|IFS|SHELLOPTS|PS4|CDPATH|GLOBIGNORE)$/;

export function checkEnv(spec: SandboxSpec, where: string): Record<string, string> {
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

export function checkLimits(spec: SandboxSpec, where: string): SandboxLimits {
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

export function checkNetwork(spec: SandboxSpec, where: string): 'none' | 'host' {
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

export function checkPath(path: string, where: string): string {
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
