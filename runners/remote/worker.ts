import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { cpus, hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { ToolFailure } from '../../src/errors.js';
import type { CallLimits } from '../../src/limits.js';
import type { RunContext, Runner, RunnerDefinition } from '../../src/runner.js';
import type { RunnerCatalog } from '../../src/runner-catalog.js';
import type { ToolVfs } from '../../src/tool-vfs.js';
import { DEFAULT_CATALOG, runnerCatalog } from '../index.js';
import { findInterpreter, interpreterTag } from '../python/interpreter.js';
import { type CacheLimits, ToolCache, type WorkerPython } from './cache.js';
import { connectNats } from './connect.js';
import { ASK_MS, EngineLink, wireFailure } from './engine-link.js';
import { ReceivedTools } from './received-tools.js';
import type { NatsSettings } from './settings.js';
import { type CallMessage, decode, encode, type Heartbeat, PROTOCOL, SANDBOX_FIELDS, type Subjects, subjects } from './wire.js';

/** How often a worker reads its runners' status again for its heartbeats. */
const SANDBOX_REFRESH_MS = 30_000;

/** The default runners a worker can host: those whose definitions say `remote: true` (their tools are files it can be sent). */
export const HOSTABLE_RUNNERS: readonly string[] = Object.freeze(DEFAULT_CATALOG.hostable());

/** The runners of `catalog` a worker can host, for a message: "js-runner, py-runner and …". */
export function hostableList(catalog: RunnerCatalog = DEFAULT_CATALOG): string {
  const names = catalog.hostable();
  return names.length <= 1 ? (names[0] ?? 'no runner') : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
}

export interface WorkerOptions {
  settings: NatsSettings;
  /** Runners to host (default every runner of the catalog that can run on a worker, `remote: true`). */
  runners?: readonly string[];
  /** Calls run at once (default the number of CPUs). */
  concurrency?: number;
  /** Where received tool files are kept (default <tmp>/arium-worker-cache). */
  cacheDir?: string;
  /** How much the cache may hold and what it keeps (cache.ts; default 2 GiB). */
  cacheLimits?: Partial<CacheLimits>;
  /** How often it announces itself (default 2000 ms). */
  heartbeatMs?: number;
  /** Definitions to create the runners from, in place of the defaults of the same name (tests pass options). */
  definitions?: readonly RunnerDefinition[];
  /** What the runners read of a project's arium.json, for this machine: e.g. `python`, the interpreter of py-runner. */
  runnerConfig?: Readonly<Record<string, unknown>>;
  /** Told when the connection to the server is lost and when it is back (arium worker prints it). */
  onConnection?: (event: 'disconnected' | 'reconnected', server: string) => void;
}

export interface Worker {
  readonly id: string;
  readonly host: string;
  heartbeat(): Heartbeat;
  /** Takes no new calls, finishes those it has, then closes. */
  drain(): Promise<void>;
  /** Closes now: calls it runs fail on the engine's side (a transport error). */
  close(): Promise<void>;
}

const VERSION: string = (() => {
  try {
    return JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')).version;
  } catch {
    try {
      return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;
    } catch {
      return 'unknown';
    }
  }
})();

/** Starts a worker: it joins the queue group of each runner it hosts and serves calls until drained or closed. */
export async function startWorker(options: WorkerOptions): Promise<Worker> {
  const catalog = runnerCatalog(options.definitions ?? []);
  const hostable = catalog.hostable();
  const names = [...(options.runners ?? hostable)];
  for (const name of names) {
    if (!hostable.includes(name)) throw new Error(`A worker cannot host "${name}": it hosts ${hostableList(catalog)}`);
  }
  const concurrency = options.concurrency ?? Math.max(1, cpus().length);
  if (!Number.isSafeInteger(concurrency) || concurrency < 1)
    throw new Error(`concurrency must be a whole number of calls, 1 or more (got ${concurrency})`);
  const limits = options.cacheLimits ?? {};
  if (limits.maxBytes !== undefined && !(Number.isSafeInteger(limits.maxBytes) && limits.maxBytes > 0)) {
    throw new Error(`The cache's size must be a whole number of bytes above 0 (got ${limits.maxBytes})`);
  }
  const nc = await connectNats(options.settings, `arium worker ${hostname()} ${process.pid}`);
  // Made once connected: a worker the server refuses leaves no folder behind.
  let cache: ToolCache;
  try {
    cache = new ToolCache(options.cacheDir ?? join(tmpdir(), 'arium-worker-cache'), limits);
  } catch (error) {
    await nc.close();
    throw new Error(`The worker's cache folder cannot be made: ${(error as Error).message}`, { cause: error });
  }
  const onConnection = options.onConnection;
  if (onConnection) {
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect') onConnection('disconnected', String(status.server));
        else if (status.type === 'reconnect') onConnection('reconnected', String(status.server));
      }
    })();
  }
  return new RemoteWorker(nc, options.settings, names, concurrency, cache, options.heartbeatMs ?? 2000, catalog, options.runnerConfig ?? {});
}

