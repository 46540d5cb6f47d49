import { isIP } from 'node:net';

/**
 * Which `Host` and `Origin` headers the gateway answers. A page at http://evil.example whose name its
 * owner re-points at 127.0.0.1 (DNS rebinding) is, to the browser, still evil.example: it may send
 * requests to a gateway on the visitor's machine and read the answers, with no key when the gateway
 * needs none. What gives such a request away is the name: the browser sends `Host: evil.example:<port>`.
 * Cross-site requests the browser does send (a form post, a `fetch` it will not let the page read) carry
 * the page's `Origin`, which must be the gateway's own. The MCP specification asks Streamable HTTP
 * servers for the same check (Transports, "Security Warning").
 */

export interface HostRules {
  /** Names `Host` may carry besides loopback names and IP addresses: lower case, no port, no final dot. */
  readonly hosts: ReadonlySet<string>;
  /** Origins (`scheme://host[:port]`) besides the gateway's own whose pages may send requests. */
  readonly origins: ReadonlySet<string>;
}

/** Why a request is refused: the header, its value, and what to say. */
export interface HeaderRefusal {
  header: 'host' | 'origin';
  value: string;
  /** The reason, for the SecurityEvent. */
  reason: string;
  /** The reason and how to allow it, for the client. */
  message: string;
}

/** Checks and normalizes the names and origins a user lists; a malformed one throws, naming it. */
export function hostRules(allowedHosts: readonly string[] = [], allowedOrigins: readonly string[] = []): HostRules {
  const hosts = new Set<string>();
  for (const given of allowedHosts) {
    const name = /[*:]/.test(given) ? null : hostnameOf(given);
    if (name === null) {
      throw new TypeError(`"${given}" is not a host name to allow: give a name alone, without scheme, port or *, e.g. devbox.lan`);
    }
    hosts.add(name);
  }
  const origins = new Set<string>();
  for (const given of allowedOrigins) {
    const origin = originOf(given);
    if (origin === null) {
      throw new TypeError(`"${given}" is not an origin to allow: give scheme://host[:port] with no path, e.g. http://localhost:5173`);
    }
    origins.add(origin);
  }
  return { hosts, origins };
}

/** Null when the request may be served; else which header is refused and why. */
export function refusal(rules: HostRules, host: string | undefined, origin: string | undefined): HeaderRefusal | null {
  const name = host === undefined ? null : hostnameOf(host);
  if (name === null || !(servable(name) || rules.hosts.has(name))) {
    const shown = clip(host ?? '');
    const reason = host === undefined ? 'the request has no Host header' : `Host "${shown}" is no name of this gateway`;
    return {
      header: 'host',
      value: shown,
      reason,
      message:
        `Refused: ${reason}. A web page can reach a gateway on this machine through a name of its own pointed at ` +
        'this address (DNS rebinding), so the gateway answers only loopback names, IP addresses and the names ' +
        `it is given${name ? `; if ${name} is yours, start it with \`arium serve --allow-host ${name}\` (createGateway: allowedHosts)` : ''}.`,
    };
  }
  if (origin === undefined) return null;
  const from = originOf(origin);
  // Same origin: the page the request comes from was served by this gateway under the same name and port.
  if (from !== null && (new URL(from).host === authorityOf(host as string) || rules.origins.has(from))) return null;
  const shown = clip(origin);
  const reason =
    origin === 'null'
      ? 'Origin is "null" (a sandboxed frame, a local file or a cross-site redirect), which names no page that may be trusted'
      : `Origin "${shown}" is not this gateway's own`;
  return {
    header: 'origin',
    value: shown,
    reason,
    message:
      `Refused: ${reason}: only the gateway's own pages (the inspector) may send it requests from a browser` +
      (from === null
        ? '.'
        : `; to let pages of ${from} call it, start it with \`arium serve --allow-origin ${from}\` (createGateway: allowedOrigins).`),
  };
}

/**
 * Names no DNS server decides. `localhost` and `*.localhost` are loopback by RFC 6761 and browsers resolve
 * them so without asking DNS. An IP address is no name at all: rebinding needs a name whose address changes,
 * and a browser sends an IP as `Host` only to that IP, so a page that uses one is on this server (another
 * port of it is another origin, which the `Origin` check refuses).
 */
function servable(name: string): boolean {
  return name === 'localhost' || name.endsWith('.localhost') || isIP(name.replace(/^\[|\]$/g, '')) !== 0;
}

/** The host name of a `Host` value as a browser would send it (lower case, IPv4 normalized), or null when malformed. */
function hostnameOf(value: string): string | null {
  // `user@host` and paths parse as URLs, but are no Host a client sends.
  if (value === '' || /[@/?#\\\s]/.test(value)) return null;
  try {
    return new URL(`http://${value}`).hostname.replace(/\.$/, '');
  } catch {
    return null;
  }
}

/** `host[:port]` of a `Host` value already found well-formed, the default port left out as an origin leaves it. */
function authorityOf(value: string): string {
  return new URL(`http://${value}`).host;
}

/** `scheme://host[:port]` of an http(s) origin, or null for anything else (`null`, other schemes, paths). */
function originOf(value: string): string | null {
  try {
    const url = new URL(value);
    const plain = !url.username && !url.password && url.pathname === '/' && !url.search && !url.hash;
    return plain && (url.protocol === 'http:' || url.protocol === 'https:') ? url.origin : null;
  } catch {
    return null;
  }
}

function clip(value: string): string {
  return value.length > 200 ? `${value.slice(0, 200)}…` : value;
}
