import { randomUUID } from 'node:crypto';
import type { Msg } from '@nats-io/transport-node';
import { type ErrorCode, ToolFailure } from '../../src/errors.js';
import { REMOTE_LIMITS } from '../../src/limits.js';
import type { RunContext } from '../../src/runner.js';
import { endsCall, isVfsOp, runVfsOp } from '../shared/vfs-ops.js';
import { type CallFiles, fileChunk } from './call-files.js';
import { outcomeOf } from './outcome.js';
import { tooLarge } from './parts.js';
import type { EnvTree } from './shipment.js';
import { CallTransfers, type Ledger } from './transfers.js';
import type { Tree } from './tree.js';
import { decode, encode, packBytes, unpackBytes } from './wire.js';

/** What a call needs of the engine's connection (client.ts). */
export interface CallLink {
  readonly deployment: string;
  /** A worker says it is alive this often during a call; silence for three times this fails the call. */
  readonly keepaliveMs: number;
  /** How long a worker has to send its first message about a call. */
  readonly acceptMs: number;
  /** What each worker's calls hold in messages in parts. */
  readonly ledger: Ledger;
  maxPayload(): number;
  /** A name for an answer sent in parts, unique among the engine's. */
  nextKey(): number;
  /** Tells the worker to stop the call, when the engine is connected. */
  cancel(worker: string, call: string): void;
  /** The call has ended: its inbox closes. */
  ended(call: RemoteCall): void;
}

export interface CallStart {
  readonly ctx: RunContext;
  readonly runner: string;
  readonly tree: Tree;
  readonly bundle: { sha: string; path: string } | null;
  readonly env: EnvTree | null;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

export function transport(code: ErrorCode, message: string, details: Record<string, unknown> = {}): ToolFailure {
  return new ToolFailure('transport', code, message, { details });
}

/**
 * One call sent to a worker, from the engine's side: the watchdog on the worker's silence, the
 * worker's messages (parts, file chunks, `ctx.vfs` requests run here on the call's ToolVfs, the
 * answer), and its end, once.
 */
export class RemoteCall implements CallFiles {
  readonly id = randomUUID();
  readonly ctx: RunContext;
  readonly runner: string;
  readonly tree: Tree;
  readonly bundle: { sha: string; path: string } | null;
  readonly env: EnvTree | null;
  readonly blobs = new Map<string, Buffer>();
  /** Messages too large for one NATS message, both ways, bounded (REMOTE_LIMITS). */
  readonly transfers: CallTransfers;
  readonly #link: CallLink;
  readonly #resolve: (value: unknown) => void;
  readonly #reject: (error: unknown) => void;
  #worker: { id: string; host: string } | null = null;
  lastSeen = Date.now();
  #watchdog: NodeJS.Timeout | null = null;
  #done = false;
  #onAbort: (() => void) | null = null;
  /** Whether the worker's passing a bound was reported as a SecurityEvent (once per call). */
  #reported = false;
  /** ctx.vfs requests waiting for their turn, in the order they came, and their bytes. */
  readonly #turns: Array<{ msg: Msg; work: () => void; bytes: number }> = [];
  #waiting = 0;
  /** Whether the next turn is scheduled. */
  #scheduled = false;

  constructor(link: CallLink, start: CallStart) {
    this.#link = link;
    this.ctx = start.ctx;
    this.runner = start.runner;
    this.tree = start.tree;
    this.bundle = start.bundle;
    this.env = start.env;
    this.#resolve = start.resolve;
    this.#reject = start.reject;
    this.transfers = new CallTransfers(link.ledger);
  }

  /** Stops the call when the engine's signal aborts, and when its worker goes silent. */
  watch(): void {
    const onAbort = () => {
      this.#cancel();
      this.finish(new ToolFailure('execution', 'CANCELLED', 'The call was stopped by the engine'));
    };
    this.#onAbort = onAbort;
    this.ctx.signal.addEventListener('abort', onAbort, { once: true });
    this.#guard();
  }

