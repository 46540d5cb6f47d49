import { existsSync, realpathSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import type { SandboxHost } from './sandbox.js';
import { DEFAULT_SANDBOX_LIMITS, type SandboxLimits } from './sandbox-settings.js';
/**
 * The settings of an `mcp` provider (arium.json `providers.<name>.mcp`), checked, and how a stdio
 * server's process is launched.
 */

/** A value from arium.json, or a secret's by name. */
export type SecretValue = string | { $secret: string };

export type McpSettings =
  | { transport: 'stdio'; command: string; args: string[]; env: Map<string, SecretValue>; cwd?: string; sandbox: StdioSandbox }
  | { transport: 'http'; url: URL; headers: Map<string, SecretValue> };

/**
 * How a stdio server is contained (src/providers/sandbox.ts): `false` runs it as the engine's user, with
 * its files and network (the provider's explicit choice); otherwise in bubblewrap with these host paths
 * (relative ones against the project) and limits. `hosts` goes with the provider's `net.fetch`.
 */
export type StdioSandbox = false | { read: string[]; write: string[]; hosts?: string[]; limits?: Partial<SandboxLimits>; uid?: number };

const SANDBOX_KEYS = ['read', 'write', 'hosts', 'limits', 'uid'];

function parseSandbox(raw: unknown, at: string): StdioSandbox {
  if (raw === undefined) return { read: [], write: [] };
  if (raw === false) return false;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new Error(`${at} must be false (run the server uncontained) or an object with ${SANDBOX_KEYS.join(', ')}`);
  const given = raw as Record<string, unknown>;
  for (const key of Object.keys(given)) {
    if (!SANDBOX_KEYS.includes(key)) throw new Error(`${at}/${key}: unknown setting; the sandbox takes ${SANDBOX_KEYS.join(', ')}`);
  }
  const paths = (key: string): string[] => {
    const value = given[key] ?? [];
    if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || v.length === 0))
      throw new Error(`${at}/${key} must be an array of host paths (absolute, or relative to the project)`);
    return value as string[];
  };
  const out: Exclude<StdioSandbox, false> = { read: paths('read'), write: paths('write') };
  if (given.hosts !== undefined) {
    if (!Array.isArray(given.hosts) || given.hosts.some((v) => typeof v !== 'string')) throw new Error(`${at}/hosts must be an array of host names`);
    out.hosts = given.hosts as string[];
  }
  if (given.limits !== undefined) {
    if (typeof given.limits !== 'object' || given.limits === null || Array.isArray(given.limits))
      throw new Error(`${at}/limits must be an object of ${Object.keys(DEFAULT_SANDBOX_LIMITS).join(', ')}`);
    for (const [key, value] of Object.entries(given.limits)) {
      if (!(key in DEFAULT_SANDBOX_LIMITS))
        throw new Error(`${at}/limits/${key}: unknown limit; the sandbox takes ${Object.keys(DEFAULT_SANDBOX_LIMITS).join(', ')}`);
      if (!Number.isSafeInteger(value) || (value as number) < 1) throw new Error(`${at}/limits/${key} must be a whole number above 0`);
    }
    out.limits = given.limits as Partial<SandboxLimits>;
  }
  if (given.uid !== undefined) {
    if (!Number.isSafeInteger(given.uid) || (given.uid as number) < 1) throw new Error(`${at}/uid must be a whole number above 0`);
    out.uid = given.uid as number;
  }
  return out;
}

