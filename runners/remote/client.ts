import { basename } from 'node:path';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import { ToolFailure } from '../../src/errors.js';
import type { RunContext } from '../../src/runner.js';
import { type CallLink, RemoteCall, transport } from './call.js';
import { connectNats, NatsUnreachable, natsModule } from './connect.js';
import { LiveWorkers, type WorkerInfo } from './live-workers.js';
import { tooLarge } from './parts.js';
import type { NatsSettings } from './settings.js';
import { EnvIndex, type EnvTree, type Shipment } from './shipment.js';
import { Ledger } from './transfers.js';
import { type Tree, TreeIndex } from './tree.js';
import { type BundleFile, type CallMessage, decode, encode, PROTOCOL, type Subjects, subjects } from './wire.js';

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

/**
 * The engine's side of remote runners: one NATS connection, the live workers (from their heartbeats)
 * and the calls sent to them. Each call's messages come back on its own inbox to its `RemoteCall`
 * (call.ts), whose `ctx.vfs` requests run on the call's ToolVfs, exactly as a local sandbox's do.
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
  readonly #calls = new Set<RemoteCall>();
  /** What each worker's calls hold in messages in parts. */
  readonly #ledger = new Ledger();
  /** Calls by the last token of their inbox: one subscription serves every call's inbox. */
  readonly #byInbox = new Map<string, RemoteCall>();
  readonly #inbox: string;
  #connected = false;
  #closed = false;
  /** Why the last attempt to connect failed, while the engine has never been connected. */
  #unreachable: string | null = null;
  readonly #link: CallLink;

  private constructor(settings: NatsSettings, options: RemoteClientOptions, createInbox: () => string) {
    this.#settings = settings;
    this.#subjects = subjects(settings.deployment);
    this.#keepaliveMs = options.keepaliveMs ?? 1000;
    this.#acceptMs = options.acceptMs ?? 2000;
    this.#inbox = createInbox();
    this.#link = {
      deployment: settings.deployment,
      keepaliveMs: this.#keepaliveMs,
      acceptMs: this.#acceptMs,
      ledger: this.#ledger,
      maxPayload: () => this.#maxPayload,
      nextKey: () => ++this.#keys,
      cancel: (worker, call) => this.#cancel(worker, call),
      ended: (call) => {
        this.#calls.delete(call);
        this.#byInbox.delete(call.id);
      },
    };
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
      const call = new RemoteCall(this.#link, { ctx, runner, tree, bundle, env, resolve, reject });
      this.#calls.add(call);
      const inbox = `${this.#inbox}.${call.id}`;
      this.#byInbox.set(call.id, call);
      call.watch();
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
          call.finish(
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
        call.finish(
          transport('UNAVAILABLE', `The call could not be sent: ${String((error as Error)?.message ?? error)}`, { reason: 'disconnected' }),
        );
      }
    });
  }

  #routed(msg: Msg): void {
    const call = this.#byInbox.get(msg.subject.slice(this.#inbox.length + 1));
    if (call) {
      call.message(msg);
      return;
    }
    // A late message of a call that ended (a timeout): dropped; a request gets told.
    if (msg.reply) msg.respond(encode({ t: 'ended' }, 'remote.toWorker'));
  }

  /** Names of answers sent in parts. */
  #keys = 0;

  #cancel(worker: string, call: string): void {
    if (!this.#connected || this.#closed) return;
    try {
      this.#nc?.publish(this.#subjects.ctl(worker), encode({ t: 'cancel', id: call }, 'remote.toWorker'));
    } catch {
      // Closing: the worker's own deadline stops the tool.
    }
  }

  get #maxPayload(): number {
    return this.#nc?.info?.max_payload ?? 1_048_576;
  }

  /** Connection changes: calls fail fast while the server is away, and workers announce themselves once it is back. */
  async #watch(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect') {
        this.#connected = false;
        for (const call of [...this.#calls]) {
          call.finish(
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
    for (const call of [...this.#calls]) call.finish(transport('UNAVAILABLE', 'The engine closed while the call ran on a worker'));
    await this.#nc?.close().catch(() => {});
  }
}

function relativeEntry(toolsDir: string, entryPath: string): string {
  return entryPath
    .slice(toolsDir.length + 1)
    .split('\\')
    .join('/');
}