interface Running {
  readonly controller: AbortController;
}

class RemoteWorker implements Worker {
  readonly id = randomUUID().slice(0, 12);
  readonly host = hostname();
  readonly #nc: NatsConnection;
  /** What it publishes and asks the engine on its calls' inboxes. */
  readonly #link: EngineLink;
  readonly #subjects: Subjects;
  readonly #names: string[];
  readonly #runners = new Map<string, Runner>();
  readonly #concurrency: number;
  readonly #heartbeatMs: number;
  readonly #calls = new Map<string, Running>();
  readonly #received: ReceivedTools;
  readonly #cache: ToolCache;
  readonly #runSubs = new Map<string, Subscription>();
  readonly #timer: NodeJS.Timeout;
  readonly #describer: NodeJS.Timeout;
  #sandboxes: Record<string, Record<string, unknown>> = {};
  readonly #ranOnce = new Set<string>();
  #running = 0;
  readonly #waiting: (() => void)[] = [];
  #draining = false;
  #closed = false;
  #drained: Promise<void> | null = null;

  constructor(
    nc: NatsConnection,
    settings: NatsSettings,
    names: string[],
    concurrency: number,
    cache: ToolCache,
    heartbeatMs: number,
    catalog: RunnerCatalog,
    runnerConfig: Readonly<Record<string, unknown>>,
  ) {
    this.#nc = nc;
    this.#link = new EngineLink(nc, this.id, this.host);
    this.#subjects = subjects(settings.deployment);
    this.#names = names;
    this.#concurrency = concurrency;
    this.#cache = cache;
    this.#received = new ReceivedTools(cache, () => workerPython(runnerConfig, cache.dir));
    this.#heartbeatMs = heartbeatMs;
    for (const name of names) {
      const definition = catalog.get(name);
      if (!definition) throw new Error(`no runner named ${name}`);
      this.#runners.set(name, definition.create({ projectDir: cache.dir, config: runnerConfig }));
    }
    nc.subscribe(this.#subjects.ctl(this.id), { callback: (_error, msg) => this.#control(msg) });
    nc.subscribe(this.#subjects.ping, { callback: () => this.#beat() });
    this.#subscribe();
    this.#timer = setInterval(() => this.#beat(), heartbeatMs);
    this.#beat();
    const describe = () => void this.#describe().then(() => this.#beat());
    describe();
    this.#describer = setInterval(describe, SANDBOX_REFRESH_MS);
    this.#describer.unref?.();
  }

  heartbeat(): Heartbeat {
    return {
      t: 'hb',
      id: this.id,
      host: this.host,
      pid: process.pid,
      runners: this.#names,
      capacity: this.#concurrency,
      in_flight: this.#calls.size,
      versions: { arium: VERSION, node: process.versions.node, protocol: PROTOCOL },
      interval_ms: this.#heartbeatMs,
      draining: this.#draining,
      cache: { bytes: this.#cache.bytes, max_bytes: this.#cache.limits.maxBytes },
      ...(Object.keys(this.#sandboxes).length > 0 ? { sandboxes: this.#sandboxes } : {}),
    };
  }

  /**
   * Reads how each runner isolates calls, for the heartbeats: once at the start and then every
   * SANDBOX_REFRESH_MS (a Python runner learns whether calls get a uid of their own from its first server).
   */
  async #describe(): Promise<void> {
    const found: Record<string, Record<string, unknown>> = {};
    for (const [name, runner] of this.#runners) {
      if (this.#closed) return;
      try {
        const status = (await runner.status()) as Record<string, unknown> | undefined;
        if (!status) continue;
        found[name] = Object.fromEntries(SANDBOX_FIELDS.filter((key) => status[key] !== undefined).map((key) => [key, status[key]]));
      } catch (error) {
        found[name] = { available: false, reason: String((error as Error)?.message ?? error) };
      }
    }
    this.#sandboxes = found;
  }

  #beat(extra: Partial<Heartbeat> = {}): void {
    if (!this.#closed) this.#link.publish(this.#subjects.hb, encode({ ...this.heartbeat(), ...extra }, 'remote.fromWorker'));
  }

  /**
   * Joins each runner's queue group, and leaves them when draining. A worker with all its slots busy
   * stays in: a call it accepts waits for a slot (sending keepalives), since a message the server
   * already routed to a subscription being dropped would be lost, and its caller would wait.
   */
  #subscribe(): void {
    const open = !this.#draining && !this.#closed;
    for (const name of this.#names) {
      const sub = this.#runSubs.get(name);
      if (open && !sub) {
        this.#runSubs.set(
          name,
          this.#nc.subscribe(this.#subjects.run(name), { queue: this.#subjects.queue, callback: (_error, msg) => this.#accept(name, msg) }),
        );
      } else if (!open && sub) {
        // Messages already on their way are still delivered, and refused (the engine says so at once).
        void sub.drain();
        this.#runSubs.delete(name);
      }
    }
  }

  #accept(runner: string, msg: Msg): void {
    const call = decode(msg.data, 'remote.toWorker') as CallMessage | null;
    if (call?.t !== 'call' || typeof call.id !== 'string' || typeof call.inbox !== 'string') return;
    if (call.v !== PROTOCOL || this.#draining || this.#closed) {
      const reason = call.v !== PROTOCOL ? `this worker speaks protocol ${PROTOCOL}` : 'draining';
      this.#link.publish(call.inbox, encode({ t: 'refused', worker: this.id, reason }, 'remote.fromWorker'));
      return;
    }
    const running: Running = { controller: new AbortController() };
    this.#calls.set(call.id, running);
    void this.#run(runner, call, running).finally(() => {
      this.#calls.delete(call.id);
      if (this.#draining && this.#calls.size === 0) this.#onIdle?.();
      // Some of a runner's status is known only once it has run a call (a fork server's kernel findings).
      if (!this.#ranOnce.has(runner)) {
        this.#ranOnce.add(runner);
        void this.#describe().then(() => this.#beat());
      }
    });
  }

  #onIdle: (() => void) | null = null;

  #control(msg: Msg): void {
    const message = decode(msg.data, 'remote.toWorker');
    if (message?.t === 'cancel' && typeof message.id === 'string') this.#calls.get(message.id)?.controller.abort();
  }