  /**
   * Fails the call when its worker goes silent: any message of the worker counts, and it sends one soon
   * after it takes the call and then every keepaliveMs; until the first, the window is acceptMs (a busy
   * worker may take a while to pick it up).
   */
  #guard(): void {
    const { keepaliveMs, acceptMs } = this.#link;
    let lastTick = Date.now();
    this.#watchdog = setInterval(() => {
      // Time this thread was too busy to tick (a tick came late) is not the worker's silence: its
      // messages of that time may be waiting unread on the socket.
      const now = Date.now();
      this.transfers.sweep(now);
      this.#schedule();
      const stalled = now - lastTick - keepaliveMs;
      if (stalled > 0) this.lastSeen += stalled;
      lastTick = now;
      const silence = this.#worker === null ? Math.max(acceptMs, 3 * keepaliveMs) : 3 * keepaliveMs;
      if (now - this.lastSeen > silence) {
        const who = this.#worker ? `worker ${this.#worker.id} (${this.#worker.host})` : 'the worker that took it';
        this.finish(
          transport('UNAVAILABLE', `${who} stopped answering during the call (no message for ${silence} ms); nothing it did was committed`, {
            reason: 'worker-lost',
            ...(this.#worker ? { worker: this.#worker.id } : {}),
          }),
        );
      }
    }, keepaliveMs);
    this.#watchdog.unref?.();
  }

  /** A message on the call's inbox: from its worker, or the server's "no responders". */
  message(msg: Msg): void {
    if (this.#done) {
      // A late message of a call that ended (a timeout): dropped; a request gets told.
      if (msg.reply) msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
      return;
    }
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      this.finish(
        transport(
          'UNAVAILABLE',
          `No worker runs ${this.runner} in deployment "${this.#link.deployment}"; start one with arium worker --nats … --runners ${this.runner}`,
          { reason: 'no-workers', runner: this.runner },
        ),
      );
      return;
    }
    this.lastSeen = Date.now();
    const message = decode(msg.data, 'remote.fromWorker');
    // Messages name their worker; one naming another worker than the call's first is dropped.
    if (message && this.#identify(message)) this.#handle(msg, message);
  }

  #handle(msg: Msg, message: Record<string, unknown>): void {
    switch (message.t) {
      case 'part':
        msg.respond(
          encode({ t: 'part', data: this.transfers.part(String(message.key), Number(message.index), this.#link.maxPayload()) }, 'remote.toWorker'),
        );
        // A large answer fetched whole makes room for the requests waiting behind it.
        this.#schedule();
        return;
      case 'put':
        try {
          this.transfers.put(String(message.key), message.index, message.data, this.#link.maxPayload(), this.#workerKey());
          msg.respond(encode({ t: 'ok' }, 'remote.toWorker'));
        } catch (error) {
          this.#refuse(msg, error);
          this.#misbehaved('send a message in parts', error);
        }
        return;
      case 'large': {
        const bytes = this.transfers.take(String(message.key));
        const whole = bytes ? decode(bytes, 'remote.fromWorker') : null;
        if (whole && whole.t !== 'large') this.#handle(msg, whole);
        // What it held is free: a request waiting for room for its answer may go.
        this.#schedule();
        return;
      }
      case 'alive':
        return;
      case 'refused':
        this.finish(
          transport('UNAVAILABLE', `The worker that got the call of ${this.ctx.tool.spec.id} refused it (${String(message.reason)}); retry`, {
            reason: 'refused',
          }),
        );
        return;
      case 'tree':
      case 'env':
        try {
          this.#reply(msg, { t: message.t, entries: message.t === 'tree' ? this.tree.entries : (this.env?.entries ?? []) });
        } catch (error) {
          this.#refuse(msg, error);
        }
        return;
      case 'blob':
        this.#blob(msg, message);
        return;
      case 'vfs':
        this.#inTurn(msg, () => this.#vfs(msg, message));
        return;
      case 'done':
        this.#answer(message);
        return;
    }
  }

  /**
   * Answers a request of the worker, in parts when the answer is larger than one NATS message. Throws
   * BUSY when the call or its worker holds too much in parts already (REMOTE_LIMITS).
   */
  #reply(msg: Msg, message: Record<string, unknown>, bytes = encode(message, 'remote.toWorker'), bounded = true): void {
    const maxPayload = this.#link.maxPayload();
    if (!tooLarge(bytes, maxPayload)) {
      msg.respond(bytes);
      return;
    }
    const key = `d${this.#link.nextKey()}`;
    const count = this.transfers.download(key, bytes, maxPayload, this.#workerKey(), `the answer to a ${String(message.t)} request`, bounded);
    msg.respond(encode({ t: 'parts', key, count }, 'remote.toWorker'));
  }

  /** A request of the worker refused: it is told why, as plain JSON. */
  #refuse(msg: Msg, error: unknown): void {
    const failure = asFailure(error, 'answering the worker');
    msg.respond(encode({ t: 'refused', error: wireError(failure) }, 'remote.toWorker'));
    if (failure.code === 'INTERNAL') {
      this.#cancel();
      this.finish(failure);
    }
  }

  /** One SecurityEvent per call when its worker passes a bound of what the engine keeps for it. */
  #misbehaved(what: string, error: unknown): void {
    if (this.#reported) return;
    this.#reported = true;
    const who = this.#worker ? `worker ${this.#worker.id} (${this.#worker.host})` : 'the worker of the call';
    this.ctx.intrusion(`remote: ${who} tried to ${what}`, (error as Error)?.message ?? String(error));
  }

  #workerKey(): string {
    return this.#worker?.id ?? '';
  }

  #blob(msg: Msg, message: Record<string, unknown>): void {
    const sha = typeof message.sha === 'string' ? message.sha : '';
    msg.respond(encode(fileChunk(this, sha, Number(message.offset), this.#link.maxPayload()), 'remote.toWorker'));
  }

  /**
   * Runs a call's ctx.vfs requests in the order they came, one per turn of the event loop: a large
   * read (megabytes to copy and encode) takes a turn of its own, and timers and other calls' messages
   * run between, however many requests one worker sends at once. While the call (or its worker) holds
   * as many answers in parts as it may (REMOTE_LIMITS), the next waits until the worker fetches one:
   * large reads are paced, not refused; past REMOTE_LIMITS.call_requests waiting, a request is BUSY.
   */
  #inTurn(msg: Msg, work: () => void): void {
    const bytes = msg.data.length;
    const { call_requests: most, call_request_bytes: mostBytes } = REMOTE_LIMITS;
    if (this.#turns.length >= most || this.#waiting + bytes > mostBytes) {
      const failure = new ToolFailure(
        'execution',
        'BUSY',
        `ctx.vfs: this call already has ${this.#turns.length} requests (${this.#waiting} bytes) waiting on the engine (REMOTE_LIMITS.call_requests ${most}, call_request_bytes ${mostBytes}); await some first`,
        { details: { limit: 'call_requests' } },
      );
      msg.respond(encode({ t: 'vfs', ok: false, error: wireError(failure) }, 'remote.toWorker'));
      return;
    }
    this.#turns.push({ msg, work, bytes });
    this.#waiting += bytes;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled || this.#turns.length === 0 || this.#done) return;
    this.#scheduled = true;
    setImmediate(() => this.#nextTurn());
  }

  #nextTurn(): void {
    this.#scheduled = false;
    // Full: a fetched answer, the sweep or the call's end starts the next turn.
    if (this.transfers.full(this.#workerKey())) return;
    const turn = this.#turns.shift();
    if (!turn) return;
    this.#waiting -= turn.bytes;
    try {
      turn.work();
    } catch (error) {
      this.finish(asFailure(error, 'the engine failed answering a ctx.vfs request'));
    }
    this.#schedule();
  }

  /** A ctx.vfs request of the tool, run here on the call's checked view: the worker cannot widen it. */
  #vfs(msg: Msg, message: Record<string, unknown>): void {
    if (this.#done) {
      // The call ended while the request waited for its turn.
      msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
      return;
    }
    const op = message.op;
    const args = Array.isArray(message.args) ? message.args.map(unpackBytes) : null;
    if (!isVfsOp(op) || args === null) {
      msg.respond(
        encode({ t: 'vfs', ok: false, error: { stage: 'execution', code: 'INVALID_INPUT', message: 'Unknown VFS operation' } }, 'remote.toWorker'),
      );
      return;
    }
    try {
      const value = runVfsOp(this.ctx.vfs, op, args);
      const answer = { t: 'vfs', ok: true, value: packBytes(value) };
      const bytes = encode(answer, 'remote.toWorker');
      // What a read or a list sends counts, before it is sent; a change already made is answered whatever its size.
      if (op === 'read' || op === 'list') this.transfers.sent(bytes.length, `ctx.vfs.${op}`);
      // Its turn came when the call had room: the answer is kept whatever its size (one may pass the bound).
      this.#reply(msg, answer, bytes, false);
    } catch (error) {
      const failure = asFailure(error, `ctx.vfs.${op} failed in the engine`);
      msg.respond(encode({ t: 'vfs', ok: false, error: wireError(failure) }, 'remote.toWorker'));
      // As locally: a denial ends the call here, whatever the worker reports later.
      if (failure.code === 'INTERNAL' || endsCall(failure)) {
        this.#cancel();
        this.finish(failure);
      }
    }
  }

  /** The worker's `done`: the call's outcome. */
  #answer(message: Record<string, unknown>): void {
    const outcome = outcomeOf(this.ctx, message);
    if ('failure' in outcome) this.finish(outcome.failure);
    else this.finish(null, outcome.value);
  }

  /** Learns which worker has the call from its first message; false for a message of another worker. */
  #identify(message: Record<string, unknown>): boolean {
    const id = typeof message.worker === 'string' ? message.worker : null;
    if (id === null) return true;
    if (this.#worker === null) this.#worker = { id, host: String(message.host ?? 'unknown') };
    return id === this.#worker.id;
  }

  #cancel(): void {
    if (this.#worker) this.#link.cancel(this.#worker.id, this.id);
  }

  /** Ends the call once: its inbox closes (late messages are dropped) and the caller gets its answer. */
  finish(failure: ToolFailure | null, value?: unknown): void {
    if (this.#done) return;
    this.#done = true;
    this.#link.ended(this);
    if (this.#watchdog) clearInterval(this.#watchdog);
    if (this.#onAbort) this.ctx.signal.removeEventListener('abort', this.#onAbort);
    this.transfers.clear();
    // Requests still waiting for their turn are told the call is over.
    for (const turn of this.#turns.splice(0)) turn.msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
    this.#waiting = 0;
    if (this.#worker) this.ctx.meta.worker = { id: this.#worker.id, host: this.#worker.host };
    if (failure) this.#reject(failure);
    else this.#resolve(value);
  }
}

function asFailure(error: unknown, what: string): ToolFailure {
  return error instanceof ToolFailure ? error : new ToolFailure('execution', 'INTERNAL', what, { cause: error });
}

function wireError(failure: ToolFailure): Record<string, unknown> {
  return { stage: failure.stage, code: failure.code, message: failure.message, ...(failure.details ? { details: failure.details } : {}) };
}