export function parseMcpSettings(raw: unknown, at: string): McpSettings {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new Error(`${at} must be an object with "command" (stdio) or "url" (Streamable HTTP)`);
  const given = raw as Record<string, unknown>;
  const allowed = 'command' in given ? ['command', 'args', 'env', 'cwd', 'sandbox'] : ['url', 'headers'];
  for (const key of Object.keys(given)) {
    if (!allowed.includes(key))
      throw new Error(
        `${at}/${key}: unknown setting; an MCP provider over ${'command' in given ? 'stdio' : 'Streamable HTTP'} takes ${allowed.join(', ')}`,
      );
  }
  if ('command' in given) {
    if (typeof given.command !== 'string' || given.command.length === 0)
      throw new Error(`${at}/command must be a non-empty string (the server's program)`);
    const args = given.args ?? [];
    if (!Array.isArray(args) || args.some((a) => typeof a !== 'string')) throw new Error(`${at}/args must be an array of strings`);
    if (given.cwd !== undefined && (typeof given.cwd !== 'string' || given.cwd.length === 0))
      throw new Error(`${at}/cwd must be a folder path (relative to the project)`);
    return {
      transport: 'stdio',
      command: given.command,
      args: args as string[],
      env: secretValues(given.env, `${at}/env`, /^[A-Za-z_][A-Za-z0-9_]*$/),
      ...(given.cwd !== undefined ? { cwd: given.cwd as string } : {}),
      sandbox: parseSandbox(given.sandbox, `${at}/sandbox`),
    };
  }
  if (!('url' in given)) throw new Error(`${at} must have "command" (a stdio server) or "url" (a Streamable HTTP server)`);
  let url: URL;
  try {
    url = new URL(String(given.url));
  } catch {
    throw new Error(`${at}/url is not a URL: ${JSON.stringify(given.url)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`${at}/url must be http: or https: (got ${url.protocol})`);
  if (url.username || url.password) throw new Error(`${at}/url must not hold credentials; put them in "headers" as {"$secret": …}`);
  return { transport: 'http', url, headers: secretValues(given.headers, `${at}/headers`, /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/) };
}

function secretValues(raw: unknown, at: string, key: RegExp): Map<string, SecretValue> {
  const out = new Map<string, SecretValue>();
  if (raw === undefined) return out;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new Error(`${at} must be an object of names to strings or {"$secret": NAME}`);
  for (const [name, value] of Object.entries(raw)) {
    if (!key.test(name)) throw new Error(`${at}/${name}: not a valid name`);
    if (typeof value === 'string') out.set(name, value);
    else if (
      typeof value === 'object' &&
      value !== null &&
      Object.keys(value).length === 1 &&
      typeof (value as { $secret?: unknown }).$secret === 'string'
    ) {
      out.set(name, { $secret: (value as { $secret: string }).$secret });
    } else throw new Error(`${at}/${name} must be a string or {"$secret": NAME}`);
  }
  return out;
}

/** A stdio server's process as the provider starts it. */
export interface StdioLaunch {
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** How it runs, for status() and doctor (e.g. its sandbox). */
  describe: Record<string, unknown>;
}

let sandboxHost: Promise<SandboxHost> | null = null;

/**
 * How a stdio server's process is started: in bubblewrap (src/providers/sandbox.ts) unless its settings
 * say `"sandbox": false`. What the machine offers is probed once. Throws a SandboxRefusal (the provider
 * does not start, saying why and what to change) for settings that cannot be honoured here.
 */
export async function stdioLaunch(
  name: string,
  settings: Extract<McpSettings, { transport: 'stdio' }>,
  spec: Omit<StdioLaunch, 'describe'>,
  permissions: readonly string[],
): Promise<StdioLaunch> {
  const { sandboxAvailable, sandboxedServer } = await import('./sandbox.js');
  const sandbox = settings.sandbox;
  sandboxHost ??= sandboxAvailable();
  const host = await sandboxHost;
  if (sandbox === false) {
    const plain = sandboxedServer({ name, command: spec.command, args: spec.args, env: spec.env, sandbox: false }, host);
    return { ...spec, command: plain.command, args: plain.args, env: plain.env, describe: { ...plain.describe } };
  }
  const absolute = (path: string) => resolve(spec.cwd, path);
  // The server runs at `/` (the project is not shown to it): a relative path to a file on its command
  // line, which an uncontained server would find from the project folder, is made absolute here, its
  // links resolved: only the real folder is shown in the sandbox.
  const placed = (arg: string) => (!isAbsolute(arg) && !arg.startsWith('-') && existsSync(absolute(arg)) ? realpathSync(absolute(arg)) : arg);
  const made = sandboxedServer(
    {
      name,
      command: spec.command.includes('/') ? placed(spec.command) : spec.command,
      args: spec.args.map(placed),
      env: spec.env,
      // The server's folder is shown read-only; the project is not shown unless declared.
      cwd: settings.cwd !== undefined ? spec.cwd : '/',
      permissions,
      read: sandbox.read.map(absolute),
      write: sandbox.write.map(absolute),
      ...(sandbox.hosts ? { hosts: sandbox.hosts } : {}),
      ...(sandbox.limits ? { limits: sandbox.limits } : {}),
      ...(sandbox.uid !== undefined ? { uid: sandbox.uid } : {}),
    },
    host,
  );
  return { command: made.command, args: made.args, env: made.env, cwd: '/', describe: { ...made.describe } };
}
