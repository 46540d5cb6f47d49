/**
 * HTTP tool workers: the AX Tool Framework's model, with Arium as the gateway. A provider
 * `{ "http": { "url", "manifest", "policies", "headers" } }` reads the domain bundle (http-bundle.ts),
 * offers its tools, and runs one by POSTing the request envelope to the worker's `transport.endpoint`
 * (`/run`) and reading the response envelope (http-envelope.ts). The policies' per-tool and total
 * concurrency are enforced here: a call past them waits for a slot, within its own timeout.
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { resolve } from 'node:path';
import { HTTP_PROVIDER_LIMITS } from '../limits.js';
import { Scrubber } from '../secrets/scrub.js';
import { type Bundle, type BundleTool, readBundle } from './http-bundle.js';
import { readAnswer, requestEnvelope } from './http-envelope.js';
import { AnswerTooLarge, ExchangeFailed, exchange } from './http-request.js';
import { type HttpSettings, parseHttpSettings } from './http-settings.js';
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
import { Slots, SlotsFull } from './slots.js';

const MAX_TIMER_MS = 2 ** 31 - 1;

/** Why a call's request was aborted: the provider's own reasons, told apart from the caller's. */
class Stop {
  constructor(readonly why: 'timeout' | 'closed') {}
}

interface Route {
  tool: BundleTool;
  url: URL;
  /** `origin + path`, for messages. */
  where: string;
}

function route(tool: BundleTool, baseUrl: string | undefined): Route {
  const base = new URL(baseUrl ?? tool.baseUrl);
  const url = new URL(`${base.pathname.replace(/\/+$/, '')}${tool.endpoint}`, base);
  return { tool, url, where: `${url.origin}${url.pathname}` };
}

interface WorkerHealth {
  url: string;
  healthy: boolean;
  status?: number;
  error?: string;
}

class HttpProvider implements Provider {
  readonly kind = 'http';
  readonly #settings: HttpSettings;
  readonly #deps: ProviderDeps;
  #state: ProviderState = 'idle';
  #error: string | undefined;
  #bundle: Bundle | undefined;
  #routes = new Map<string, Route>();
  #tools: ProviderTool[] = [];
  #headers: Record<string, string> = {};
  #scrubber = new Scrubber(new Map());
  #slots = new Slots(Number.POSITIVE_INFINITY, () => Number.POSITIVE_INFINITY, HTTP_PROVIDER_LIMITS.queue_length);
  #health: WorkerHealth[] = [];
  #starting: Promise<void> | undefined;
  readonly #inflight = new Set<AbortController>();
  readonly #listeners = new Set<() => void>();
  // Keep-alive: a call reuses a connection to its worker instead of opening one (a TCP handshake) each time.
  readonly #httpAgent = new HttpAgent({ keepAlive: true });
  readonly #httpsAgent = new HttpsAgent({ keepAlive: true });

  constructor(
    readonly name: string,
    settings: HttpSettings,
    deps: ProviderDeps,
  ) {
    this.#settings = settings;
    this.#deps = deps;
  }

