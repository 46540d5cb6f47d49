/**
 * The `nats` provider kind: tools served by satellites, processes on a NATS bus that announce their
 * tools in heartbeats (src/satellite, sdk/python). A satellite's tools are offered while its heartbeats
 * last and withdrawn when they stop; a call is a request on the tool's queue group, or on one node's own
 * subject (nats-satellites.ts decides which). Wire: src/satellite/wire.ts.
 */
import { randomUUID } from 'node:crypto';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connectNats, natsModule } from '../../runners/remote/connect.js';
import { type ErrorCode, isRetryable } from '../errors.js';
import { ERROR_MESSAGE_CHARS, SATELLITE_LIMITS } from '../limits.js';
import { encodeMessage, SATELLITE_CODES, SATELLITE_PROTOCOL, type SatelliteSubjects, satelliteSubjects } from '../satellite/wire.js';
import { NODE_FIELD, SatelliteDirectory } from './nats-satellites.js';
import { connectionOf, type NatsProviderSettings, parseNatsSettings } from './nats-settings.js';
import type {
  Provider,
  ProviderCallContext,
  ProviderDeps,
  ProviderKind,
  ProviderOutcome,
  ProviderState,
  ProviderStatus,
  ProviderTool,
} from './provider.js';

export { type NatsProviderSettings, parseNatsSettings } from './nats-settings.js';

export const natsProviderKind: ProviderKind<NatsProviderSettings> = {
  key: 'nats',
  parse: parseNatsSettings,
  create: (name, settings, deps) => new NatsProvider(name, settings, deps),
};

/** A call waiting for its satellite's answer. */
interface Pending {
  readonly tool: string;
  readonly ctx: ProviderCallContext;
  node: string | null;
  /** The satellite said it took the call. */
  accepted: boolean;
  notes: number;
  /** Ends the call once with this outcome. */
  finish(outcome: ProviderOutcome): void;
  /** A message came from the satellite: the keepalive watchdog starts again. */
  heard(): void;
}

export class NatsProvider implements Provider {
  readonly kind = 'nats';
  readonly name: string;
  readonly #settings: NatsProviderSettings;
  readonly #deps: ProviderDeps;
  readonly #listeners = new Set<() => void>();
  readonly #calls = new Map<string, Pending>();
  #state: ProviderState = 'idle';
  #error: string | undefined;
  #restarts = 0;
  #nc: NatsConnection | null = null;
  #subjects: SatelliteSubjects | null = null;
  #directory: SatelliteDirectory | null = null;
  #inbox = '';
  #deployment = '';
  #starting: Promise<void> | null = null;
  readonly #subs: Subscription[] = [];

  constructor(name: string, settings: NatsProviderSettings, deps: ProviderDeps) {
    this.name = name;
    this.#settings = settings;
    this.#deps = deps;
  }

  start(): Promise<void> {
    this.#starting ??= this.#start().catch((error) => {
      this.#state = 'failed';
      this.#error = (error as Error).message;
      this.#starting = null;
      throw error;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    if (this.#state === 'closed') throw new Error(`provider ${this.name} is closed`);
    this.#state = 'starting';
    const settings = connectionOf(this.#settings, this.#deps, this.name);
    const nc = await connectNats(settings, `arium provider ${this.name}`);
    if ((this.#state as ProviderState) === 'closed') {
      await nc.close();
      return;
    }
    const { createInbox } = await natsModule();
    this.#nc = nc;
    this.#deployment = settings.deployment;
    const subjects = satelliteSubjects(settings.deployment);
    this.#subjects = subjects;
    this.#inbox = createInbox();
    let lastBeat = 0;
    this.#directory = new SatelliteDirectory(subjects, this.#settings.heartbeat_timeout_ms, {
      changed: () => this.#toolsChanged(),
      dropped: (node, why) => this.#nodeDropped(node, why),
      log: (level, message) => this.#deps.log(level, `provider ${this.name}: ${message}`),
    });
    // One wildcard subscription serves every call's inbox.
    this.#subs.push(nc.subscribe(`${this.#inbox}.*`, { callback: (_error, msg) => this.#reply(msg) }));
    this.#subs.push(
      nc.subscribe(subjects.hb, {
        callback: (_error, msg) => {
          const message = decodeUntrusted(msg.data);
          if (message) {
            lastBeat = Date.now();
            this.#directory?.heard(message);
          }
        },
      }),
    );
    void this.#watch(nc);
    nc.publish(subjects.ping);
    await nc.flush();
    // The satellites answer the ping at once: the tools they offer are known when start() returns
    // (the wait ends 50 ms after the last answer, at most 500 ms after the ping).
    const began = Date.now();
    while (Date.now() - began < 500 && (lastBeat === 0 ? Date.now() - began < 150 : Date.now() - lastBeat < 50)) {
      await new Promise((r) => setTimeout(r, 10));
    }
    this.#state = 'ready';
    this.#error = undefined;
  }

