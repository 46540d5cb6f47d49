/**
 * The messages between an engine's `nats` provider and its satellites, written down once (README "NATS
 * satellites"); the Python SDK (sdk/python/arium_satellite.py) speaks the same. Every message is one
 * JSON object with `t`.
 *
 *   arium.<deployment>.sat.hb                 satellite → engines: `hb`, its tools and load, every interval_ms;
 *                                             `leaving: true` on its last one
 *   arium.<deployment>.sat.ping               engine → satellites: announce yourselves now
 *   arium.<deployment>.sat.tool.<tool>        engine → one satellite of the tool's queue group (load-balanced):
 *                                             `call`, with the call's inbox as reply subject (the server answers
 *                                             "no responders" there when no satellite is in the group)
 *   arium.<deployment>.sat.node.<node>.<tool> engine → that satellite only: `call`
 *   <call inbox>                              satellite → engine: `accept` (at once), `alive` (every keepalive_ms),
 *                                             `log`, `progress`, then `done`
 *   arium.<deployment>.sat.ctl.<node>         engine → that satellite: `cancel`
 *
 * Subjects of satellites live under `sat.` of the deployment, beside (never among) the remote runner's.
 */

export const SATELLITE_PROTOCOL = 1;

/** A tool's name as a satellite announces it: one subject token. */
export const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** A node id: one subject token. */
export const NODE_ID = /^[A-Za-z0-9_-]{1,64}$/;

export interface SatelliteSubjects {
  hb: string;
  ping: string;
  /** The subject every satellite offering `tool` subscribes to in the tool's queue group. */
  tool(tool: string): string;
  /** The queue group of a tool (NATS delivers each message on it to one member). */
  queue(tool: string): string;
  /** The subject only `node` subscribes to for `tool`. */
  node(node: string, tool: string): string;
  ctl(node: string): string;
}

export function satelliteSubjects(deployment: string): SatelliteSubjects {
  const prefix = `arium.${deployment}.sat`;
  return {
    hb: `${prefix}.hb`,
    ping: `${prefix}.ping`,
    tool: (tool) => `${prefix}.tool.${tool}`,
    queue: (tool) => `arium-${deployment}-sat-${tool}`,
    node: (node, tool) => `${prefix}.node.${node}.${tool}`,
    ctl: (node) => `${prefix}.ctl.${node}`,
  };
}

/** A tool as a heartbeat announces it. */
export interface AnnouncedTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
}

export interface SatelliteHeartbeat {
  t: 'hb';
  v: number;
  node_id: string;
  /** The satellite's own version (of its tools), as its author sets it. */
  version: string;
  /** Calls it runs at once; more wait for a slot, up to its queue, then it answers `BUSY`. */
  capacity: number;
  in_flight: number;
  /** How often it beats; an engine forgets it after 3 missed beats (or its provider's heartbeat_timeout_ms). */
  interval_ms: number;
  /** How often it says a call it runs is alive. */
  keepalive_ms: number;
  tools: AnnouncedTool[];
  /** Which SDK speaks (`ts`, `python`), for status and debugging. */
  sdk?: string;
  /** Its last beat: it takes no more calls. */
  leaving?: boolean;
}

export interface CallMessage {
  t: 'call';
  v: number;
  id: string;
  tool: string;
  input: unknown;
  run_id: string;
  trace_id: string;
  /** The call's whole budget: the satellite may stop working on it after this. */
  timeout_ms: number;
}

/** A failure as a satellite reports it: `code` one of the engine's error codes it may report (see SATELLITE_CODES). */
export interface WireError {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export type ReplyMessage =
  | { t: 'accept'; node_id: string }
  | { t: 'alive' }
  | { t: 'log'; level: 'debug' | 'info' | 'warn' | 'error'; message: string }
  | { t: 'progress'; progress: number; total?: number; message?: string }
  | { t: 'done'; ok: true; data: unknown }
  | { t: 'done'; ok: false; error: WireError };

/**
 * The error codes a satellite may report for a call; any other is taken as `TOOL_ERROR` (a satellite
 * cannot claim the gate's codes, such as `DENIED`).
 */
export const SATELLITE_CODES: ReadonlySet<string> = new Set([
  'TOOL_ERROR',
  'INVALID_INPUT',
  'NOT_FOUND',
  'BUSY',
  'UNAVAILABLE',
  'TIMEOUT',
  'CANCELLED',
  'OUTPUT_LIMIT',
  'INVALID_OUTPUT',
]);

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeMessage(message: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(message));
}

/** The message, or null when it is not a JSON object with a string `t` (it is dropped). */
export function decodeMessage(data: Uint8Array): Record<string, unknown> | null {
  try {
    const value = JSON.parse(decoder.decode(data));
    if (typeof value !== 'object' || value === null || Array.isArray(value) || typeof value.t !== 'string') return null;
    return value as Record<string, unknown>;
  } catch {
    return null;
  }
}
