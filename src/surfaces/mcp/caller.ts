/**
 * Who an MCP session's calls are from, in events, approvals and the audit log: the surface, then the
 * name the client gave in `initialize` (`clientInfo.name`), e.g. `mcp:claude-code`. Without imports: the
 * stdio bridge, a thin client, names itself to the daemon with the same text.
 */

/** The characters a caller name keeps (those of the `X-Arium-Client` header); others become `-`. */
const UNSAFE = /[^A-Za-z0-9._:@-]/g;
/** The longest caller name (the header's bound). */
export const CALLER_MAX = 64;

export function clientCaller(surface: string, clientName: unknown): string {
  const name = typeof clientName === 'string' ? clientName.replace(UNSAFE, '-') : '';
  return (name ? `${surface}:${name}` : surface).slice(0, CALLER_MAX);
}
