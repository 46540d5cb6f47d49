import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import type { FastifyRequest } from 'fastify';
import { CLIENT_HEADER } from '../../daemon/wire.js';

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

/** What a client may call itself (`X-Arium-Client`): the caller its calls name in events and the audit log. */
const CLIENT_NAME = /^[A-Za-z0-9._:@-]{1,64}$/;

/**
 * Who a request is from, as the engine's `caller`. Over the daemon's Unix socket (no remote address) the
 * local user's client names itself (`cli`, `connect:my-agent`; `local` when it does not, or gives a name
 * that is not 1-64 of `[A-Za-z0-9._:@-]`); over TCP a client cannot name itself: `tcpFallback`.
 */
export function clientName(request: FastifyRequest, tcpFallback: string): string {
  if (request.raw.socket.remoteAddress !== undefined) return tcpFallback;
  const named = header(request.headers[CLIENT_HEADER]);
  return named !== null && CLIENT_NAME.test(named) ? named : 'local';
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
const CONNECTION_SIGNALS = new WeakMap<Socket, AbortSignal>();
export function connectionSignal(socket: Socket): AbortSignal {
  let signal = CONNECTION_SIGNALS.get(socket);
  if (!signal) {
    const controller = new AbortController();
    socket.once('close', () => controller.abort());
    signal = controller.signal;
    CONNECTION_SIGNALS.set(socket, signal);
  }
  return signal;
}
