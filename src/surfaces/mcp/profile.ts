/**
 * What one surface (MCP, HTTP) offers its clients, from the project's arium.json: which tools they see
 * and may call, and the grants their calls get (narrowing the engine's, never widening them). The
 * client never chooses either.
 */
export interface SurfaceProfile {
  /** Tool ids or patterns (`*` matches any run of characters, e.g. `text.*`); default every tool. */
  tools?: string[];
  /** Grants for calls from this surface; default the engine's. */
  grants?: string[];
  /**
   * How clients learn the tools: `all` (default) lists every offered tool; `search` lists only the
   * discovery tools (`DISCOVERY_TOOLS`), through which the offered tools are found, described and
   * called, so a client with hundreds of tools loads four definitions.
   */
  discovery?: Discovery;
}

export type Discovery = 'all' | 'search';
export const DISCOVERY_MODES: readonly Discovery[] = ['all', 'search'];

/**
 * What a surface with `discovery: "search"` lists: the tools to find, describe and call the others,
 * and `code.run` where the engine has it (a tool the registry lacks is not listed).
 */
export const DISCOVERY_TOOLS: readonly string[] = ['tools.search', 'tools.describe', 'tools.call', 'code.run'];
const DISCOVERY_SET: ReadonlySet<string> = new Set(DISCOVERY_TOOLS);

/** A predicate over tool ids for a profile's `tools` patterns (with search discovery, the discovery tools too). */
export function surfaceFilter(profile: SurfaceProfile | undefined): (id: string) => boolean {
  const patterns = profile?.tools;
  const discovery = discoveryOf(profile);
  if (!patterns) return () => true;
  const res = patterns.map((p) => new RegExp(`^${p.split('*').map(escapeRegExp).join('.*')}$`));
  const matches = (id: string) => res.some((re) => re.test(id));
  return discovery === 'search' ? (id) => DISCOVERY_SET.has(id) || matches(id) : matches;
}

/**
 * What the surface lists (MCP tools/list, GET /v1/tools, an export): every offered tool, or with
 * search discovery only the discovery tools. The others stay offered: found with tools.search and
 * callable, through tools.call or by id.
 */
export function listedFilter(profile: SurfaceProfile | undefined): (id: string) => boolean {
  if (discoveryOf(profile) === 'search') return (id) => DISCOVERY_SET.has(id);
  return surfaceFilter(profile);
}

/** The profile's discovery mode; a value that is none is an error naming the ones that are. */
export function discoveryOf(profile: SurfaceProfile | undefined): Discovery {
  const mode = profile?.discovery ?? 'all';
  if (!DISCOVERY_MODES.includes(mode)) {
    throw new TypeError(`A surface's "discovery" must be ${DISCOVERY_MODES.map((m) => `"${m}"`).join(' or ')} (got ${JSON.stringify(mode)})`);
  }
  return mode;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
}
