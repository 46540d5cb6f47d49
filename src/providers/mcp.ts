/**
 * The `mcp` provider kind: an MCP server's tools, reached with the SDK's `Client` over stdio (a process
 * the provider starts) or Streamable HTTP (a URL). A server that stops (its process exits, its HTTP
 * session breaks) is started again with a growing pause; calls in flight end `UNAVAILABLE`, retryable,
 * and calls that come meanwhile wait for the new start within their own time. Upstream tools/list_changed
 * reads the tools again; progress, log lines and cancellation pass through.
 *
 * The SDK is imported on first start: an engine with no MCP provider never loads it.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { ErrorCode } from '../errors.js';
import { DEFAULT_PROVIDER_LIMITS } from '../limits.js';
import { type McpSettings, parseMcpSettings, type SecretValue, stdioLaunch } from './mcp-settings.js';
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
import { DEFAULT_SANDBOX_LIMITS } from './sandbox-settings.js';

/** The most of a server's standard error kept to say why it stopped. */
const STDERR_TAIL_BYTES = 4096;
/** The line a runtime prints when it dies of memory: V8 (either of its messages), Python, a C program. */
const OUT_OF_MEMORY = /^.*(?:out of memory|MemoryError|Cannot allocate memory).*$/im;

export const mcpProviderKind: ProviderKind<McpSettings> = {
  key: 'mcp',
  parse: parseMcpSettings,
  create: (name, settings, deps) => new McpProvider(name, settings, deps),
};

interface InFlight {
  onLog?: ProviderCallContext['onLog'];
}

/** One connection to the server; a new one after each stop. */
interface Connection {
  client: Client;
  transport: Transport;
  alive: boolean;
  pid: number | null;
}

export class McpProvider implements Provider {
  readonly kind = 'mcp';
  readonly #settings: McpSettings;
  readonly #deps: ProviderDeps;
  #state: ProviderState = 'idle';
  #tools: ProviderTool[] = [];
  #connection: Connection | null = null;
  #starting: Promise<void> | null = null;
  /** The start after a pause, when one is pending: calls that come meanwhile wait for what it comes to. */
  #restart: { timer: NodeJS.Timeout; done: Promise<void>; settle: (error?: unknown) => void } | null = null;
  #restarts = 0;
  /** Starts that failed, or stops, since the last call that succeeded: the pause before the next start grows with them. */
  #failures = 0;
  #error: string | undefined;
  #stderr = '';
  #launched: Record<string, unknown> = {};
  readonly #listeners = new Set<() => void>();
  readonly #inFlight = new Set<InFlight>();

  constructor(
    readonly name: string,
    settings: McpSettings,
    deps: ProviderDeps,
  ) {
    this.#settings = settings;
    this.#deps = deps;
  }

