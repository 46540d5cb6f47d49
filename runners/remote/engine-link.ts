import type { NatsConnection } from '@nats-io/transport-node';
import { ToolFailure } from '../../src/errors.js';
import type { ForwardedVfs, VfsOp } from '../shared/vfs-ops.js';
import { joinParts, split, tooLarge } from './parts.js';
import { DroppingRequests } from './requests.js';
import { decode, encode, packBytes, unpackBytes, type WireFailure } from './wire.js';

/** How long a worker waits for the engine to send a tools tree or file. */
export const ASK_MS = 30_000;

/**
 * A worker's side of its calls' inboxes: what it publishes and asks the engine there (a message too
 * large for one NATS message travels in parts, either way), the `ctx.vfs` it gives a local runner,
 * and a call's answer.
 */
export class EngineLink {
  readonly #nc: NatsConnection;
  /** Requests to the engine, failed at once when the connection drops (their answers are lost with it). */
  readonly #requests: DroppingRequests;
  readonly #worker: string;
  readonly #host: string;
  /** Names of messages sent in parts. */
  #keys = 0;

  constructor(nc: NatsConnection, worker: string, host: string) {
    this.#nc = nc;
    this.#requests = new DroppingRequests(nc);
    this.#worker = worker;
    this.#host = host;
  }

  /** Publishes unless the connection is closed (a worker closing under its calls must not throw from a timer). */
  publish(subject: string, bytes: Uint8Array): void {
    if (this.#nc.isClosed()) return;
    try {
      this.#nc.publish(subject, bytes);
    } catch {
      // Closed or draining meanwhile: the engine notices the silence.
    }
  }

  get #maxPayload(): number {
    return this.#nc.info?.max_payload ?? 1_048_576;
  }

  /** Sends a call's answer, in parts when it is too large for one message. */
  async done(inbox: string, body: Record<string, unknown>): Promise<void> {
    if (this.#nc.isClosed()) return;
    const bytes = encode({ t: 'done', worker: this.#worker, host: this.#host, ...body }, 'remote.fromWorker');
    if (!tooLarge(bytes, this.#maxPayload)) {
      this.publish(inbox, bytes);
      return;
    }
    try {
      this.publish(inbox, encode(await this.#upload(inbox, bytes, ASK_MS), 'remote.fromWorker'));
    } catch (error) {
      // The answer could not be sent whole: the engine gets the failure instead of waiting for it.
      this.publish(
        inbox,
        encode({ t: 'done', worker: this.#worker, ok: false, error: wireFailure(error), logs: [], intrusions: [], meta: {} }, 'remote.fromWorker'),
      );
    }
  }

  /** Sends the parts of a message too large for one; returns the `large` message that stands for it. */
  async #upload(inbox: string, bytes: Uint8Array, timeout: number): Promise<Record<string, unknown>> {
    const key = `u${++this.#keys}`;
    const parts = split(bytes, this.#maxPayload);
    for (const [index, data] of parts.entries()) await this.ask(inbox, { t: 'put', key, index, data }, timeout);
    return { t: 'large', key, count: parts.length };
  }

  /** `ctx.vfs` for the local runner: every request goes back to the engine on the call's inbox, to be checked there. */
  forwardedVfs(inbox: string, signal: AbortSignal, deadline: number): ForwardedVfs {
    return {
      forwarded: true,
      forward: async (op: VfsOp, args: readonly unknown[]) => {
        if (signal.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call has ended');
        // An engine that went away answers no more: the request waits no longer than the call may run.
        const reply = await this.ask(inbox, { t: 'vfs', op, args: args.map(packBytes) }, Math.max(1, deadline - Date.now()));
        if (reply.t === 'ended') throw new ToolFailure('execution', 'CANCELLED', 'The call has ended');
        if (reply.ok === true) return unpackBytes(reply.value);
        throw failureOf(reply.error);
      },
    };
  }

  /** A request to the engine on the call's inbox; either way, a message too large for one travels in parts. */
  async ask(inbox: string, message: Record<string, unknown>, timeout = ASK_MS): Promise<Record<string, unknown>> {
    try {
      let bytes = encode({ ...message, worker: this.#worker, host: this.#host }, 'remote.fromWorker');
      if (message.t !== 'put' && tooLarge(bytes, this.#maxPayload)) bytes = encode(await this.#upload(inbox, bytes, timeout), 'remote.fromWorker');
      const reply = decode((await this.#requests.request(inbox, bytes, timeout)).data, 'remote.toWorker');
      if (!reply) throw new Error('an answer that is not a message');
      // The engine refused the request: a bound of what it keeps for a call (REMOTE_LIMITS), say.
      if (reply.t === 'refused') throw failureOf(reply.error);
      if (reply.t !== 'parts') return reply;
      const whole = decode(await this.fetchParts(inbox, String(reply.key), Number(reply.count), timeout), 'remote.toWorker');
      if (!whole) throw new Error('an answer in parts that is not a message');
      return whole;
    } catch (error) {
      if (error instanceof ToolFailure) throw error;
      throw new ToolFailure('transport', 'UNAVAILABLE', `The engine did not answer (${String((error as Error)?.message ?? error)})`);
    }
  }

  /** The parts of a message the engine holds under `key`, joined. */
  async fetchParts(inbox: string, key: string, count: number, timeout: number): Promise<Uint8Array> {
    const parts: string[] = [];
    for (let index = 0; index < count; index++) {
      const reply = decode(
        (await this.#requests.request(inbox, encode({ t: 'part', key, index }, 'remote.fromWorker'), timeout)).data,
        'remote.toWorker',
      );
      parts.push(String(reply?.data ?? ''));
    }
    return joinParts(parts);
  }
}

/** The engine's failure as the tool sees it. */
function failureOf(wire: unknown): ToolFailure {
  const error = (wire ?? {}) as WireFailure;
  return new ToolFailure(
    error.stage === 'permission' ? 'permission' : 'execution',
    (error.code ?? 'INTERNAL') as ToolFailure['code'],
    String(error.message),
    {
      ...(error.details ? { details: error.details } : {}),
    },
  );
}

/** A failure of a call on this worker, as the engine is sent it. */
export function wireFailure(error: unknown): WireFailure {
  if (error instanceof ToolFailure) {
    return {
      stage: error.stage,
      code: error.code,
      message: error.message,
      ...(error.details ? { details: error.details } : {}),
      ...(error.toolStack ? { stack: error.toolStack } : {}),
    };
  }
  return { stage: 'execution', code: 'INTERNAL', message: `The worker failed running the call: ${String((error as Error)?.message ?? error)}` };
}
