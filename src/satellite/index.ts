/**
 * `arium/satellite`: a process on the NATS bus that serves its own tools to Arium engines. It joins a
 * queue group per tool (engines' calls are balanced across the satellites offering it), answers calls
 * addressed to its own node id, and announces its tools in heartbeats on the deployment's subject; an
 * engine's `nats` provider offers those tools while the heartbeats last. Wire: ./wire.ts.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connectNats } from '../../runners/remote/connect.js';
import { checkSettings, type NatsAuth } from '../../runners/remote/settings.js';
import { SATELLITE_LIMITS } from '../limits.js';
import {
  type AnnouncedTool,
  decodeMessage,
  encodeMessage,
  NODE_ID,
  type ReplyMessage,
  SATELLITE_CODES,
  SATELLITE_PROTOCOL,
  type SatelliteHeartbeat,
  type SatelliteSubjects,
  satelliteSubjects,
  TOOL_NAME,
} from './wire.js';

export type { AnnouncedTool, SatelliteHeartbeat } from './wire.js';

/** What a handler is given besides its input. */
export interface SatelliteCallContext {
  /** Aborted when the engine cancels the call, its time is up, or the satellite closes. */
  signal: AbortSignal;
  node_id: string;
  run_id: string;
  trace_id: string;
  /** The call's whole budget (ms), as the engine sent it. */
  timeout_ms: number;
  /** A log line the engine adds to the call's result. */
  log(level: 'debug' | 'info' | 'warn' | 'error', message: string): void;
  progress(progress: number, total?: number, message?: string): void;
}

export interface SatelliteTool {
  /** Letters, digits, `_` and `-` (it is a token of the tool's subject); the engine names it `<provider>.<name>`. */
  name: string;
  description?: string;
  /** JSON Schema of the input (an object schema); the engine checks every call's input against it. */
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  /** Returns the result (JSON); a throw is the call's failure (`TOOL_ERROR`, or a SatelliteError's code). */
  // biome-ignore lint/suspicious/noExplicitAny: a handler's input is whatever its schema admits
  handler(input: any, ctx: SatelliteCallContext): unknown;
}

export interface SatelliteOptions {
  /** NATS server URL(s), e.g. nats://127.0.0.1:4222 (a server off loopback needs `auth`). */
  servers: string | string[];
  /** The namespace of the subjects, as the engine's provider names it (default "default"). */
  deployment?: string;
  /** This satellite's id (a subject token); default `<host>-<random>`. Calls may target it by id. */
  node_id?: string;
  tools: readonly SatelliteTool[];
  /** Calls it runs at once (default SATELLITE_LIMITS.capacity); more wait for a slot. */
  capacity?: number;
  /** Calls that may wait for a slot; past them it answers `BUSY` (default SATELLITE_LIMITS.queue). */
  queue?: number;
  /** Its version, announced in heartbeats (default "0.0.0"). */
  version?: string;
  /** How often it announces itself (default SATELLITE_LIMITS.heartbeat_ms). */
  heartbeat_ms?: number;
  /** How often it tells an engine a call is still running (default SATELLITE_LIMITS.keepalive_ms). */
  keepalive_ms?: number;
  /** Credentials for the server (an nkey as the seed's bytes). */
  auth?: NatsAuth;
  /** TLS files: the CA to verify the server with, and a client certificate and key for mutual TLS. */
  tls?: { ca_file?: string; cert_file?: string; key_file?: string };
}

export interface Satellite {
  readonly node_id: string;
  /** What its next heartbeat says. */
  heartbeat(): SatelliteHeartbeat;
  /** Takes no new calls, says it is leaving, lets the running calls finish, then disconnects. */
  close(): Promise<void>;
}