  /** Concurrent first calls share one start. */
  start(): Promise<void> {
    this.#starting ??= this.#start().finally(() => {
      this.#starting = undefined;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    if (this.#state === 'ready') return;
    if (this.#state === 'closed') throw new Error(`The provider "${this.name}" is closed`);
    this.#state = 'starting';
    try {
      this.#resolveHeaders();
      const { projectDir } = this.#deps;
      const bundle = readBundle(
        resolve(projectDir, this.#settings.manifest),
        this.#settings.policies === undefined ? undefined : resolve(projectDir, this.#settings.policies),
      );
      this.#adopt(bundle);
    } catch (error) {
      this.#state = 'failed';
      this.#error = this.#scrubber.text(`Provider "${this.name}": ${(error as Error).message}`);
      throw new Error(this.#error, { cause: error });
    }
    this.#state = 'ready';
    this.#error = undefined;
    await this.#probe();
    for (const listener of this.#listeners) listener();
  }

  #resolveHeaders(): void {
    const headers: Record<string, string> = {};
    const secrets = new Map<string, string>();
    for (const [header, value] of this.#settings.headers) {
      if ('text' in value) {
        headers[header] = value.text;
        continue;
      }
      const secret = this.#deps.secret(value.secret);
      if (secret === undefined) {
        throw new Error(`header ${header} names the secret "${value.secret}", which the project does not have (add it to the project's secrets)`);
      }
      // The value itself is never quoted: it is what must not leak.
      if (/[\r\n\0]/.test(secret)) throw new Error(`the secret "${value.secret}" holds a line break or NUL and cannot be sent as header ${header}`);
      headers[header] = `${value.prefix}${secret}`;
      secrets.set(value.secret, secret);
    }
    this.#headers = headers;
    this.#scrubber = new Scrubber(secrets);
  }

  #adopt(bundle: Bundle): void {
    this.#bundle = bundle;
    this.#routes = new Map(bundle.tools.map((tool) => [tool.id, route(tool, this.#settings.url)]));
    const limits = new Map(bundle.tools.map((tool) => [tool.id, tool.maxInflight ?? Number.POSITIVE_INFINITY]));
    this.#slots = new Slots(
      bundle.maxInflight ?? Number.POSITIVE_INFINITY,
      (id) => limits.get(id) ?? Number.POSITIVE_INFINITY,
      HTTP_PROVIDER_LIMITS.queue_length,
    );
    this.#tools = bundle.tools.map((tool) => ({
      name: tool.id,
      ...((tool.description ?? tool.displayName) ? { description: tool.description ?? tool.displayName } : {}),
      inputSchema: tool.inputSchema,
      ...(tool.outputSchema ? { outputSchema: tool.outputSchema } : {}),
      ...(tool.timeoutMs === undefined ? {} : { timeoutMs: tool.timeoutMs }),
      annotations: {
        ...(tool.displayName === undefined ? {} : { title: tool.displayName }),
        ax: {
          domain_id: bundle.domainId,
          egress_allowlist: tool.egressAllowlist,
          default_egress_policy: bundle.egressPolicy,
          ...(tool.maxInflight === undefined ? {} : { max_inflight: tool.maxInflight }),
        },
      },
    }));
  }

  /** `GET /healthz` of each worker (AX §12): a worker down is reported in status(), not a failed start. */
  async #probe(): Promise<void> {
    const bases = new Set([...this.#routes.values()].map((r) => new URL(this.#settings.url ?? r.tool.baseUrl).href.replace(/\/+$/, '')));
    this.#health = await Promise.all(
      [...bases].map(async (base): Promise<WorkerHealth> => {
        const url = new URL(`${base}/healthz`);
        try {
          const answer = await exchange({
            method: 'GET',
            url,
            headers: this.#headers,
            agent: url.protocol === 'https:' ? this.#httpsAgent : this.#httpAgent,
            signal: AbortSignal.timeout(HTTP_PROVIDER_LIMITS.health_timeout_ms),
            maxBytes: 64 * 1024,
          });
          const healthy = answer.status >= 200 && answer.status < 300;
          if (!healthy) this.#deps.log('warn', `Provider "${this.name}": ${url.href} answered HTTP ${answer.status}`);
          return { url: url.href, healthy, status: answer.status };
        } catch (error) {
          const message = this.#scrubber.text(error instanceof Error ? error.message : String(error));
          this.#deps.log(
            'warn',
            `Provider "${this.name}": the worker at ${url.href} did not answer (${message}); its calls fail UNAVAILABLE until it does`,
          );
          return { url: url.href, healthy: false, error: message };
        }
      }),
    );
  }

  tools(): ProviderTool[] {
    return this.#tools;
  }

  onToolsChanged(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async call(tool: string, input: unknown, ctx: ProviderCallContext): Promise<ProviderOutcome> {
    // The worker has the header secrets and may echo them (a debug field, an error quoting the request):
    // what it answers is scrubbed here, before anything of it leaves the provider.
    return this.#scrubber.value(await this.#call(tool, input, ctx));
  }

  async #call(tool: string, input: unknown, ctx: ProviderCallContext): Promise<ProviderOutcome> {
    if (this.#state !== 'ready') {
      const why = this.#state === 'closed' ? 'is closed' : this.#state === 'failed' ? `failed to start: ${this.#error}` : 'is not started';
      return { ok: false, code: 'UNAVAILABLE', message: `The provider "${this.name}" ${why}`, retryable: this.#state !== 'failed' };
    }
    const r = this.#routes.get(tool);
    if (!r)
      return {
        ok: false,
        code: 'UNKNOWN_TOOL',
        message: `The provider "${this.name}" has no tool "${tool}" (its manifest lists ${[...this.#routes.keys()].join(', ')})`,
      };
    // setTimeout fires at once past 2^31 - 1 ms: a longer budget is as good as none, and is cut to that.
    const budget = Math.min(ctx.timeoutMs, r.tool.timeoutMs ?? Number.POSITIVE_INFINITY, MAX_TIMER_MS);
    const started = Date.now();
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Stop('timeout')), budget);
    const onCancel = () => controller.abort(ctx.signal.reason);
    if (ctx.signal.aborted) onCancel();
    else ctx.signal.addEventListener('abort', onCancel, { once: true });
    this.#inflight.add(controller);
    let release: (() => void) | undefined;
    try {
      release = await this.#slots.acquire(tool, controller.signal);
      controller.signal.throwIfAborted();
      const meta = { trace_id: ctx.traceId, tool_run_id: ctx.runId, domain_id: (this.#bundle as Bundle).domainId, deadline_ms: started + budget };
      const answer = await exchange({
        method: 'POST',
        url: r.url,
        headers: { ...this.#headers, 'content-type': 'application/json', accept: 'application/json' },
        body: requestEnvelope(meta, input),
        agent: r.url.protocol === 'https:' ? this.#httpsAgent : this.#httpAgent,
        signal: controller.signal,
        maxBytes: this.#settings.maxResponseBytes,
      });
      return readAnswer(answer, meta, r.where);
    } catch (error) {
      return this.#failure(error, r, budget, release !== undefined, controller.signal.aborted);
    } finally {
      clearTimeout(timer);
      ctx.signal.removeEventListener('abort', onCancel);
      this.#inflight.delete(controller);
      release?.();
    }
  }

  #failure(error: unknown, r: Route, budget: number, running: boolean, aborted: boolean): ProviderOutcome {
    const tool = r.tool.id;
    if (error instanceof Stop && error.why === 'timeout') {
      const where = running
        ? `The worker at ${r.where} did not answer`
        : `The call waited for a concurrency slot of ${tool} (policies.yaml) and got none`;
      return {
        ok: false,
        code: 'TIMEOUT',
        message: `${where} within ${budget} ms; the request was aborted`,
        retryable: true,
        details: { timeout_ms: budget },
      };
    }
    if (error instanceof Stop) {
      return {
        ok: false,
        code: 'UNAVAILABLE',
        message: `The provider "${this.name}" was closed while the call ran`,
        retryable: true,
        details: { reason: 'closed' },
      };
    }
    if (error instanceof SlotsFull) {
      return {
        ok: false,
        code: 'BUSY',
        message: `${tool} is at the concurrency its policies allow and ${error.message}; retry later`,
        retryable: true,
      };
    }
    if (error instanceof AnswerTooLarge) {
      return {
        ok: false,
        code: 'OUTPUT_LIMIT',
        message: `The worker at ${r.where} answered more than ${error.limit} bytes; the answer was cut off and not used (raise http.max_response_bytes if it is meant to be this big)`,
        details: { limit_bytes: error.limit },
      };
    }
    if (error instanceof ExchangeFailed) {
      const what = error.reached ? 'the connection broke before its answer was complete: the tool may have run' : 'it could not be reached';
      return {
        ok: false,
        code: 'UNAVAILABLE',
        message: `The worker at ${r.where} is unavailable (${what}; ${error.message})`,
        retryable: true,
        details: { reason: error.reached ? 'connection_lost' : 'unreachable' },
      };
    }
    if (aborted) {
      // The caller's signal: the engine's timeout (a TimeoutError) or a cancellation.
      if (error instanceof DOMException && error.name === 'TimeoutError') {
        return { ok: false, code: 'TIMEOUT', message: `The call ran past its timeout; the request to ${r.where} was aborted`, retryable: true };
      }
      return { ok: false, code: 'CANCELLED', message: `The call was cancelled; the request to ${r.where} was aborted`, retryable: false };
    }
    // The engine hands over plain JSON input: a failure here is a bug of the engine's, not the worker's.
    return {
      ok: false,
      code: 'INTERNAL',
      message: `The call to ${r.where} failed before it was sent: ${(error as Error)?.message ?? String(error)}`,
    };
  }

  status(): ProviderStatus {
    const bundle = this.#bundle;
    return {
      name: this.name,
      kind: this.kind,
      state: this.#state,
      tools: this.#tools.length,
      restarts: 0,
      ...(this.#error === undefined ? {} : { error: this.#error }),
      details: {
        manifest: this.#settings.manifest,
        ...(this.#settings.policies === undefined ? {} : { policies: this.#settings.policies }),
        ...(this.#settings.url === undefined ? {} : { url: this.#settings.url }),
        ...(bundle ? { domain_id: bundle.domainId, version: bundle.version } : {}),
        // Names only: a header's value may be a secret.
        headers: [...this.#settings.headers.keys()],
        workers: this.#health,
        in_flight: this.#inflight.size,
        queued: this.#slots.queued,
      },
    };
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    for (const controller of this.#inflight) controller.abort(new Stop('closed'));
    this.#httpAgent.destroy();
    this.#httpsAgent.destroy();
  }
}

export const httpProviderKind: ProviderKind<HttpSettings> = {
  key: 'http',
  parse: parseHttpSettings,
  create: (name, settings, deps) => new HttpProvider(name, settings, deps),
};
