import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Server, Socket } from 'node:net';
import type { FastifyRequest } from 'fastify';
import { CLIENT_HEADER } from '../../daemon/wire.js';
import { ToolFailure } from '../../errors.js';

/** What the gateway reads from a request: its headers, its API key, the connection it came on. */

export function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

export function bearer(value: string | undefined): string | null {
  const match = value ? /^Bearer\s+(.+)$/i.exec(value) : null;
  return match ? (match[1] as string) : null;
}

export function header(value: string | string[] | undefined): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/** A path segment decoded, or as it is when it is not valid percent-encoding. */
export function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/**
 * What the gateway knows of a connection, learnt on its first request and kept for the others a
 * keep-alive connection carries (under load, `server.address()` on every request cost 6% of the
 * gateway's time).
 */
interface Connection {
  /** Whether it came over a Unix socket (see `overSocket`). */
  readonly unix: boolean;
  /** Aborted when the connection closes (see `connectionSignal`). */
  signal: AbortSignal | null;
  /** `http:<address>`: who a call made over this TCP connection is made as. */
  caller: string | null;
  /** The last `Host` and `Origin` pair the host guard let through on this connection (see `hostChecked`). */
  passed: { host: string | undefined; origin: string | undefined } | null;
}

const CONNECTIONS = new WeakMap<Socket, Connection>();

function connection(socket: Socket): Connection {
  let known = CONNECTIONS.get(socket);
  if (!known) {
    // Judged by the server that accepted the connection, which a client cannot change: the peer's address
    // is not a sound sign, since a TCP connection already reset has none either.
    const server = (socket as Socket & { server?: Server }).server;
    known = { unix: typeof server?.address() === 'string', signal: null, caller: null, passed: null };
    CONNECTIONS.set(socket, known);
  }
  return known;
}

/**
 * Whether the request came over a Unix socket (the daemon's, 0600 in a 0700 folder: only its user reaches
 * it), judged once per connection.
 */
export function overSocket(request: FastifyRequest): boolean {
  return connection(request.raw.socket).unix;
}

/**
 * Whether this connection's last request carried the same `Host` and `Origin` and was let through: the
 * check (URL parsing of both) is then not done again for each request of a keep-alive connection.
 */
export function hostChecked(request: FastifyRequest, host: string | undefined, origin: string | undefined): boolean {
  const passed = connection(request.raw.socket).passed;
  return passed !== null && passed.host === host && passed.origin === origin;
}

/** Remembers that `host` and `origin` were let through on this request's connection. */
export function hostPassed(request: FastifyRequest, host: string | undefined, origin: string | undefined): void {
  connection(request.raw.socket).passed = { host, origin };
}

/** What a local client may call itself with `X-Arium-Client` (as a caller name in events and the audit log). */
const CLIENT_NAME = /^[A-Za-z0-9._:@-]{1,64}$/;

/**
 * The caller a request's calls are made as: over the socket, the name the client gives in
 * `X-Arium-Client` (`cli`, `connect:my-agent`), else `local`; over TCP, `tcpFallback` (`http:<ip>`), whatever
 * the header says, since a remote client's word about itself is not the local user's.
 */
export function clientName(request: FastifyRequest, tcpFallback: string): string {
  const forwarded = forwardedCaller(request);
  if (forwarded !== null) return forwarded;
  if (!overSocket(request)) return tcpFallback;
  return socketClient(request);
}

/** The caller a call over TCP is made as, `http:<address>`: one string per connection, not one per call. */
export function tcpCaller(request: FastifyRequest): string {
  // A request another gateway forwarded carries its caller (believed only with the holder's token).
  if (request.headers['x-arium-forward-token'] !== undefined) {
    const forwarded = forwardedCaller(request);
    if (forwarded !== null) return forwarded;
  }
  const known = connection(request.raw.socket);
  if (known.unix) return socketClient(request);
  known.caller ??= `http:${request.ip}`;
  return known.caller;
}

function socketClient(request: FastifyRequest): string {
  const given = request.headers[CLIENT_HEADER];
  if (given === undefined) return 'local';
  if (typeof given !== 'string' || !CLIENT_NAME.test(given)) {
    throw new ToolFailure(
      'validation',
      'INVALID_INPUT',
      'The X-Arium-Client header must be one name of 1 to 64 characters among letters, digits and . _ : @ - (e.g. cli, connect:my-agent)',
      { details: { header: 'x-arium-client' } },
    );
  }
  return given;
}

/**
 * A request another gateway forwarded (src/daemon/forward.ts) is run here through `app.inject` as the
 * caller that gateway authenticated. The headers naming it count only with this process's token, which
 * never leaves the process: a client cannot name itself so.
 */
const FORWARD_TOKEN = randomBytes(32).toString('hex');

export function forwardedHeaders(caller: string): Record<string, string> {
  return { 'x-arium-forwarded-caller': caller, 'x-arium-forward-token': FORWARD_TOKEN };
}

function forwardedCaller(request: FastifyRequest): string | null {
  const token = header(request.headers['x-arium-forward-token']);
  if (token === null || !timingSafeEqual(digest(token), digest(FORWARD_TOKEN))) return null;
  return header(request.headers['x-arium-forwarded-caller']);
}

/**
 * Who holds MCP sessions, for their per-key bound: the API key given (its digest) on a gateway that checks
 * keys, else the client's address (a key nobody checks would let a client pick a new one per session).
 */
export function sessionKey(request: FastifyRequest, keyed: boolean): string {
  const given = keyed ? (bearer(request.headers.authorization) ?? header(request.headers['x-api-key'])) : null;
  return given === null ? `address ${request.ip}` : `key ${digest(given).toString('hex')}`;
}

/**
 * One abort signal per connection, aborted when it closes: every run still going on a connection that
 * is gone is cancelled. (An AbortController per request cost 3.5% of the gateway's time under load;
 * a keep-alive connection carries its requests one after another, so they can share one.)
 */
export function connectionSignal(socket: Socket): AbortSignal {
  const known = connection(socket);
  if (!known.signal) {
    const controller = new AbortController();
    socket.once('close', () => controller.abort());
    known.signal = controller.signal;
  }
  return known.signal;
}