  async #run(runnerName: string, call: CallMessage, running: Running): Promise<void> {
    const inbox = call.inbox;
    const keepaliveMs = Math.max(20, Number(call.keepalive_ms) || 1000);
    const beat = () => this.#link.publish(inbox, encode({ t: 'alive', worker: this.id, host: this.host }, 'remote.fromWorker'));
    // The first soon, so the engine learns who has a call that runs a while; a quick call sends only its done.
    const first = setTimeout(beat, Math.min(keepaliveMs / 4, 50));
    const alive = setInterval(beat, keepaliveMs);
    const logs: { level: string; message: string }[] = [];
    const intrusions: [string, string][] = [];
    const meta: Record<string, unknown> = {};
    const timeoutMs = Number(call.limits?.timeout_ms) || 30_000;
    const signal = running.controller.signal;
    let timer: NodeJS.Timeout | undefined;
    try {
      const runner = this.#runners.get(runnerName) as Runner;
      const tool = await this.#received.tool(call, (message) => this.#link.ask(inbox, message));
      const release = this.#received.hold(tool);
      await this.#slot(signal).catch((error) => {
        release();
        throw error;
      });
      try {
        const parts = (call as { input_parts?: { key?: unknown; count?: unknown } }).input_parts;
        const input = parts
          ? JSON.parse(new TextDecoder().decode(await this.#link.fetchParts(inbox, String(parts.key), Number(parts.count), ASK_MS)))
          : call.input;
        const ctx: RunContext = {
          tool,
          input,
          limits: call.limits as unknown as CallLimits,
          signal,
          runId: String(call.run_id),
          traceId: String(call.trace_id),
          vfs: this.#link.forwardedVfs(inbox, signal, Date.now() + timeoutMs) as unknown as ToolVfs,
          history: null,
          log: (level, message) => logs.push({ level, message }),
          intrusion: (operation, reason) => intrusions.push([operation, reason]),
          meta,
        };
        // The worker keeps the deadline too: a tool does not outlive its call here when the engine is gone.
        const deadline = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            running.controller.abort();
            reject(
              new ToolFailure('execution', 'TIMEOUT', `${tool.spec.id} did not finish within ${timeoutMs} ms`, {
                details: { timeout_ms: timeoutMs },
              }),
            );
          }, timeoutMs);
          signal.addEventListener('abort', () => reject(new ToolFailure('execution', 'CANCELLED', 'The engine stopped the call')), { once: true });
        });
        const data = await Promise.race([runner.run(ctx), deadline]);
        await this.#link.done(inbox, { ok: true, data, logs, intrusions, meta });
      } finally {
        this.#release();
        release();
        // Between calls' file fetches: a sweep never takes a folder a call is laying out or running.
        if (!this.#received.busy) this.#cache.sweep();
      }
    } catch (error) {
      await this.#link.done(inbox, { ok: false, error: wireFailure(error), logs, intrusions, meta });
    } finally {
      clearTimeout(timer);
      clearTimeout(first);
      clearInterval(alive);
    }
  }

  async #slot(signal: AbortSignal): Promise<void> {
    if (this.#running < this.#concurrency) {
      this.#running++;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const go = () => {
        signal.removeEventListener('abort', stop);
        this.#running++;
        resolve();
      };
      const stop = () => {
        const at = this.#waiting.indexOf(go);
        if (at !== -1) this.#waiting.splice(at, 1);
        reject(new ToolFailure('execution', 'CANCELLED', 'The engine stopped the call before it started'));
      };
      this.#waiting.push(go);
      signal.addEventListener('abort', stop, { once: true });
    });
  }

  #release(): void {
    this.#running--;
    this.#waiting.shift()?.();
  }

  drain(): Promise<void> {
    this.#drained ??= (async () => {
      this.#draining = true;
      this.#subscribe();
      this.#beat();
      if (this.#calls.size > 0) await new Promise<void>((resolve) => (this.#onIdle = resolve));
      await this.close();
    })();
    return this.#drained;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#beat({ leaving: true });
    this.#closed = true;
    clearInterval(this.#timer);
    clearInterval(this.#describer);
    for (const running of this.#calls.values()) running.controller.abort();
    await this.#nc.flush().catch(() => {});
    await this.#nc.close().catch(() => {});
    await Promise.allSettled([...this.#runners.values()].map((r) => r.close()));
  }
}

/** The interpreter py-runner runs here (arium worker --python), which a shipped environment's must match. */
async function workerPython(runnerConfig: Readonly<Record<string, unknown>>, baseDir: string): Promise<WorkerPython> {
  try {
    const found = await findInterpreter(typeof runnerConfig.python === 'string' ? runnerConfig.python : undefined, baseDir);
    return { executable: found.executable, version: found.version, tag: await interpreterTag(found.executable) };
  } catch (error) {
    throw new ToolFailure('execution', 'MISCONFIGURED', `This worker has no usable Python: ${(error as Error).message}`, {
      details: { runner: 'py-runner' },
    });
  }
}