  start(): Promise<void> {
    if (this.#state === 'closed') return Promise.reject(new Error(`provider "${this.name}" is closed`));
    this.#starting ??= this.#connect().finally(() => {
      this.#starting = null;
    });
    return this.#starting;
  }

  tools(): ProviderTool[] {
    return this.#tools.map((t) => ({ ...t }));
  }

  onToolsChanged(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async #connect(): Promise<void> {
    this.#state = this.#restarts > 0 || this.#failures > 0 ? 'restarting' : 'starting';
    const [{ Client }, types] = await Promise.all([
      import('@modelcontextprotocol/sdk/client/index.js'),
      import('@modelcontextprotocol/sdk/types.js'),
    ]);
    let transport: Transport;
    try {
      transport = await this.#transport();
    } catch (error) {
      throw this.#startFailed(error);
    }
    const client = new Client({ name: 'arium', version: '1' }, { capabilities: {} });
    const connection: Connection = { client, transport, alive: true, pid: null };
    client.setNotificationHandler(types.ToolListChangedNotificationSchema, () => {
      if (connection.alive)
        void this.#readTools(connection).catch((error) =>
          this.#deps.log('warn', `provider "${this.name}": tools/list after list_changed failed: ${(error as Error).message}`),
        );
    });
    client.setNotificationHandler(types.LoggingMessageNotificationSchema, (notification) => {
      const { level, data, logger } = notification.params;
      const message = `${logger ? `${logger}: ` : ''}${typeof data === 'string' ? data : JSON.stringify(data)}`;
      // MCP does not tie a log line to a request: it is the call's only when one call is in flight.
      const only = this.#inFlight.size === 1 ? [...this.#inFlight][0] : undefined;
      if (only?.onLog) only.onLog({ level: logLevel(level), message });
      else
        this.#deps.log(logLevel(level) === 'error' ? 'error' : logLevel(level) === 'warn' ? 'warn' : 'info', `provider "${this.name}": ${message}`);
    });
    client.onclose = () => this.#lost(connection);
    try {
      await client.connect(transport);
      connection.pid = 'pid' in transport ? ((transport as { pid: number | null }).pid ?? null) : null;
      this.#connection = connection;
      await this.#readTools(connection);
    } catch (error) {
      connection.alive = false;
      await client.close().catch(() => {});
      throw this.#startFailed(error);
    }
    if ((this.#state as ProviderState) !== 'closed') {
      this.#state = 'ready';
      this.#error = undefined;
    }
  }

  /** Records why a start failed and schedules the next try (a server that comes up later joins then); the error to throw. */
  #startFailed(error: unknown): Error {
    this.#failures++;
    this.#error = this.#withStderr((error as Error)?.message ?? String(error));
    if ((this.#state as ProviderState) !== 'closed') {
      this.#state = 'failed';
      this.#scheduleRestart();
    }
    return new Error(this.#error, { cause: error });
  }

  async #transport(): Promise<Transport> {
    const settings = this.#settings;
    if (settings.transport === 'stdio') {
      const { StdioClientTransport, getDefaultEnvironment } = await import('@modelcontextprotocol/sdk/client/stdio.js');
      const { resolve } = await import('node:path');
      const launch = await stdioLaunch(
        this.name,
        settings,
        {
          command: settings.command,
          args: settings.args,
          env: { ...getDefaultEnvironment(), ...Object.fromEntries([...settings.env].map(([k, v]) => [k, this.#value(v, `env ${k}`)])) },
          cwd: resolve(this.#deps.projectDir, settings.cwd ?? '.'),
        },
        this.#deps.permissions ?? [],
      );
      this.#launched = launch.describe;
      const transport = new StdioClientTransport({ command: launch.command, args: launch.args, env: launch.env, cwd: launch.cwd, stderr: 'pipe' });
      this.#stderr = '';
      transport.stderr?.on('data', (chunk: Buffer) => {
        this.#stderr = (this.#stderr + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
      });
      return transport;
    }
    const [{ StreamableHTTPClientTransport }, { watchedFetch }] = await Promise.all([
      import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
      import('../daemon/bridge-fetch.js'),
    ]);
    const headers = Object.fromEntries([...settings.headers].map(([k, v]) => [k, this.#value(v, `header ${k}`)]));
    // The SDK's transport reports a response stream that broke off (the server died under a call) only
    // as an error naming no request, and keeps the request waiting for an answer that cannot come: a
    // broken stream is the server lost, as a stdio server's exit is.
    const watched = watchedFetch((input, init) => fetch(input, init), {
      broken: () => {
        const connection = this.#connection;
        if (connection?.transport === transport) void connection.client.close().catch(() => {});
      },
      listening: () => {},
      ended: () => {},
    });
    const transport: Transport = new StreamableHTTPClientTransport(settings.url, { requestInit: { headers }, fetch: watched.fetch });
    return transport;
  }

  #value(value: SecretValue, what: string): string {
    if (typeof value === 'string') return value;
    const found = this.#deps.secret(value.$secret);
    if (found === undefined)
      throw new Error(`${what} names the secret "${value.$secret}", which the project's "secrets" does not hold (or could not read)`);
    return found;
  }

  async #readTools(connection: Connection): Promise<void> {
    const tools: ProviderTool[] = [];
    let cursor: string | undefined;
    do {
      const page = await connection.client.listTools(cursor ? { cursor } : undefined);
      for (const t of page.tools) {
        tools.push({
          name: t.name,
          ...(t.description ? { description: t.description } : {}),
          inputSchema: t.inputSchema as Record<string, unknown>,
          ...(t.outputSchema ? { outputSchema: t.outputSchema as Record<string, unknown> } : {}),
          ...(t.annotations ? { annotations: { ...t.annotations } } : {}),
        });
      }
      cursor = page.nextCursor;
      if (tools.length > DEFAULT_PROVIDER_LIMITS.max_tools * 2)
        throw new Error(`the server lists more than ${DEFAULT_PROVIDER_LIMITS.max_tools * 2} tools`);
    } while (cursor);
    if (!connection.alive) return;
    this.#tools = tools;
    for (const listener of this.#listeners) listener();
  }

  /** The connection ended without `close`: the server stopped. Start it again after a pause. */
  #lost(connection: Connection): void {
    if (!connection.alive) return;
    connection.alive = false;
    // A connection that never became the live one: its failed start schedules the next try.
    if (this.#connection !== connection) return;
    this.#connection = null;
    if (this.#state === 'closed') return;
    this.#failures++;
    this.#error = this.#withStderr('the server stopped');
    this.#deps.log('warn', `provider "${this.name}": ${this.#error}; starting it again`);
    this.#state = 'restarting';
    this.#scheduleRestart();
  }

  #scheduleRestart(): void {
    if (this.#restart || this.#state === 'closed') return;
    const pause = Math.min(
      DEFAULT_PROVIDER_LIMITS.restart_backoff_ms * 2 ** Math.max(0, this.#failures - 1),
      DEFAULT_PROVIDER_LIMITS.max_restart_backoff_ms,
    );
    let settle: (error?: unknown) => void = () => {};
    const done = new Promise<void>((resolve, reject) => {
      settle = (error) => (error === undefined ? resolve() : reject(error));
    });
    // Nobody may be waiting for it.
    done.catch(() => {});
    const timer = setTimeout(() => {
      this.#restart = null;
      this.#restarts++;
      this.start().then(
        () => settle(),
        (error: unknown) => settle(error ?? new Error('the server did not start')),
      );
    }, pause);
    timer.unref();
    this.#restart = { timer, done, settle };
  }

  #withStderr(message: string): string {
    const tail = this.#stderr.trim();
    if (!tail) return message;
    // A runtime that dies of memory prints its reason first and a native stack after it: the tail alone
    // would show only the stack.
    const starved = OUT_OF_MEMORY.exec(tail);
    const settings = this.#settings;
    if (starved) {
      const limit =
        settings.transport === 'stdio' && settings.sandbox !== false
          ? `; its sandbox allows ${settings.sandbox.limits?.memory_mb ?? DEFAULT_SANDBOX_LIMITS.memory_mb} MB of data memory per process: raise "sandbox": { "limits": { "memory_mb" } } (a Node 24 server needs about 600 MB before it runs any code)`
          : '';
      return `${message}: the server ran out of memory (${starved[0].trim()})${limit}`;
    }
    return `${message} (its last output: ${tail.slice(-500)})`;
  }

  /** The live connection, waiting for a start under way (or the restart pending) within the call's signal. */
  async #ready(signal: AbortSignal): Promise<Connection> {
    for (;;) {
      if (this.#state === 'closed') throw new Error(`provider "${this.name}" is closed`);
      if (this.#connection?.alive) return this.#connection;
      await abortable(this.#starting ?? this.#restart?.done ?? this.start(), signal);
    }
  }

  async call(tool: string, input: unknown, ctx: ProviderCallContext): Promise<ProviderOutcome> {
    let connection: Connection;
    try {
      connection = await this.#ready(ctx.signal);
    } catch (error) {
      if (ctx.signal.aborted) return { ok: false, code: 'CANCELLED', message: 'The call was cancelled while the server was starting' };
      return {
        ok: false,
        code: 'UNAVAILABLE',
        message: `MCP server of provider "${this.name}" is not available: ${(error as Error).message}`,
        retryable: true,
      };
    }
    const flight: InFlight = ctx.onLog ? { onLog: ctx.onLog } : {};
    this.#inFlight.add(flight);
    try {
      const result = await connection.client.callTool({ name: tool, arguments: (input ?? {}) as Record<string, unknown> }, undefined, {
        signal: ctx.signal,
        timeout: ctx.timeoutMs,
        ...(ctx.onProgress ? { onprogress: (p: { progress: number; total?: number; message?: string }) => ctx.onProgress?.(p) } : {}),
      });
      this.#failures = 0;
      if (result.isError) {
        return { ok: false, code: 'TOOL_ERROR', message: textOf(result.content) || `${tool} failed`, details: { content: result.content } };
      }
      const described = this.#tools.find((t) => t.name === tool);
      return {
        ok: true,
        data:
          described?.outputSchema && result.structuredContent !== undefined
            ? result.structuredContent
            : { content: result.content, ...(result.structuredContent !== undefined ? { structuredContent: result.structuredContent } : {}) },
      };
    } catch (error) {
      return this.#failure(error, connection, ctx.signal);
    } finally {
      this.#inFlight.delete(flight);
    }
  }

  #failure(error: unknown, connection: Connection, signal: AbortSignal): ProviderOutcome {
    if (signal.aborted) return { ok: false, code: 'CANCELLED', message: 'The call was cancelled; the server was told (notifications/cancelled)' };
    const code = (error as { code?: unknown })?.code;
    const message = (error as Error)?.message ?? String(error);
    if (!connection.alive || code === -32000) {
      return {
        ok: false,
        code: 'UNAVAILABLE',
        message: `MCP server of provider "${this.name}" stopped during the call: ${this.#error ?? message}`,
        retryable: true,
      };
    }
    if (code === -32001)
      return { ok: false, code: 'TIMEOUT', message: `MCP server of provider "${this.name}" did not answer in time`, retryable: true };
    const mapped: ErrorCode = code === -32602 ? 'INVALID_INPUT' : 'TOOL_ERROR';
    return { ok: false, code: mapped, message, ...(typeof code === 'number' ? { details: { mcp_code: code } } : {}) };
  }

  status(): ProviderStatus {
    const settings = this.#settings;
    return {
      name: this.name,
      kind: this.kind,
      state: this.#state,
      tools: this.#tools.length,
      restarts: this.#restarts,
      ...(this.#error !== undefined && this.#state !== 'ready' ? { error: this.#error } : {}),
      details:
        settings.transport === 'stdio'
          ? { transport: 'stdio', command: settings.command, pid: this.#connection?.pid ?? null, ...this.#launched }
          : { transport: 'streamable-http', url: settings.url.href },
    };
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    if (this.#restart) {
      clearTimeout(this.#restart.timer);
      // Its waiters look again, and find the provider closed.
      this.#restart.settle();
      this.#restart = null;
    }
    const connection = this.#connection;
    this.#connection = null;
    await this.#starting?.catch(() => {});
    if (connection) {
      connection.alive = false;
      await connection.client.close().catch(() => {});
    }
  }
}

function logLevel(level: string): 'debug' | 'info' | 'warn' | 'error' {
  if (level === 'debug') return 'debug';
  if (level === 'info' || level === 'notice') return 'info';
  if (level === 'warning') return 'warn';
  return 'error';
}

function textOf(content: unknown): string {
  if (!Array.isArray(content)) return '';
  return content
    .filter((c): c is { type: 'text'; text: string } => c?.type === 'text' && typeof c.text === 'string')
    .map((c) => c.text)
    .join('\n');
}

function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
