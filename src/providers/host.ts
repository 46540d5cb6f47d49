/**
 * The engine's side of its providers: it makes each one from arium.json, starts it (at engine start, or
 * on first use), puts its tools into the registry and keeps them current, and runs their calls through
 * the `provider` runner. Everything else a call goes through (grants, approvals, secrets, limits,
 * events, audit, scrubbing) is the dispatcher's, as for any tool.
 */
import { executionFailure, ToolFailure } from '../errors.js';
import type { RegistryProblem } from '../events.js';
import { DEFAULT_PROVIDER_LIMITS } from '../limits.js';
import type { RunContext, Runner, RunnerStatus } from '../runner.js';
import type { Tool } from '../tool.js';
import type { ProviderSettings } from './config.js';
import type { Provider, ProviderDeps, ProviderStatus } from './provider.js';
import { buildProviderTools, PROVIDER_RUNNER, providerSource } from './tools.js';

/** Where the host puts a provider's tools: the registry's `setProvided`. */
export type ProvidedSink = (provider: string, tools: Tool[], problems: RegistryProblem[]) => void;

interface Entry {
  readonly settings: ProviderSettings;
  readonly provider: Provider;
  started: Promise<void> | null;
  /** The upstream name of each served tool, by the Tool the registry holds. */
  upstream: WeakMap<Tool, string>;
  readonly slots: Slots;
  unsubscribe: (() => void) | null;
}

export class ProviderHost {
  readonly #entries = new Map<string, Entry>();
  readonly #sink: ProvidedSink;
  readonly #log: ProviderDeps['log'];
  #closed = false;

  /** Takes the project's secret values out of what a provider says of itself (a server's stderr may print one). */
  readonly #scrub: (text: string) => string;