/** A failure with one of the codes a satellite may report (wire.ts SATELLITE_CODES), e.g. `INVALID_INPUT`. */
export class SatelliteError extends Error {
  override readonly name = 'SatelliteError';
  constructor(
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

/** Connects to the NATS server and serves `tools` until closed. Bad options are an Error that names them. */
export async function satellite(options: SatelliteOptions): Promise<Satellite> {
  const tools = checkTools(options.tools);
  const nodeId =
    options.node_id ??
    `${hostname()
      .replace(/[^A-Za-z0-9_-]/g, '-')
      .slice(0, 40)}-${randomUUID().slice(0, 8)}`;
  if (!NODE_ID.test(nodeId)) throw new Error(`node_id "${nodeId}" must be 1 to 64 letters, digits, "_" or "-"`);
  const capacity = positive('capacity', options.capacity ?? SATELLITE_LIMITS.capacity);
  const queue = options.queue === 0 ? 0 : positive('queue', options.queue ?? SATELLITE_LIMITS.queue);
  const heartbeatMs = positive('heartbeat_ms', options.heartbeat_ms ?? SATELLITE_LIMITS.heartbeat_ms);
  const keepaliveMs = positive('keepalive_ms', options.keepalive_ms ?? SATELLITE_LIMITS.keepalive_ms);
  const settings = checkSettings(
    {
      servers: typeof options.servers === 'string' ? options.servers.split(',') : [...options.servers],
      deployment: options.deployment ?? 'default',
      auth: options.auth ?? null,
      tls: options.tls ?? null,
    },
    'satellite',
  );
  const nc = await connectNats(settings, `arium satellite ${nodeId}`);
  return new NatsSatellite(nc, satelliteSubjects(settings.deployment), nodeId, tools, {
    capacity,
    queue,
    heartbeatMs,
    keepaliveMs,
    version: options.version ?? '0.0.0',
  });
}

function positive(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a whole number, 1 or more (got ${value})`);
  return value;
}

function checkTools(tools: readonly SatelliteTool[]): ReadonlyMap<string, SatelliteTool> {
  if (!Array.isArray(tools) || tools.length === 0) throw new Error('tools: give at least one { name, inputSchema, handler }');
  if (tools.length > SATELLITE_LIMITS.max_tools) throw new Error(`tools: at most ${SATELLITE_LIMITS.max_tools} per satellite (got ${tools.length})`);
  const byName = new Map<string, SatelliteTool>();
  for (const [i, tool] of tools.entries()) {
    const where = `tools[${i}]`;
    if (typeof tool?.name !== 'string' || !TOOL_NAME.test(tool.name))
      throw new Error(`${where}.name must be 1 to 64 letters, digits, "_" or "-" (got ${JSON.stringify(tool?.name)})`);
    if (byName.has(tool.name)) throw new Error(`${where}.name: "${tool.name}" is given twice`);
    if (typeof tool.handler !== 'function') throw new Error(`${where} ("${tool.name}"): handler must be a function`);
    if (typeof tool.inputSchema !== 'object' || tool.inputSchema === null || Array.isArray(tool.inputSchema))
      throw new Error(`${where} ("${tool.name}"): inputSchema must be a JSON Schema object, e.g. { "type": "object" }`);
    if ((tool.description?.length ?? 0) > SATELLITE_LIMITS.description_chars)
      throw new Error(`${where} ("${tool.name}"): description is past ${SATELLITE_LIMITS.description_chars} characters`);
    byName.set(tool.name, tool);
  }
  return byName;
}

/** How long close() waits for the server to take what the satellite last sent before it disconnects anyway. */
const CLOSE_MS = 2000;

interface Settings {
  capacity: number;
  queue: number;
  heartbeatMs: number;
  keepaliveMs: number;
  version: string;
}

class NatsSatellite implements Satellite {
  readonly node_id: string;
  readonly #nc: NatsConnection;
  readonly #subjects: SatelliteSubjects;
  readonly #tools: ReadonlyMap<string, SatelliteTool>;
  readonly #announced: AnnouncedTool[];
  readonly #settings: Settings;
  readonly #subs: Subscription[] = [];
  readonly #calls = new Map<string, { controller: AbortController; done: Promise<void> }>();
  readonly #timer: NodeJS.Timeout;
  #leaving = false;
  #running = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(nc: NatsConnection, subjects: SatelliteSubjects, nodeId: string, tools: ReadonlyMap<string, SatelliteTool>, settings: Settings) {
    this.node_id = nodeId;
    this.#nc = nc;
    this.#subjects = subjects;
    this.#tools = tools;
    this.#settings = settings;
    this.#announced = [...tools.values()].map((t) => ({
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      inputSchema: t.inputSchema,
      ...(t.outputSchema !== undefined ? { outputSchema: t.outputSchema } : {}),
    }));
    for (const name of tools.keys()) {
      const callback = (_error: unknown, msg: Msg) => void this.#serve(name, msg);
      this.#subs.push(nc.subscribe(subjects.tool(name), { queue: subjects.queue(name), callback }));
      this.#subs.push(nc.subscribe(subjects.node(nodeId, name), { callback }));
    }
    this.#subs.push(nc.subscribe(subjects.ping, { callback: () => this.#beat() }));
    nc.subscribe(subjects.ctl(nodeId), { callback: (_error, msg) => this.#control(msg) });
    this.#timer = setInterval(() => this.#beat(), settings.heartbeatMs);
    this.#beat();
  }

  heartbeat(): SatelliteHeartbeat {
    return {
      t: 'hb',
      v: SATELLITE_PROTOCOL,
      node_id: this.node_id,
      version: this.#settings.version,
      capacity: this.#settings.capacity,
      in_flight: this.#calls.size,
      interval_ms: this.#settings.heartbeatMs,
      keepalive_ms: this.#settings.keepaliveMs,
      tools: this.#announced,
      sdk: 'ts',
      ...(this.#leaving ? { leaving: true } : {}),
    };
  }

  #beat(): void {
    if (!this.#nc.isClosed()) this.#nc.publish(this.#subjects.hb, encodeMessage(this.heartbeat()));
  }

  #control(msg: Msg): void {
    const message = decodeMessage(msg.data);
    if (message?.t === 'cancel' && typeof message.id === 'string')
      this.#calls.get(message.id)?.controller.abort(new Error('cancelled by the engine'));
  }

  async #serve(name: string, msg: Msg): Promise<void> {
    const reply = msg.reply;
    if (!reply) return;
    const send = (message: ReplyMessage) => this.#send(reply, message);
    const call = decodeMessage(msg.data);
    if (call?.t !== 'call' || typeof call.id !== 'string') {
      send({ t: 'done', ok: false, error: { code: 'INVALID_INPUT', message: 'not a call message of the satellite protocol' } });
      return;
    }
    const tool = this.#tools.get(name) as SatelliteTool;
    if (this.#leaving) return send({ t: 'done', ok: false, error: { code: 'UNAVAILABLE', message: `satellite ${this.node_id} is leaving` } });
    if (this.#running >= this.#settings.capacity && this.#waiting.length >= this.#settings.queue) {
      return send({
        t: 'done',
        ok: false,
        error: { code: 'BUSY', message: `satellite ${this.node_id} runs ${this.#settings.capacity} calls and has ${this.#settings.queue} waiting` },
      });
    }
    send({ t: 'accept', node_id: this.node_id });
    const controller = new AbortController();
    const timeoutMs = typeof call.timeout_ms === 'number' && call.timeout_ms > 0 ? call.timeout_ms : 60_000;
    const deadline = setTimeout(() => controller.abort(new Error(`the call's ${timeoutMs} ms are up`)), timeoutMs);
    const alive = setInterval(() => send({ t: 'alive' }), this.#settings.keepaliveMs);
    let finished!: () => void;
    this.#calls.set(call.id, { controller, done: new Promise<void>((resolve) => (finished = resolve)) });
    const ctx: SatelliteCallContext = {
      signal: controller.signal,
      node_id: this.node_id,
      run_id: String(call.run_id ?? ''),
      trace_id: String(call.trace_id ?? ''),
      timeout_ms: timeoutMs,
      log: (level, message) => send({ t: 'log', level, message: String(message) }),
      progress: (progress, total, message) =>
        send({ t: 'progress', progress, ...(total !== undefined ? { total } : {}), ...(message !== undefined ? { message } : {}) }),
    };
    // Past its capacity a call waits here for a slot (the engine hears its keepalives meanwhile).
    if (this.#running >= this.#settings.capacity) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    this.#running++;
    try {
      const data = await tool.handler(call.input, ctx);
      send({ t: 'done', ok: true, data: data === undefined ? null : data });
    } catch (error) {
      send({ t: 'done', ok: false, error: errorOf(error, controller.signal) });
    } finally {
      clearTimeout(deadline);
      clearInterval(alive);
      this.#calls.delete(call.id);
      this.#running--;
      this.#waiting.shift()?.();
      finished();
    }
  }

  /** Publishes one message; a result the server cannot carry (past max_payload, or not JSON) is a failure the engine is told. */
  #send(reply: string, message: ReplyMessage): void {
    if (this.#nc.isClosed()) return;
    let bytes: Uint8Array;
    try {
      bytes = encodeMessage(message);
    } catch (error) {
      bytes = encodeMessage({
        t: 'done',
        ok: false,
        error: { code: 'INVALID_OUTPUT', message: `the result is not JSON: ${(error as Error).message}` },
      });
    }
    const max = this.#nc.info?.max_payload ?? 1024 * 1024;
    if (bytes.length > max) {
      const what = message.t === 'done' ? 'result' : `${message.t} message`;
      bytes = encodeMessage({
        t: 'done',
        ok: false,
        error: { code: 'OUTPUT_LIMIT', message: `the ${what} is ${bytes.length} bytes, past the NATS server's max_payload of ${max}` },
      });
    }
    this.#nc.publish(reply, bytes);
  }

  async close(): Promise<void> {
    if (this.#leaving) return;
    this.#leaving = true;
    for (const sub of this.#subs) sub.unsubscribe();
    clearInterval(this.#timer);
    this.#beat();
    await Promise.all([...this.#calls.values()].map((c) => c.done));
    // A drain needs the server: without it (gone, or being reconnected to for ever) it would never end.
    const drained = this.#nc.drain().catch(() => {});
    const waited = await Promise.race([drained.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), CLOSE_MS).unref())]);
    if (!waited) await this.#nc.close().catch(() => {});
  }
}

function errorOf(error: unknown, signal: AbortSignal): { code: string; message: string; details?: Record<string, unknown> } {
  if (error instanceof SatelliteError) {
    return {
      code: SATELLITE_CODES.has(error.code) ? error.code : 'TOOL_ERROR',
      message: error.message,
      ...(error.details ? { details: error.details } : {}),
    };
  }
  const message = error instanceof Error ? error.message : String(error);
  if (signal.aborted) return { code: 'CANCELLED', message: `the call was stopped: ${String((signal.reason as Error)?.message ?? signal.reason)}` };
  return { code: 'TOOL_ERROR', message };
}
