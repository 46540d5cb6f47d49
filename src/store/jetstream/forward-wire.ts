// The messages gateways exchange over NATS for a project kept in JetStream (src/daemon/forward.ts): a
// gateway that does not hold the project sends each request to the one that does and relays its answer.
//
//   subject   arium.forward.<name>   (outside arium.state.<name>.>, which the project's stream captures)
//   request   <meta JSON>\n<body>    meta: { v, method, path, headers, caller, ip, at, nonce }
//   answer    <meta JSON>\n<body>    meta: { v, re, status, headers }   (re: the request's nonce)
//   header    Arium-Signature: hex HMAC-SHA256 of the whole message, keyed by the project's shared secret
//
// Only the gateway holding the project subscribes. The secret (arium.json store.forward.secret_env) is
// shared by the project's gateways alone: a NATS client without it can neither send a call the holder
// runs nor answer a forwarded request in the holder's place. A request carries its time and a random
// nonce; the holder refuses one outside its clock's window and one whose nonce it has seen (a replay).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { DEFAULT_GATEWAY_FORWARD } from '../../limits.js';

export const FORWARD_VERSION = 1;
export const SIGNATURE_HEADER = 'Arium-Signature';

export function forwardSubject(name: string): string {
  return `arium.forward.${name}`;
}

/** The request headers a forwarded request carries; the others (the API key, Host, Origin) stay with the gateway that checked them. */
export const FORWARDED_HEADERS = ['accept', 'content-type', 'x-trace-id'] as const;

export interface RequestMeta {
  v: number;
  method: string;
  /** The path and query under the project: `/v1/tools/x:run`. */
  path: string;
  headers: Record<string, string>;
  /** Who the forwarding gateway authenticated: the caller its own routes would have named. */
  caller: string;
  /** The caller's address as the forwarding gateway saw it. */
  ip: string;
  /** The forwarding gateway's clock, ms since the epoch. */
  at: number;
  nonce: string;
}

export interface AnswerMeta {
  v: number;
  re: string;
  status: number;
  headers: Record<string, string>;
}

/** The key a project's messages are signed with: the shared secret, bound to the project's name so a message for one project is refused by another. */
export function forwardKey(secret: string, name: string): Buffer {
  return createHmac('sha256', secret).update(`arium-forward ${name}`).digest();
}

export function newNonce(): string {
  return randomBytes(16).toString('hex');
}

/** A message's bytes and their signature. */
export function seal(key: Buffer, meta: RequestMeta | AnswerMeta, body: Uint8Array): { data: Uint8Array; signature: string } {
  const data = Buffer.concat([Buffer.from(`${JSON.stringify(meta)}\n`), body]);
  return { data, signature: createHmac('sha256', key).update(data).digest('hex') };
}

/** A message's meta and body, or null when its signature is missing or is not the key's. */
export function unseal<T>(key: Buffer, data: Uint8Array, signature: string | undefined): { meta: T; body: Buffer } | null {
  if (!signature || !/^[0-9a-f]{64}$/.test(signature)) return null;
  const expected = createHmac('sha256', key).update(data).digest();
  if (!timingSafeEqual(expected, Buffer.from(signature, 'hex'))) return null;
  const bytes = Buffer.from(data);
  const end = bytes.indexOf(10);
  if (end < 0) return null;
  try {
    return { meta: JSON.parse(bytes.subarray(0, end).toString('utf8')) as T, body: bytes.subarray(end + 1) };
  } catch {
    return null;
  }
}

/**
 * The nonces of the requests a holder admitted within the clock window: a request seen again (captured
 * on the bus and sent once more) is refused, and so is one whose time is outside the window, whose nonce
 * may have been forgotten.
 */
export class NonceWindow {
  readonly #seen = new Map<string, number>();
  readonly #windowMs: number;
  readonly #max: number;

  constructor(windowMs = DEFAULT_GATEWAY_FORWARD.clock_skew_ms, max = DEFAULT_GATEWAY_FORWARD.max_nonces) {
    this.#windowMs = windowMs;
    this.#max = max;
  }

  /** Null when the request may run; else why not. */
  admit(nonce: unknown, at: unknown, now = Date.now()): string | null {
    if (typeof nonce !== 'string' || !/^[0-9a-f]{32}$/.test(nonce) || typeof at !== 'number') return 'the request has no valid nonce and time';
    if (Math.abs(now - at) > this.#windowMs) {
      return `the request's time is ${Math.round((now - at) / 1000)} s from this gateway's clock, outside ±${this.#windowMs / 1000} s: a late replay, or the gateways' clocks differ (keep them in sync)`;
    }
    if (this.#seen.has(nonce)) return 'this request was already received once (a replay)';
    if (this.#seen.size >= this.#max) {
      // Insertion order is time order, near enough. Kept twice the window: a request stamped up to one
      // window ahead of this clock stays admissible until one window after that.
      for (const [seen, when] of this.#seen) {
        if (now - when <= 2 * this.#windowMs) break;
        this.#seen.delete(seen);
      }
      if (this.#seen.size >= this.#max) return `this gateway holds ${this.#max} recent forwarded requests (max_nonces); try again shortly`;
    }
    this.#seen.set(nonce, now);
    return null;
  }
}