  /** Follows the connection: while it is lost, calls fail UNAVAILABLE; back, satellites are asked to announce themselves. */
  async #watch(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (this.#state === 'closed') return;
      if (status.type === 'disconnect') {
        this.#state = 'restarting';
        this.#error = `lost the NATS server ${String(status.server)}; reconnecting`;
        this.#deps.log('warn', `provider ${this.name}: ${this.#error}`);
      } else if (status.type === 'reconnect') {
        this.#state = 'ready';
        this.#error = undefined;
        this.#restarts++;
        if (this.#subjects) nc.publish(this.#subjects.ping);
      }
    }
  }

  tools(): ProviderTool[] {
    return this.#directory?.tools() ?? [];
  }

  onToolsChanged(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #toolsChanged(): void {
    for (const listener of this.#listeners) {
      try {
        listener();
      } catch (error) {
        this.#deps.log('error', `provider ${this.name}: a tools-changed listener failed: ${(error as Error).message}`);
      }
    }
  }

  /** A satellite is gone: the calls it was running cannot end any other way. */
  #nodeDropped(node: string, why: string): void {
    this.#deps.log('info', `provider ${this.name}: satellite ${node} is gone (${why})`);
    for (const call of this.#calls.values()) {
      if (call.node === node) {
        call.finish(unavailable(`Satellite ${node} went away while it ran ${call.tool} (${why}); the call may be retried`, { node_id: node }));
      }
    }
  }

  call(tool: string, input: unknown, ctx: ProviderCallContext): Promise<ProviderOutcome> {
    const nc = this.#nc;
    const directory = this.#directory;
    if (!nc || !directory || this.#state === 'closed') return Promise.resolve(unavailable(`Provider ${this.name} is not started`, {}));
    if (this.#state === 'restarting') return Promise.resolve(unavailable(`Provider ${this.name} has lost its NATS server: ${this.#error}`, {}));
    if (ctx.signal.aborted) return Promise.resolve(failure('CANCELLED', `The call of ${tool} was cancelled before it was sent`, {}));
    // The node comes from the call's context, or from the `node_id` the listed schema added to the input.
    let nodeId = ctx.nodeId;
    if (directory.routedByInput(tool) && typeof input === 'object' && input !== null && Object.hasOwn(input, NODE_FIELD)) {
      const { [NODE_FIELD]: named, ...rest } = input as Record<string, unknown>;
      if (typeof named === 'string') nodeId ??= named;
      input = rest;
    }
    const route = directory.route(tool, nodeId);
    if ('failure' in route) return Promise.resolve(route.failure);
    const id = randomUUID();
    const message = {
      t: 'call',
      v: SATELLITE_PROTOCOL,
      id,
      tool,
      input,
      run_id: ctx.runId,
      trace_id: ctx.traceId,
      timeout_ms: ctx.timeoutMs,
    };
    let payload: Uint8Array;
    try {
      payload = encodeMessage(message);
    } catch (error) {
      return Promise.resolve(failure('INVALID_INPUT', `The input of ${tool} cannot be sent as JSON: ${(error as Error).message}`, {}));
    }
    const max = nc.info?.max_payload ?? 1024 * 1024;
    if (payload.length > max) {
      return Promise.resolve(
        failure('INPUT_TOO_LARGE', `The call of ${tool} is ${payload.length} bytes, past the NATS server's max_payload of ${max}`, {
          bytes: payload.length,
          max_payload: max,
        }),
      );
    }
    return new Promise<ProviderOutcome>((resolveCall) => {
      const timers: NodeJS.Timeout[] = [];
      let watchdog: NodeJS.Timeout | null = null;
      const pending: Pending = {
        tool,
        ctx,
        node: route.node,
        accepted: false,
        notes: 0,
        finish: (outcome) => {
          if (!this.#calls.delete(id)) return;
          for (const timer of timers) clearTimeout(timer);
          if (watchdog) clearTimeout(watchdog);
          ctx.signal.removeEventListener('abort', onAbort);
          const details = outcome.ok ? null : outcome.details;
          resolveCall(
            outcome.ok || !pending.node || details?.node_id !== undefined
              ? outcome
              : { ...outcome, details: { ...details, node_id: pending.node, selection_mode: route.mode } },
          );
        },
        heard: () => {
          if (watchdog) clearTimeout(watchdog);
          const keepalive = (pending.node && directory.node(pending.node)?.keepalive_ms) || SATELLITE_LIMITS.keepalive_ms;
          watchdog = setTimeout(
            () =>
              pending.finish(
                unavailable(
                  `Satellite ${pending.node} stopped answering while it ran ${tool} (nothing for ${3 * keepalive} ms); the call may be retried`,
                  {
                    node_id: pending.node,
                  },
                ),
              ),
            3 * keepalive,
          );
        },
      };
      const onAbort = () => {
        if (pending.node && this.#subjects) nc.publish(this.#subjects.ctl(pending.node), encodeMessage({ t: 'cancel', id }));
        pending.finish(failure('CANCELLED', `The call of ${tool} was cancelled`, {}));
      };
      ctx.signal.addEventListener('abort', onAbort, { once: true });
      timers.push(
        setTimeout(() => {
          if (!pending.accepted) pending.finish(unavailable(`No satellite took the call of ${tool} within ${this.#settings.accept_ms} ms`, {}));
        }, this.#settings.accept_ms),
        setTimeout(() => {
          if (pending.node && this.#subjects) nc.publish(this.#subjects.ctl(pending.node), encodeMessage({ t: 'cancel', id }));
          pending.finish(failure('TIMEOUT', `${tool} did not answer within ${ctx.timeoutMs} ms`, {}));
        }, ctx.timeoutMs),
      );
      this.#calls.set(id, pending);
      nc.publish(route.subject, payload, { reply: `${this.#inbox}.${id}` });
    });
  }

  /** A message on a call's inbox: from its satellite, or the server's "no responders". */
  #reply(msg: Msg): void {
    const id = msg.subject.slice(this.#inbox.length + 1);
    const call = this.#calls.get(id);
    if (!call) return;
    const ctx = call.ctx;
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      call.finish(unavailable(`No satellite is subscribed to ${call.tool}${call.node ? ` on node ${call.node}` : ''} (no responders)`, {}));
      return;
    }
    const message = decodeUntrusted(msg.data);
    if (!message) return;
    call.heard();
    switch (message.t) {
      case 'accept':
        call.accepted = true;
        if (typeof message.node_id === 'string' && call.node === null) call.node = message.node_id.slice(0, 64);
        return;
      case 'alive':
        return;
      case 'log':
      case 'progress': {
        if (++call.notes > SATELLITE_LIMITS.call_notes) {
          call.finish(failure('OUTPUT_LIMIT', `${call.tool} sent more than ${SATELLITE_LIMITS.call_notes} log lines and progress notes`, {}));
          return;
        }
        if (message.t === 'log') {
          const level = (['debug', 'info', 'warn', 'error'] as const).find((l) => l === message.level) ?? 'info';
          ctx.onLog?.({ level, message: String(message.message).slice(0, ERROR_MESSAGE_CHARS) });
        } else if (typeof message.progress === 'number') {
          ctx.onProgress?.({
            progress: message.progress,
            ...(typeof message.total === 'number' ? { total: message.total } : {}),
            ...(typeof message.message === 'string' ? { message: message.message.slice(0, ERROR_MESSAGE_CHARS) } : {}),
          });
        }
        return;
      }
      case 'done':
        call.finish(doneOf(message, call.tool));
        return;
      default:
        return;
    }
  }

  status(): ProviderStatus {
    const satellites = this.#directory?.list() ?? [];
    return {
      name: this.name,
      kind: this.kind,
      state: this.#state,
      tools: this.tools().length,
      restarts: this.#restarts,
      ...(this.#error ? { error: this.#error } : {}),
      details: {
        ...(this.#deployment ? { deployment: this.#deployment } : {}),
        satellites,
        in_flight: this.#calls.size,
      },
    };
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    await this.#starting?.catch(() => {});
    for (const call of [...this.#calls.values()]) call.finish(unavailable(`Provider ${this.name} was closed while ${call.tool} ran`, {}));
    for (const sub of this.#subs.splice(0)) sub.unsubscribe();
    this.#directory?.close();
    await this.#nc?.close().catch(() => {});
    this.#nc = null;
  }
}

/** JSON from a satellite, without `__proto__` keys at any depth (it is untrusted); null if not a message. */
function decodeUntrusted(data: Uint8Array): Record<string, unknown> | null {
  try {
    const value = JSON.parse(new TextDecoder().decode(data), (key, inner) => (key === '__proto__' ? undefined : inner));
    return typeof value === 'object' && value !== null && !Array.isArray(value) && typeof value.t === 'string' ? value : null;
  } catch {
    return null;
  }
}

function failure(code: ErrorCode, message: string, details: Record<string, unknown>): ProviderOutcome {
  return { ok: false, code, message, retryable: isRetryable(code), details };
}

function unavailable(message: string, details: Record<string, unknown>): ProviderOutcome {
  return failure('UNAVAILABLE', message, details);
}

/** A satellite's `done` as an outcome: its codes limited to those a satellite may report. */
function doneOf(message: Record<string, unknown>, tool: string): ProviderOutcome {
  if (message.ok === true) return { ok: true, data: message.data ?? null };
  const error = typeof message.error === 'object' && message.error !== null ? (message.error as Record<string, unknown>) : {};
  const code = (SATELLITE_CODES.has(error.code as string) ? error.code : 'TOOL_ERROR') as ErrorCode;
  const details = typeof error.details === 'object' && error.details !== null && !Array.isArray(error.details) ? error.details : {};
  const text = typeof error.message === 'string' ? error.message.slice(0, ERROR_MESSAGE_CHARS) : `${tool} failed without saying why`;
  return failure(code, text, details as Record<string, unknown>);
}
