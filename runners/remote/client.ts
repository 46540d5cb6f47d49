import { randomUUID } from 'node:crypto';
import { basename } from 'node:path';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import { type ErrorCode, ToolFailure } from '../../src/errors.js';
import { REMOTE_LIMITS } from '../../src/limits.js';
import type { RunContext } from '../../src/runner.js';
import { endsCall, isVfsOp, runVfsOp } from '../shared/vfs-ops.js';
import { type CallFiles, fileChunk } from './call-files.js';
import { connectNats, NatsUnreachable, natsModule } from './connect.js';
import { LiveWorkers, type WorkerInfo } from './live-workers.js';
import { outcomeOf } from './outcome.js';
import { tooLarge } from './parts.js';
import type { NatsSettings } from './settings.js';
import { EnvIndex, type EnvTree, type Shipment } from './shipment.js';
import { CallTransfers, Ledger } from './transfers.js';
import { type Tree, TreeIndex } from './tree.js';
import { type BundleFile, type CallMessage, decode, encode, PROTOCOL, packBytes, type Subjects, subjects, unpackBytes } from './wire.js';

export interface RemoteStatus {
  servers: string[];
  deployment: string;
  connected: boolean;
  workers: WorkerInfo[];
  /** Remote calls this engine is waiting on. */
  in_flight: number;
  /** Why it is not connected yet, when it has never been (the server was not reached at the start). */
  problem?: string;
}

/** The first retry of a server not reached at the start, doubled up to the second. */
const FIRST_CONNECT_MS = 250;
const FIRST_CONNECT_MAX_MS = 2_000;

export interface RemoteClientOptions {
  /** A worker says it is alive this often during a call; silence for three times this fails the call. Default 1000. */
  keepaliveMs?: number;
  /** How long a worker has to send its first message about a call. Default 2000. */
  acceptMs?: number;
}

function transport(code: ErrorCode, message: string, details: Record<string, unknown> = {}): ToolFailure {
  return new ToolFailure('transport', code, message, { details });
}

interface Pending extends CallFiles {
  readonly ctx: RunContext;
  readonly id: string;
  readonly runner: string;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  worker: { id: string; host: string } | null;
  lastSeen: number;
  watchdog: NodeJS.Timeout | null;
  done: boolean;
  onAbort: (() => void) | null;
  /** Messages too large for one NATS message, both ways, bounded (REMOTE_LIMITS). */
  readonly transfers: CallTransfers;
  /** Whether the worker's passing a bound was reported as a SecurityEvent (once per call). */
  reported: boolean;
  /** ctx.vfs requests waiting for their turn, in the order they came, and their bytes. */
  readonly turns: Array<{ msg: Msg; work: () => void; bytes: number }>;
  waiting: number;
  /** Whether the next turn is scheduled. */
  scheduled: boolean;
}

/**
 * The engine's side of remote runners: one NATS connection, the live workers (from their heartbeats)
 * and the calls sent to them. A call's `ctx.vfs` requests come back on its own inbox and run here, on
 * the call's ToolVfs, exactly as a local sandbox's requests do.
 */
export class RemoteClient {
  /** Null until the first connection: an engine started while the server is away connects when it is back. */
  #nc: NatsConnection | null = null;
  readonly #settings: NatsSettings;
  readonly #subjects: Subjects;
  readonly #keepaliveMs: number;
  readonly #acceptMs: number;
  readonly #index = new TreeIndex();
  readonly #envs = new EnvIndex();
  readonly #workers = new LiveWorkers();
  readonly #calls = new Set<Pending>();
  /** What each worker's calls hold in messages in parts. */
  readonly #ledger = new Ledger();
  /** Calls by the last token of their inbox: one subscription serves every call's inbox. */
  readonly #byInbox = new Map<string, Pending>();
  readonly #inbox: string;
  #connected = false;
  #closed = false;
  /** Why the last attempt to connect failed, while the engine has never been connected. */
  #unreachable: string | null = null;

  private constructor(settings: NatsSettings, options: RemoteClientOptions, createInbox: () => string) {
    this.#settings = settings;
    this.#subjects = subjects(settings.deployment);
    this.#keepaliveMs = options.keepaliveMs ?? 1000;
    this.#acceptMs = options.acceptMs ?? 2000;
    this.#inbox = createInbox();
  }

