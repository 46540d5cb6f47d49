/**
 * The settings of an `mcp` provider (arium.json `providers.<name>.mcp`), checked, and how a stdio
 * server's process is launched.
 */

/** A value from arium.json, or a secret's by name. */
export type SecretValue = string | { $secret: string };

export type McpSettings =
  | { transport: 'stdio'; command: string; args: string[]; env: Map<string, SecretValue>; cwd?: string }
  | { transport: 'http'; url: URL; headers: Map<string, SecretValue> };

export function parseMcpSettings(raw: unknown, at: string): McpSettings {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new Error(`${at} must be an object with "command" (stdio) or "url" (Streamable HTTP)`);
  const given = raw as Record<string, unknown>;
  const allowed = 'command' in given ? ['command', 'args', 'env', 'cwd'] : ['url', 'headers'];
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

/**
 * How a stdio server's process is started: the one place that wraps its command (in bubblewrap, once
 * the sandbox is there: src/providers/sandbox.ts). For now the server runs as given, as the engine's user.
 */
export function stdioLaunch(spec: Omit<StdioLaunch, 'describe'>): StdioLaunch {
  return { ...spec, describe: { sandbox: 'none' } };
}
