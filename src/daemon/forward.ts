// Gateways in front of one project kept in NATS JetStream (README "Gateways in front of one project"):
// the gateway whose engine holds the project answers the others' requests for it over NATS, so a load
// balancer may send any request to any gateway. The messages are in src/store/jetstream/forward-wire.ts.
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { KV } from '@nats-io/kv';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connectNats, natsModule } from '../../runners/remote/connect.js';
import type { Engine } from '../engine.js';
import { ToolFailure } from '../errors.js';
import { DEFAULT_GATEWAY_FORWARD } from '../limits.js';
import { type StoreConfig, type StoreSettings, storeSettings } from '../store/jetstream/config.js';
import {
  type AnswerMeta,
  FORWARD_VERSION,
  forwardKey,
  forwardSubject,
  NonceWindow,
  newNonce,
  type RequestMeta,
  SIGNATURE_HEADER,
  seal,
  unseal,
} from '../store/jetstream/forward-wire.js';
import { errorEnvelope } from '../surfaces/http/envelope.js';

/** A request as the forwarding gateway authenticated and parsed it. */
export interface ForwardRequest {
  method: string;
  /** The path and query under the project (`/v1/tools`). */
  path: string;
  headers: Record<string, string>;
  body: Buffer | null;
  caller: string;
  ip: string;
}

export interface ForwardAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** What the holder's gateway does with a request it admitted: run it through its own routes, as the caller (gateway.ts). */
export type LocalHandler = (project: string, request: ForwardRequest) => Promise<ForwardAnswer>;

/** The lease's record (src/store/jetstream-store.ts). */
interface Owner {
  pid: number | null;
  host: string;
  /** Random, one per store opened: tells a new holder from the former one. */
  id: string;
}

/** JetStream's "stream not found": the project was never opened in NATS, so nobody holds it. */
const STREAM_NOT_FOUND = 10059;
const JSON_TYPE = 'application/json; charset=utf-8';

/** One gateway's forwarding: a link per project whose arium.json has `store.forward`. */
export class GatewayForwarding {
  readonly #links = new Map<string, Promise<ProjectLink | null>>();
  readonly #workspace: string;
  readonly #env: Readonly<Record<string, string | undefined>>;
  readonly #handle: LocalHandler;

  constructor(workspace: string, env: Readonly<Record<string, string | undefined>>, handle: LocalHandler) {
    this.#workspace = workspace;
    this.#env = env;
    this.#handle = handle;
  }

  /** The project's link, or null when it is not kept in NATS with forwarding (it is then served as any other). */
  link(project: string): Promise<ProjectLink | null> {
    let link = this.#links.get(project);
    if (!link) {
      link = this.#open(project);
      this.#links.set(project, link);
      // A setting fixed since (a secret exported, a typo in arium.json) is read again by the next request;
      // and only links are kept, so that requests naming made-up projects do not fill the map.
      link.then(
        (made) => {
          if (!made) this.#links.delete(project);
        },
        () => this.#links.delete(project),
      );
    }
    return link;
  }