  constructor(settings: readonly ProviderSettings[], deps: ProviderDeps, sink: ProvidedSink, scrub: (text: string) => string = (t) => t) {
    this.#scrub = scrub;
    this.#sink = (name, tools, problems) =>
      sink(
        name,
        tools,
        problems.map((p) => ({ ...p, message: scrub(p.message) })),
      );
    const log = deps.log;
    this.#log = (level, message) => log(level, scrub(message));
    deps = { ...deps, log: this.#log };
    for (const s of settings) {
      const provider = s.kind.create(s.name, s.settings, { ...deps, permissions: s.permissions });
      this.#entries.set(s.name, {
        settings: s,
        provider,
        started: null,
        upstream: new WeakMap(),
        slots: new Slots(s.limits.concurrency),
        unsubscribe: null,
      });
    }
  }

  get names(): string[] {
    return [...this.#entries.keys()];
  }

  /** Starts the providers that start with the engine; a failure is the provider's state and a load problem, not the engine's. */
  async startEager(): Promise<void> {
    await Promise.all([...this.#entries.values()].filter((e) => e.settings.start === 'eager').map((e) => this.#start(e)));
  }

  /**
   * Starts a lazy provider on first use: a call naming one of its tools waits for it; a listing of the
   * tools starts every lazy provider without waiting (its tools join with a list_changed).
   */
  ensure(toolId: unknown): Promise<void> | null {
    if (typeof toolId !== 'string') return null;
    const dot = toolId.indexOf('.');
    const entry = dot > 0 ? this.#entries.get(toolId.slice(0, dot)) : undefined;
    if (!entry || entry.started) return null;
    return this.#start(entry);
  }

  touchAll(): void {
    for (const entry of this.#entries.values()) if (!entry.started) void this.#start(entry);
  }

  /** Starts every provider not started yet, and waits for each start to come to an end (ready or failed). */
  async startAll(): Promise<void> {
    await Promise.all([...this.#entries.values()].map((e) => this.#start(e)));
  }

  #start(entry: Entry): Promise<void> {
    if (this.#closed) return Promise.resolve();
    entry.started ??= (async () => {
      const { provider, settings } = entry;
      entry.unsubscribe = provider.onToolsChanged(() => this.#publish(entry));
      try {
        await withTimeout(
          provider.start(),
          DEFAULT_PROVIDER_LIMITS.start_timeout_ms,
          `provider "${settings.name}" did not start within ${DEFAULT_PROVIDER_LIMITS.start_timeout_ms} ms`,
        );
      } catch (error) {
        const message = (error as Error)?.message ?? String(error);
        this.#log('error', `provider "${settings.name}" did not start: ${message}`);
        this.#sink(settings.name, [], [{ file: providerSource(settings.name), message: `provider "${settings.name}" did not start: ${message}` }]);
        return;
      }
      this.#publish(entry);
    })();
    return entry.started;
  }

  #publish(entry: Entry): void {
    if (this.#closed) return;
    const built = buildProviderTools(entry.settings, entry.provider.tools());
    const upstream = new WeakMap<Tool, string>();
    for (const tool of built.tools) upstream.set(tool, built.upstream.get(tool.spec.id) as string);
    entry.upstream = upstream;
    this.#sink(entry.settings.name, built.tools, built.problems);
  }

  /**
   * Why a tool id in a provider's namespace is not served, when the provider is not ready (it has not
   * started, or is down): the caller learns the provider is unavailable, not that the tool does not exist.
   */
  unknownTool(id: string): ToolFailure | null {
    const dot = id.indexOf('.');
    const entry = dot > 0 ? this.#entries.get(id.slice(0, dot)) : undefined;
    if (!entry) return null;
    const status = this.status().find((s) => s.name === entry.settings.name) as ProviderStatus;
    if (status.state === 'ready') return null;
    return new ToolFailure(
      'transport',
      'UNAVAILABLE',
      `Provider "${status.name}" is ${status.state}${status.error ? `: ${status.error}` : ''}; its tools are not known until it is ready`,
      { details: { provider: status.name, state: status.state } },
    );
  }

  status(): ProviderStatus[] {
    return [...this.#entries.values()].map((e) => {
      const status = e.provider.status();
      return status.error === undefined ? status : { ...status, error: this.#scrub(status.error) };
    });
  }

  /** The runner of every provider's tool. */
  readonly runner: Runner = {
    name: PROVIDER_RUNNER,
    // The dispatcher arms the call's deadline; the provider stops upstream when the signal fires.
    interruptible: true,
    run: (ctx) => this.#run(ctx),
    status: async (): Promise<RunnerStatus> => ({ available: true, providers: this.#entries.size }),
    close: () => this.close(),
  };

  async #run(ctx: RunContext): Promise<unknown> {
    const name = ctx.tool.source.slice('provider:'.length);
    const entry = this.#entries.get(name);
    const upstream = entry?.upstream.get(ctx.tool);
    if (!entry || upstream === undefined) {
      throw executionFailure('UNAVAILABLE', `${ctx.tool.spec.id} is no longer offered by provider "${name}"`);
    }
    const release = await entry.slots.acquire(ctx.signal);
    try {
      const outcome = await entry.provider.call(upstream, ctx.input, {
        signal: ctx.signal,
        timeoutMs: ctx.limits.timeout_ms,
        runId: ctx.runId,
        traceId: ctx.traceId,
        onLog: (line) => ctx.log(logLevel(line.level), line.message),
        ...(ctx.progress ? { onProgress: (p) => ctx.progress?.(p) } : {}),
      });
      if (outcome.ok) {
        for (const line of outcome.logs ?? []) ctx.log(logLevel(line.level), line.message);
        return outcome.data;
      }
      throw executionFailure(outcome.code, outcome.message, {
        details: {
          provider: name,
          ...(outcome.details ?? {}),
          ...(outcome.retryable !== undefined ? { upstream_retryable: outcome.retryable } : {}),
        },
      });
    } finally {
      release();
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled(
      [...this.#entries.values()].map(async (e) => {
        e.unsubscribe?.();
        await e.provider.close();
      }),
    );
  }
}

/** A provider's log level as a call's log line has it (`log` stands for debug and info). */
function logLevel(level: string): 'log' | 'info' | 'warn' | 'error' {
  return level === 'warn' || level === 'error' || level === 'info' ? level : 'log';
}

function withTimeout<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** A provider's calls in flight at once (`limits.concurrency`); a waiting call gives up when its signal fires. */
class Slots {
  #free: number;
  readonly #waiting: Array<() => void> = [];

  constructor(size: number) {
    this.#free = size;
  }

  acquire(signal: AbortSignal): Promise<() => void> {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#releaser());
    }
    return new Promise((resolve, reject) => {
      const grant = () => {
        signal.removeEventListener('abort', onAbort);
        resolve(this.#releaser());
      };
      const onAbort = () => {
        const i = this.#waiting.indexOf(grant);
        if (i >= 0) this.#waiting.splice(i, 1);
        reject(signal.reason);
      };
      this.#waiting.push(grant);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  #releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    };
  }
}
