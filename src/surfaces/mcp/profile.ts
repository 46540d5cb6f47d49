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
}

/** A predicate over tool ids for a profile's `tools` patterns. */
export function surfaceFilter(profile: SurfaceProfile | undefined): (id: string) => boolean {
  const patterns = profile?.tools;
  if (!patterns) return () => true;
  const res = patterns.map((p) => new RegExp(`^${p.split('*').map(escapeRegExp).join('.*')}$`));
  return (id) => res.some((re) => re.test(id));
}

function escapeRegExp(text: string): string {
  return text.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
}