  async #open(project: string): Promise<ProjectLink | null> {
    // The name comes from a URL: only a folder name of the workspace is looked at.
    if (!/^[A-Za-z0-9._-]{1,255}$/.test(project) || project === '.' || project === '..') return null;
    const dir = join(this.#workspace, project);
    const file = join(dir, 'arium.json');
    if (!existsSync(file)) return null;
    let store: StoreConfig | undefined;
    try {
      store = (JSON.parse(readFileSync(file, 'utf8')) as { store?: StoreConfig }).store;
    } catch {
      // The engine reports a broken arium.json when it opens the project.
      return null;
    }
    if (typeof store?.forward?.secret_env !== 'string' || typeof store.nats !== 'object') return null;
    const misconfigured = (message: string) =>
      new ToolFailure('validation', 'MISCONFIGURED', `Project "${project}" cannot forward between gateways: ${message}`, {
        details: { field: 'arium.json store.forward' },
      });
    const secret = this.#env[store.forward.secret_env];
    if (secret === undefined || secret === '') {
      throw misconfigured(
        `the environment variable ${store.forward.secret_env} (store.forward.secret_env) is not set; export the secret every gateway of the project shares`,
      );
    }
    if (secret.length < DEFAULT_GATEWAY_FORWARD.min_secret_chars) {
      throw misconfigured(
        `the secret in ${store.forward.secret_env} has ${secret.length} characters; use at least ${DEFAULT_GATEWAY_FORWARD.min_secret_chars} (e.g. openssl rand -hex 32)`,
      );
    }
    let settings: StoreSettings;
    try {
      settings = storeSettings(store, project, this.#env, dir);
    } catch (error) {
      throw misconfigured((error as Error).message);
    }
    return new ProjectLink(project, settings, forwardKey(secret, settings.name), this.#handle);
  }

  async close(): Promise<void> {
    const links = await Promise.allSettled([...this.#links.values()]);
    this.#links.clear();
    await Promise.all(links.map((link) => (link.status === 'fulfilled' ? link.value?.close() : undefined)));
  }
}

/** One project's side of forwarding on one gateway: sends requests to the holder, or answers them as the holder. */
export class ProjectLink {
  readonly #project: string;
  readonly #settings: StoreSettings;
  readonly #key: Buffer;
  readonly #handle: LocalHandler;
  readonly #subject: string;
  #nc: Promise<NatsConnection> | null = null;
  #lease: Promise<KV> | null = null;
  #serving: { sub: Subscription; watch: NodeJS.Timeout } | null = null;
  #nonces = new NonceWindow();

  constructor(project: string, settings: StoreSettings, key: Buffer, handle: LocalHandler) {
    this.#project = project;
    this.#settings = settings;
    this.#key = key;
    this.#handle = handle;
    this.#subject = forwardSubject(settings.name);
  }

  #connection(): Promise<NatsConnection> {
    if (!this.#nc) {
      this.#nc = connectNats(
        { servers: this.#settings.servers, deployment: 'default', auth: this.#settings.auth, tls: this.#settings.tls },
        `arium-gateway ${this.#settings.name}`,
      );
      this.#nc.catch(() => {
        this.#nc = null;
      });
    }
    return this.#nc;
  }

  /** Who holds the project's lease now, or null when nobody does (never opened, released, or expired after its holder died). */
  async holder(): Promise<Owner | null> {
    this.#lease ??= (async () => {
      const nc = await this.#connection();
      const { jetstream } = await import('@nats-io/jetstream');
      const { Kvm } = await import('@nats-io/kv');
      return new Kvm(jetstream(nc, { timeout: DEFAULT_GATEWAY_FORWARD.lease_read_ms, checkAPI: false })).open(`arium-lease-${this.#settings.name}`);
    })();
    this.#lease.catch(() => {
      this.#lease = null;
    });
    const kv = await this.#lease;
    try {
      const entry = await kv.get('holder');
      if (entry?.operation !== 'PUT' || entry.length === 0) return null;
      return entry.json<Owner>();
    } catch (error) {
      const code = (error as { api_error?: { err_code?: number } }).api_error?.err_code;
      if (code === STREAM_NOT_FOUND || /stream not found/i.test(String((error as Error).message))) return null;
      throw error;
    }
  }

  /**
   * Sends a request to the gateway holding the project and returns its answer; null when no gateway
   * holds it (nobody subscribes). Throws a ToolFailure the gateway answers with when the request is too
   * large for a NATS message, when the holder does not answer in time, or when the answer is not signed.
   */
  async forward(request: ForwardRequest): Promise<ForwardAnswer | null> {
    const nc = await this.#connection();
    const nats = await natsModule();
    const nonce = newNonce();
    const meta: RequestMeta = {
      v: FORWARD_VERSION,
      method: request.method,
      path: request.path,
      headers: request.headers,
      caller: request.caller,
      ip: request.ip,
      at: Date.now(),
      nonce,
    };
    const { data, signature } = seal(this.#key, meta, request.body ?? Buffer.alloc(0));
    const max = nc.info?.max_payload ?? 1024 * 1024;
    if (data.length > max) {
      throw new ToolFailure(
        'validation',
        'INPUT_TOO_LARGE',
        `This request is ${data.length} bytes as a NATS message, over the NATS server's max_payload (${max}), so this gateway cannot forward it to the gateway that holds project "${this.#project}": send it to that gateway, or raise max_payload`,
        { details: { limit: max, size: data.length } },
      );
    }
    const headers = nats.headers();
    headers.set(SIGNATURE_HEADER, signature);
    let reply: Msg;
    // A holder killed mid-request never answers: its lease tells, well before the request's timeout.
    const holderAtStart = this.holder().catch(() => undefined);
    let watch: NodeJS.Timeout | undefined;
    const holderGone = new Promise<never>((_, reject) => {
      watch = setInterval(async () => {
        const [before, now] = await Promise.all([holderAtStart, this.holder().catch(() => undefined)]);
        if (now === undefined) return;
        if (now === null || (before && now.id !== before.id))
          reject(new Error('the engine holding the project lost its lease (it died or was cut off) while the request was in flight'));
      }, this.#settings.leaseMs);
    });
    // Handled here too: it may reject after the race has settled, before the interval is cleared.
    holderGone.catch(() => {});
    try {
      reply = await Promise.race([nc.request(this.#subject, data, { timeout: DEFAULT_GATEWAY_FORWARD.timeout_ms, headers }), holderGone]);
    } catch (error) {
      if (error instanceof nats.RequestError && error.isNoResponders()) return null;
      if (error instanceof nats.NoRespondersError) return null;
      throw new ToolFailure(
        'transport',
        'UNAVAILABLE',
        `The gateway holding project "${this.#project}" did not answer the forwarded request (${(error as Error).message}); whether it ran is unknown`,
        { details: { committed: 'unknown', reason: 'forward' } },
      );
    } finally {
      clearInterval(watch);
    }
    const answer = unseal<AnswerMeta>(this.#key, reply.data, reply.headers?.get(SIGNATURE_HEADER));
    if (!answer || answer.meta.re !== nonce) {
      throw new ToolFailure(
        'transport',
        'UNAVAILABLE',
        `The answer to a request forwarded for project "${this.#project}" is not signed with the project's shared secret (store.forward.secret_env differs between gateways, or another NATS client answered); it was dropped and whether the request ran is unknown`,
        { details: { committed: 'unknown', reason: 'unsigned_answer' } },
      );
    }
    return { status: answer.meta.status, headers: answer.meta.headers, body: answer.body };
  }

  /**
   * Answers forwarded requests for the project while this gateway's engine holds it; calls `lost` once
   * another engine holds the lease (this one was fenced off), after which it no longer answers.
   */
  async serve(engine: Engine, lost: () => void): Promise<void> {
    if (this.#serving) return;
    const nc = await this.#connection();
    const sub = nc.subscribe(this.#subject, {
      callback: (error, msg) => {
        // An answer that cannot be sent (the connection closed meanwhile) leaves the caller to its timeout.
        if (!error) this.#answer(engine, msg).catch(() => {});
      },
    });
    const watch = setInterval(
      () => {
        this.holder().then(
          (owner) => {
            if (owner && (owner.pid !== process.pid || owner.host !== hostname())) {
              this.stop();
              lost();
            }
          },
          // NATS out of reach: the store's own lease decides; look again at the next tick.
          () => {},
        );
      },
      Math.max(100, Math.floor(this.#settings.leaseMs / 2)),
    );
    watch.unref();
    this.#serving = { sub, watch };
  }

  async #answer(engine: Engine, msg: Msg): Promise<void> {
    const nats = await natsModule();
    const opened = unseal<RequestMeta>(this.#key, msg.data, msg.headers?.get(SIGNATURE_HEADER));
    if (!opened) {
      this.#refused(engine, "a forwarded request is not signed with the project's shared secret (store.forward.secret_env)");
      // Unsigned: a client without the secret learns nothing from it but the refusal.
      msg.respond(JSON.stringify(errorEnvelope('DENIED', 'Refused: not signed with the shared secret of this project', { stage: 'permission' })));
      return;
    }
    const { meta, body } = opened;
    const why =
      meta.v === FORWARD_VERSION
        ? this.#nonces.admit(meta.nonce, meta.at)
        : `forwarding protocol ${String(meta.v)} is not this gateway's (${FORWARD_VERSION})`;
    let answer: ForwardAnswer;
    if (why !== null) {
      this.#refused(engine, `a forwarded request was refused: ${why}`);
      answer = this.#error(
        403,
        errorEnvelope('DENIED', `The gateway holding project "${this.#project}" refused the forwarded request: ${why}`, { stage: 'permission' }),
      );
    } else {
      try {
        answer = await this.#handle(this.#project, {
          method: meta.method,
          path: meta.path,
          headers: meta.headers,
          body: body.length > 0 ? body : null,
          caller: meta.caller,
          ip: meta.ip,
        });
      } catch (error) {
        answer = this.#error(
          500,
          errorEnvelope('INTERNAL', `The gateway holding project "${this.#project}" failed to answer: ${(error as Error).message}`, {
            stage: 'transport',
          }),
        );
      }
    }
    const re = typeof meta.nonce === 'string' ? meta.nonce : '';
    let sealed = seal(this.#key, { v: FORWARD_VERSION, re, status: answer.status, headers: answer.headers }, answer.body);
    const max = (await this.#connection()).info?.max_payload ?? 1024 * 1024;
    if (sealed.data.length > max) {
      const too = this.#error(
        502,
        errorEnvelope(
          'OUTPUT_LIMIT',
          `The answer is ${sealed.data.length} bytes as a NATS message, over the NATS server's max_payload (${max}), so it cannot go back to the gateway that forwarded the request (what the request changed is kept): ask the gateway holding project "${this.#project}" directly, ask for less (a byte range), or raise max_payload`,
          { stage: 'transport', details: { limit: max, size: sealed.data.length } },
        ),
      );
      sealed = seal(this.#key, { v: FORWARD_VERSION, re, status: too.status, headers: too.headers }, too.body);
    }
    const headers = nats.headers();
    headers.set(SIGNATURE_HEADER, sealed.signature);
    msg.respond(sealed.data, { headers });
  }

  #error(status: number, envelope: unknown): ForwardAnswer {
    return { status, headers: { 'content-type': JSON_TYPE }, body: Buffer.from(JSON.stringify(envelope)) };
  }

  #refused(engine: Engine, reason: string): void {
    engine.events.publish({
      type: 'SecurityEvent',
      at: new Date().toISOString(),
      run_id: null,
      trace_id: null,
      tool: '',
      action: 'request_refused',
      permission: null,
      operation: `forwarded request on ${this.#subject}`,
      reason,
    });
  }

  /** Stops answering forwarded requests (the engine is closing, or lost the project). */
  stop(): void {
    if (!this.#serving) return;
    clearInterval(this.#serving.watch);
    this.#serving.sub.unsubscribe();
    this.#serving = null;
  }

  async close(): Promise<void> {
    this.stop();
    const nc = this.#nc;
    this.#nc = null;
    this.#lease = null;
    await (await nc?.catch(() => null))?.close();
  }
}
