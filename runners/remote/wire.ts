import { type Channel, observe } from '../shared/protocol.js';

/**
 * The messages between an engine and its workers, written down once (README "Remote runners (NATS)").
 * Every message is one JSON object with `t`; bytes travel as base64.
 *
 *   arium.<deployment>.run.<runner>   engine → a worker of the queue group: `call`, with the call's inbox as
 *                                     reply subject (the server answers there "no responders" when no worker is in)
 *   <call inbox of the engine>        worker → engine: `tree`, `env`, `blob`, `vfs`, `part`, `put` (requests), `alive`,
 *                                     `refused`, `large`, `done`; the engine answers a request it will not serve
 *                                     (past a bound of REMOTE_LIMITS) with `refused` and the failure
 *   arium.<deployment>.ctl.<worker>   engine → that worker: `cancel`
 *   arium.<deployment>.hb             worker → everyone: heartbeats
 *   arium.<deployment>.ping           engine → workers: announce yourselves now (a heartbeat)
 *   arium.<deployment>.events         engine → observers: events (opt-in)
 */

export const PROTOCOL = 1;

export interface Subjects {
  run(runner: string): string;
  ctl(worker: string): string;
  hb: string;
  ping: string;
  events: string;
  /** The queue group every worker of a runner joins. */
  queue: string;
}

export function subjects(deployment: string): Subjects {
  const prefix = `arium.${deployment}`;
  return {
    run: (runner) => `${prefix}.run.${runner}`,
    ctl: (worker) => `${prefix}.ctl.${worker}`,
    hb: `${prefix}.hb`,
    ping: `${prefix}.ping`,
    events: `${prefix}.events`,
    queue: `${prefix}.workers`,
  };
}

/** What a worker says of itself every heartbeat. */
export interface Heartbeat {
  t: 'hb';
  id: string;
  host: string;
  pid: number;
  runners: string[];
  /** Calls it runs at once. */
  capacity: number;
  in_flight: number;
  versions: { arium: string; node: string; protocol: number };
  /** How often it beats; the engine forgets it after three missed beats. */
  interval_ms: number;
  /** Draining: it finishes what it has and takes nothing new. */
  draining: boolean;
  /** Its last beat: it is leaving now. */
  leaving?: boolean;
  /** What its cache of received files holds, and the size past which it evicts the least used. */
  cache?: { bytes: number; max_bytes: number };
  /** How each runner it hosts isolates calls (SANDBOX_FIELDS of its status), once the runner has answered. */
  sandboxes?: Record<string, Record<string, unknown>>;
}

/** What a heartbeat tells of a runner's status: how calls are isolated there, not its counters. */
export const SANDBOX_FIELDS: readonly string[] = [
  'available',
  'reason',
  'isolation',
  'isolation_detail',
  'isolation_reason',
  'namespaces',
  'strict',
  'uid',
  'abstract_sockets',
  'python',
  'permission_model',
  'node',
  'isolated_vm',
];

/** The call as the engine sends it: everything the worker needs, except the files it has not seen. */
export interface CallMessage {
  t: 'call';
  v: number;
  id: string;
  runner: string;
  /** The engine's inbox for this call. */
  inbox: string;
  /**
   * `hash`: the definition's content hash; `tree`: the tools folder's (see tree.ts). `bundle`: a JS tool
   * that imports packages, as the engine bundled it (the worker runs it in place of `entry`); `env`: the
   * pinned Python environment of the project (its site-packages, asked for with `env`), and the
   * interpreter it was made for (shipment.ts).
   */
  tool: {
    spec: Record<string, unknown>;
    hash: string;
    source: string;
    entry: string | null;
    tree: string;
    bundle?: BundleFile;
    env?: { hash: string; python: string };
  };
  input: unknown;
  limits: Record<string, number>;
  run_id: string;
  trace_id: string;
  keepalive_ms: number;
}

/** One file of a tools tree: path relative to the tools folder, sha256 (hex), size. */
export type TreeEntry = [path: string, sha256: string, size: number];

/** A JS tool's bundle: its file name (one path segment, `.mjs`), sha256 (hex), size. */
export interface BundleFile {
  name: string;
  sha: string;
  size: number;
}

export interface WireFailure {
  stage: string;
  code: string;
  message: string;
  details?: Record<string, unknown>;
  stack?: string;
}

export interface DoneMessage {
  t: 'done';
  worker: string;
  ok: boolean;
  data?: unknown;
  error?: WireFailure;
  logs: { level: string; message: string }[];
  intrusions: [string, string][];
  meta: Record<string, unknown>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Engine → worker, or worker → engine: the channel the protocol check (runners/shared/protocol.ts) holds a message to. */
export type Direction = Extract<Channel, 'remote.toWorker' | 'remote.fromWorker'>;

/** The message as bytes; checked against protocol.schema.json when protocol checking is on. */
export function encode(message: unknown, channel: Direction): Uint8Array {
  observe(channel, message);
  return encoder.encode(JSON.stringify(message));
}

/** The message, or null when it is not a JSON object with a string `t` (it is dropped). Checked as `encode` does. */
export function decode(data: Uint8Array, channel: Direction): Record<string, unknown> | null {
  try {
    const value = JSON.parse(decoder.decode(data));
    if (typeof value !== 'object' || value === null || Array.isArray(value) || typeof value.t !== 'string') return null;
    observe(channel, value);
    return value;
  } catch {
    return null;
  }
}

/** A ctx.vfs argument or answer that may be bytes, made JSON. */
export function packBytes(value: unknown): unknown {
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
  if (value instanceof ArrayBuffer) return { $bytes: Buffer.from(value).toString('base64') };
  return value;
}

export function unpackBytes(value: unknown): unknown {
  if (typeof value === 'object' && value !== null && typeof (value as { $bytes?: unknown }).$bytes === 'string' && Object.keys(value).length === 1) {
    const buffer = Buffer.from((value as { $bytes: string }).$bytes, 'base64');
    return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  }
  return value;
}