  /**
   * Connects to the NATS server. A server that refuses the credentials is an error; one that cannot be
   * reached is not: the engine starts (its local tools work), remote calls fail UNAVAILABLE at once, and
   * it keeps trying until the server answers, as it does after losing a server it had.
   */
  static async open(settings: NatsSettings, options: RemoteClientOptions = {}): Promise<RemoteClient> {
    const nats = await natsModule();
    const client = new RemoteClient(settings, options, () => nats.createInbox());
    try {
      client.#attach(await connectNats(settings, client.#name));
    } catch (error) {
      if (!(error instanceof NatsUnreachable)) throw error;
      client.#unreachable = error.message;
      void client.#connectLater();
    }
    return client;
  }

  get #name(): string {
    return `arium engine ${process.pid}`;
  }

  #attach(nc: NatsConnection): void {
    this.#nc = nc;
    this.#connected = true;
    this.#unreachable = null;
    // One wildcard subscription for every call's inbox (one SUB for the engine's life, not a SUB and
    // an UNSUB per call); an unknown or ended call's messages are dropped.
    nc.subscribe(`${this.#inbox}.*`, { callback: (_error, msg) => this.#routed(msg) });
    nc.subscribe(this.#subjects.hb, { callback: (_error, msg) => this.#workers.heard(decode(msg.data, 'remote.fromWorker')) });
    void this.#watch(nc);
    this.ping();
  }

  /** Tries again and again (backing off to FIRST_CONNECT_MAX_MS) until connected or closed. */
  async #connectLater(): Promise<void> {
    for (let wait = FIRST_CONNECT_MS; !this.#closed; wait = Math.min(wait * 2, FIRST_CONNECT_MAX_MS)) {
      await new Promise((resolve) => setTimeout(resolve, wait).unref?.());
      if (this.#closed) return;
      try {
        const nc = await connectNats(this.#settings, this.#name);
        if (this.#closed) {
          await nc.close().catch(() => {});
          return;
        }
        this.#attach(nc);
        return;
      } catch (error) {
        this.#unreachable = String((error as Error)?.message ?? error);
      }
    }
  }

  /** Asks every worker to announce itself now (a heartbeat), instead of at its next beat. */
  ping(): void {
    if (!this.#closed && this.#connected) this.#nc?.publish(this.#subjects.ping);
  }

  get connected(): boolean {
    return this.#connected;
  }

  /** Live workers: each heard from within three of its heartbeat intervals. */
  workers(): WorkerInfo[] {
    return this.#workers.list();
  }

  status(): RemoteStatus {
    return {
      servers: this.#settings.servers,
      deployment: this.#settings.deployment,
      connected: this.#connected,
      ...(this.#unreachable ? { problem: this.#unreachable } : {}),
      workers: this.workers(),
      in_flight: this.#calls.size,
    };
  }

  /** Publishes an event for outside observers (arium.json remote.events). */
  publishEvent(event: unknown): void {
    if (!this.#connected || this.#closed) return;
    try {
      this.#nc?.publish(this.#subjects.events, new TextEncoder().encode(JSON.stringify({ t: 'event', event })));
    } catch {
      // Observers miss an event while the connection closes; the engine's own listeners and audit log do not.
    }
  }

  /**
   * Runs one call on a worker of `runner`, with what the engine's local runner said it needs there
   * (shipment.ts). Throws ToolFailure as a local runner does; never hangs.
   */
  run(ctx: RunContext, runner: string, shipment: Shipment = {}): Promise<unknown> {
    const environment = shipment.environment;
    if (environment && !this.#closed && !this.#envs.ready(environment.dir, environment.python)) {
      // Hashed once per install, without holding this thread; the call goes out once it is done.
      return this.#envs.prepare(environment.dir, environment.python).then(() => this.#send(ctx, runner, shipment));
    }
    return this.#send(ctx, runner, shipment);
  }

  #send(ctx: RunContext, runner: string, shipment: Shipment): Promise<unknown> {
    if (this.#closed) return Promise.reject(transport('UNAVAILABLE', 'The engine has closed its NATS connection'));
    if (!this.#connected) {
      const where = this.#settings.servers.join(', ');
      return Promise.reject(
        this.#unreachable === null
          ? transport('UNAVAILABLE', `Not connected to the NATS server (${where}); the engine is reconnecting, retry shortly`, {
              reason: 'disconnected',
            })
          : transport(
              'UNAVAILABLE',
              `The NATS server (${where}) has not been reached since the engine started (${this.#unreachable}); the engine keeps trying: start the server or fix remote.nats in arium.json`,
              { reason: 'unreachable' },
            ),
      );
    }
    const toolsDir = ctx.tool.toolsDir;
    if (!toolsDir || !ctx.tool.entryPath) return Promise.reject(new ToolFailure('execution', 'INTERNAL', `${ctx.tool.spec.id} has no entry file`));
    let tree: Tree;
    let bundle: (BundleFile & { path: string }) | null = null;
    let env: EnvTree | null = null;
    try {
      tree = this.#index.tree(toolsDir);
      if (shipment.bundle) bundle = { name: basename(shipment.bundle.path), path: shipment.bundle.path, ...this.#index.file(shipment.bundle.path) };
      if (shipment.environment) env = this.#envs.tree(shipment.environment.dir, shipment.environment.python);
    } catch (error) {
      return Promise.reject(error);
    }
    const entry = relativeEntry(toolsDir, ctx.tool.entryPath);
    if (!tree.entries.some(([path]) => path === entry)) {
      // Replaced since it loaded (by a FIFO, a folder, a link out of the tools folder) or gone: workers get files only.
      return Promise.reject(
        new ToolFailure('execution', 'TOOL_ERROR', `${entry} is not a regular file in the tools folder, so no worker can be sent it`, {
          details: { phase: 'load', file: `tools/${entry}` },
        }),
      );
    }
    if (shipment.bundle) {
      const { bytes, built_ms } = shipment.bundle;
      ctx.meta.bundle = { bytes, ...(built_ms !== undefined ? { built_ms } : {}) };
    }
    return new Promise((resolve, reject) => {
      const call: Pending = {
        ctx,
        id: randomUUID(),
        runner,
        tree,
        bundle,
        env,
        resolve,
        reject,
        worker: null,
        lastSeen: Date.now(),
        watchdog: null,
        done: false,
        onAbort: null,
        transfers: new CallTransfers(this.#ledger),
        reported: false,
        turns: [],
        waiting: 0,
        scheduled: false,
        blobs: new Map(),
      };
      this.#calls.add(call);
      const inbox = `${this.#inbox}.${call.id}`;
      this.#byInbox.set(call.id, call);
      const onAbort = () => {
        this.#cancel(call);
        this.#finish(call, new ToolFailure('execution', 'CANCELLED', 'The call was stopped by the engine'));
      };
      call.onAbort = onAbort;
      ctx.signal.addEventListener('abort', onAbort, { once: true });
      this.#guard(call);
      const message: CallMessage = {
        t: 'call',
        v: PROTOCOL,
        id: call.id,
        runner,
        inbox,
        tool: {
          spec: ctx.tool.spec as unknown as Record<string, unknown>,
          hash: ctx.tool.hash,
          source: ctx.tool.source,
          entry,
          tree: tree.hash,
          ...(bundle ? { bundle: { name: bundle.name, sha: bundle.sha, size: bundle.size } } : {}),
          ...(env ? { env: { hash: env.hash, python: env.python } } : {}),
        },
        input: ctx.input,
        limits: ctx.limits as unknown as Record<string, number>,
        run_id: ctx.runId,
        trace_id: ctx.traceId,
        keepalive_ms: this.#keepaliveMs,
      };
      let payload = encode(message, 'remote.toWorker');
      if (tooLarge(payload, this.#maxPayload)) {
        // The input is what makes a call large: the worker fetches it from the call's inbox.
        const input = new TextEncoder().encode(JSON.stringify(ctx.input));
        const count = call.transfers.download('input', input, this.#maxPayload, '', 'the call’s input');
        payload = encode({ ...message, input: null, input_parts: { key: 'input', count } }, 'remote.toWorker');
        if (tooLarge(payload, this.#maxPayload)) {
          this.#finish(
            call,
            new ToolFailure(
              'execution',
              'MISCONFIGURED',
              `The definition of ${ctx.tool.spec.id} is too large for the NATS server's max_payload (${this.#maxPayload} bytes)`,
            ),
          );
          return;
        }
      }
      // One message out: the call, with the call's inbox as its reply subject. Everything the worker
      // sends comes there; so does the server's "no responders" when no worker is in the queue group.
      call.lastSeen = Date.now();
      try {
        (this.#nc as NatsConnection).publish(this.#subjects.run(runner), payload, { reply: inbox });
      } catch (error) {
        // A connection closing under the call: a result, like every other failure to reach a worker.
        this.#finish(
          call,
          transport('UNAVAILABLE', `The call could not be sent: ${String((error as Error)?.message ?? error)}`, { reason: 'disconnected' }),
        );
      }
    });
  }

  /**
   * Fails the call when its worker goes silent: any message of the worker counts, and it sends one soon
   * after it takes the call and then every keepaliveMs; until the first, the window is acceptMs (a busy
   * worker may take a while to pick it up).
   */
  #guard(call: Pending): void {
    let lastTick = Date.now();
    call.watchdog = setInterval(() => {
      // Time this thread was too busy to tick (a tick came late) is not the worker's silence: its
      // messages of that time may be waiting unread on the socket.
      const now = Date.now();
      call.transfers.sweep(now);
      this.#schedule(call);
      const stalled = now - lastTick - this.#keepaliveMs;
      if (stalled > 0) call.lastSeen += stalled;
      lastTick = now;
      const silence = call.worker === null ? Math.max(this.#acceptMs, 3 * this.#keepaliveMs) : 3 * this.#keepaliveMs;
      if (now - call.lastSeen > silence) {
        const who = call.worker ? `worker ${call.worker.id} (${call.worker.host})` : 'the worker that took it';
        this.#finish(
          call,
          transport('UNAVAILABLE', `${who} stopped answering during the call (no message for ${silence} ms); nothing it did was committed`, {
            reason: 'worker-lost',
            ...(call.worker ? { worker: call.worker.id } : {}),
          }),
        );
      }
    }, this.#keepaliveMs);
    call.watchdog.unref?.();
  }

  #routed(msg: Msg): void {
    const call = this.#byInbox.get(msg.subject.slice(this.#inbox.length + 1));
    if (call) {
      this.#message(call, msg);
      return;
    }
    // A late message of a call that ended (a timeout): dropped; a request gets told.
    if (msg.reply) msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
  }

  #message(call: Pending, msg: Msg): void {
    if (call.done) {
      // A late message of a call that ended (a timeout): dropped; a request gets told.
      if (msg.reply) msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
      return;
    }
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      this.#finish(
        call,
        transport(
          'UNAVAILABLE',
          `No worker runs ${call.runner} in deployment "${this.#settings.deployment}"; start one with arium worker --nats … --runners ${call.runner}`,
          { reason: 'no-workers', runner: call.runner },
        ),
      );
      return;
    }
    call.lastSeen = Date.now();
    const message = decode(msg.data, 'remote.fromWorker');
    // Messages name their worker; one naming another worker than the call's first is dropped.
    if (message && this.#identify(call, message)) this.#handle(call, msg, message);
  }

  #handle(call: Pending, msg: Msg, message: Record<string, unknown>): void {
    switch (message.t) {
      case 'part':
        msg.respond(
          encode({ t: 'part', data: call.transfers.part(String(message.key), Number(message.index), this.#maxPayload) }, 'remote.toWorker'),
        );
        // A large answer fetched whole makes room for the requests waiting behind it.
        this.#schedule(call);
        return;
      case 'put':
        try {
          call.transfers.put(String(message.key), message.index, message.data, this.#maxPayload, this.#workerKey(call));
          msg.respond(encode({ t: 'ok' }, 'remote.toWorker'));
        } catch (error) {
          this.#refuse(call, msg, error);
          this.#misbehaved(call, 'send a message in parts', error);
        }
        return;
      case 'large': {
        const bytes = call.transfers.take(String(message.key));
        const whole = bytes ? decode(bytes, 'remote.fromWorker') : null;
        if (whole && whole.t !== 'large') this.#handle(call, msg, whole);
        // What it held is free: a request waiting for room for its answer may go.
        this.#schedule(call);
        return;
      }
      case 'alive':
        return;
      case 'refused':
        this.#finish(
          call,
          transport('UNAVAILABLE', `The worker that got the call of ${call.ctx.tool.spec.id} refused it (${String(message.reason)}); retry`, {
            reason: 'refused',
          }),
        );
        return;
      case 'tree':
      case 'env':
        try {
          this.#reply(call, msg, { t: message.t, entries: message.t === 'tree' ? call.tree.entries : (call.env?.entries ?? []) });
        } catch (error) {
          this.#refuse(call, msg, error);
        }
        return;
      case 'blob':
        this.#blob(call, msg, message);
        return;
      case 'vfs':
        this.#inTurn(call, msg, () => this.#vfs(call, msg, message));
        return;
      case 'done':
        this.#done(call, message);
        return;
    }
  }

  /**
   * Answers a request of the worker, in parts when the answer is larger than one NATS message. Throws
   * BUSY when the call or its worker holds too much in parts already (REMOTE_LIMITS).
   */
  #reply(call: Pending, msg: Msg, message: Record<string, unknown>, bytes = encode(message, 'remote.toWorker'), bounded = true): void {
    if (!tooLarge(bytes, this.#maxPayload)) {
      msg.respond(bytes);
      return;
    }
    const key = `d${++this.#keys}`;
    const count = call.transfers.download(
      key,
      bytes,
      this.#maxPayload,
      this.#workerKey(call),
      `the answer to a ${String(message.t)} request`,
      bounded,
    );
    msg.respond(encode({ t: 'parts', key, count }, 'remote.toWorker'));
  }

  /** A request of the worker refused: it is told why, as plain JSON. */
  #refuse(call: Pending, msg: Msg, error: unknown): void {
    const failure = asFailure(error, 'answering the worker');
    msg.respond(encode({ t: 'refused', error: wireError(failure) }, 'remote.toWorker'));
    if (failure.code === 'INTERNAL') {
      this.#cancel(call);
      this.#finish(call, failure);
    }
  }

  /** One SecurityEvent per call when its worker passes a bound of what the engine keeps for it. */
  #misbehaved(call: Pending, what: string, error: unknown): void {
    if (call.reported) return;
    call.reported = true;
    const who = call.worker ? `worker ${call.worker.id} (${call.worker.host})` : 'the worker of the call';
    call.ctx.intrusion(`remote: ${who} tried to ${what}`, (error as Error)?.message ?? String(error));
  }

  #workerKey(call: Pending): string {
    return call.worker?.id ?? '';
  }

  #keys = 0;

  get #maxPayload(): number {
    return this.#nc?.info?.max_payload ?? 1_048_576;
  }

  #blob(call: Pending, msg: Msg, message: Record<string, unknown>): void {
    const sha = typeof message.sha === 'string' ? message.sha : '';
    msg.respond(encode(fileChunk(call, sha, Number(message.offset), this.#maxPayload), 'remote.toWorker'));
  }

  /**
   * Runs a call's ctx.vfs requests in the order they came, one per turn of the event loop: a large
   * read (megabytes to copy and encode) takes a turn of its own, and timers and other calls' messages
   * run between, however many requests one worker sends at once. While the call (or its worker) holds
   * as many answers in parts as it may (REMOTE_LIMITS), the next waits until the worker fetches one:
   * large reads are paced, not refused; past REMOTE_LIMITS.call_requests waiting, a request is BUSY.
   */
  #inTurn(call: Pending, msg: Msg, work: () => void): void {
    const bytes = msg.data.length;
    const { call_requests: most, call_request_bytes: mostBytes } = REMOTE_LIMITS;
    if (call.turns.length >= most || call.waiting + bytes > mostBytes) {
      const failure = new ToolFailure(
        'execution',
        'BUSY',
        `ctx.vfs: this call already has ${call.turns.length} requests (${call.waiting} bytes) waiting on the engine (REMOTE_LIMITS.call_requests ${most}, call_request_bytes ${mostBytes}); await some first`,
        { details: { limit: 'call_requests' } },
      );
      msg.respond(encode({ t: 'vfs', ok: false, error: wireError(failure) }, 'remote.toWorker'));
      return;
    }
    call.turns.push({ msg, work, bytes });
    call.waiting += bytes;
    this.#schedule(call);
  }

  #schedule(call: Pending): void {
    if (call.scheduled || call.turns.length === 0 || call.done) return;
    call.scheduled = true;
    setImmediate(() => this.#nextTurn(call));
  }

  #nextTurn(call: Pending): void {
    call.scheduled = false;
    // Full: a fetched answer, the sweep or the call's end starts the next turn.
    if (call.transfers.full(this.#workerKey(call))) return;
    const turn = call.turns.shift();
    if (!turn) return;
    call.waiting -= turn.bytes;
    try {
      turn.work();
    } catch (error) {
      this.#finish(call, asFailure(error, 'the engine failed answering a ctx.vfs request'));
    }
    this.#schedule(call);
  }

  /** A ctx.vfs request of the tool, run here on the call's checked view: the worker cannot widen it. */
  #vfs(call: Pending, msg: Msg, message: Record<string, unknown>): void {
    if (call.done) {
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
      const value = runVfsOp(call.ctx.vfs, op, args);
      const answer = { t: 'vfs', ok: true, value: packBytes(value) };
      const bytes = encode(answer, 'remote.toWorker');
      // What a read or a list sends counts, before it is sent; a change already made is answered whatever its size.
      if (op === 'read' || op === 'list') call.transfers.sent(bytes.length, `ctx.vfs.${op}`);
      // Its turn came when the call had room: the answer is kept whatever its size (one may pass the bound).
      this.#reply(call, msg, answer, bytes, false);
    } catch (error) {
      const failure = asFailure(error, `ctx.vfs.${op} failed in the engine`);
      msg.respond(encode({ t: 'vfs', ok: false, error: wireError(failure) }, 'remote.toWorker'));
      // As locally: a denial ends the call here, whatever the worker reports later.
      if (failure.code === 'INTERNAL' || endsCall(failure)) {
        this.#cancel(call);
        this.#finish(call, failure);
      }
    }
  }

  #done(call: Pending, message: Record<string, unknown>): void {
    const outcome = outcomeOf(call.ctx, message);
    if ('failure' in outcome) this.#finish(call, outcome.failure);
    else this.#finish(call, null, outcome.value);
  }

  /** Learns which worker has the call from its first message; false for a message of another worker. */
  #identify(call: Pending, message: Record<string, unknown>): boolean {
    const id = typeof message.worker === 'string' ? message.worker : null;
    if (id === null) return true;
    if (call.worker === null) call.worker = { id, host: String(message.host ?? 'unknown') };
    return id === call.worker.id;
  }

  #cancel(call: Pending): void {
    if (!call.worker || !this.#connected || this.#closed) return;
    try {
      this.#nc?.publish(this.#subjects.ctl(call.worker.id), encode({ t: 'cancel', id: call.id }, 'remote.toWorker'));
    } catch {
      // Closing: the worker's own deadline stops the tool.
    }
  }

  /** Ends a call once: its inbox closes (late messages are dropped) and the caller gets its answer. */
  #finish(call: Pending, failure: ToolFailure | null, value?: unknown): void {
    if (call.done) return;
    call.done = true;
    this.#calls.delete(call);
    if (call.watchdog) clearInterval(call.watchdog);
    if (call.onAbort) call.ctx.signal.removeEventListener('abort', call.onAbort);
    this.#byInbox.delete(call.id);
    call.transfers.clear();
    // Requests still waiting for their turn are told the call is over.
    for (const turn of call.turns.splice(0)) turn.msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
    call.waiting = 0;
    if (call.worker) call.ctx.meta.worker = { id: call.worker.id, host: call.worker.host };
    if (failure) call.reject(failure);
    else call.resolve(value);
  }

  /** Connection changes: calls fail fast while the server is away, and workers announce themselves once it is back. */
  async #watch(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect') {
        this.#connected = false;
        for (const call of [...this.#calls]) {
          this.#finish(
            call,
            transport('UNAVAILABLE', 'The connection to the NATS server was lost during the call; nothing it did was committed', {
              reason: 'disconnected',
            }),
          );
        }
      } else if (status.type === 'reconnect') {
        this.#connected = true;
        this.ping();
      }
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const call of [...this.#calls]) this.#finish(call, transport('UNAVAILABLE', 'The engine closed while the call ran on a worker'));
    await this.#nc?.close().catch(() => {});
  }
}

function asFailure(error: unknown, what: string): ToolFailure {
  return error instanceof ToolFailure ? error : new ToolFailure('execution', 'INTERNAL', what, { cause: error });
}

function wireError(failure: ToolFailure): Record<string, unknown> {
  return { stage: failure.stage, code: failure.code, message: failure.message, ...(failure.details ? { details: failure.details } : {}) };
}

function relativeEntry(toolsDir: string, entryPath: string): string {
  return entryPath
    .slice(toolsDir.length + 1)
    .split('\\')
    .join('/');
}
