import { plainObject } from './outcome.js';
import { type Heartbeat, SANDBOX_FIELDS } from './wire.js';

/** A worker as the engine last heard of it. */
export interface WorkerInfo extends Omit<Heartbeat, 't'> {
  /** Milliseconds since its last heartbeat. */
  last_seen_ms: number;
}

/**
 * The workers an engine has heard from, by their heartbeats: each is forgotten after three of its
 * own intervals without one, or at once when it says it is leaving (a drained worker's last beat).
 */
export class LiveWorkers {
  readonly #seen = new Map<string, { hb: Heartbeat; at: number }>();

  heard(message: Record<string, unknown> | null): void {
    const hb = message ? heartbeatOf(message) : null;
    if (hb === null) return;
    if (hb.leaving) this.#seen.delete(hb.id);
    else if (this.#seen.has(hb.id) || this.#seen.size < MAX_WORKERS) this.#seen.set(hb.id, { hb, at: Date.now() });
  }

  list(): WorkerInfo[] {
    const now = Date.now();
    const live: WorkerInfo[] = [];
    for (const [id, { hb, at }] of this.#seen) {
      if (now - at > 3 * hb.interval_ms) {
        this.#seen.delete(id);
        continue;
      }
      const { t: _, ...info } = hb;
      live.push({ ...info, last_seen_ms: now - at });
    }
    return live.sort((a, b) => (a.id < b.id ? -1 : 1));
  }
}

/** Workers remembered at once: heartbeats of new ids past it are dropped until some are forgotten. */
const MAX_WORKERS = 4096;
const MAX_RUNNERS = 16;
const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

const text = (value: unknown, max = 256): string | null => (typeof value === 'string' ? value.slice(0, max) : null);
const count = (value: unknown): number | null => (Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : null);

/**
 * A heartbeat as the engine keeps it: its known fields, each checked, in fresh objects (a worker's JSON
 * is untrusted: it may hold `"__proto__"` or anything else). Null when it is not a heartbeat.
 */
export function heartbeatOf(message: Record<string, unknown>): Heartbeat | null {
  const id = text(message.id);
  const interval = count(message.interval_ms);
  if (message.t !== 'hb' || id === null || !NAME.test(id) || interval === null || interval === 0) return null;
  const versions = plainObject(message.versions) ?? {};
  const cache = plainObject(message.cache);
  const hb: Heartbeat = {
    t: 'hb',
    id,
    host: text(message.host) ?? 'unknown',
    pid: count(message.pid) ?? 0,
    runners: (Array.isArray(message.runners) ? message.runners : [])
      .filter((r): r is string => typeof r === 'string' && NAME.test(r))
      .slice(0, MAX_RUNNERS),
    capacity: count(message.capacity) ?? 0,
    in_flight: count(message.in_flight) ?? 0,
    versions: { arium: text(versions.arium, 64) ?? '?', node: text(versions.node, 64) ?? '?', protocol: count(versions.protocol) ?? 0 },
    interval_ms: interval,
    draining: message.draining === true,
  };
  if (message.leaving === true) hb.leaving = true;
  if (cache && count(cache.bytes) !== null && count(cache.max_bytes) !== null)
    hb.cache = { bytes: count(cache.bytes) as number, max_bytes: count(cache.max_bytes) as number };
  const sandboxes = plainObject(message.sandboxes);
  if (sandboxes) {
    // plainObject dropped any "__proto__" key: the names below are safe as keys of a plain object.
    const kept: Record<string, Record<string, unknown>> = {};
    for (const name of Object.keys(sandboxes)
      .filter((n) => NAME.test(n))
      .slice(0, MAX_RUNNERS)) {
      const sandbox = plainObject(sandboxes[name]);
      if (sandbox) kept[name] = Object.fromEntries(SANDBOX_FIELDS.filter((key) => Object.hasOwn(sandbox, key)).map((key) => [key, sandbox[key]]));
    }
    hb.sandboxes = kept;
  }
  return hb;
}
