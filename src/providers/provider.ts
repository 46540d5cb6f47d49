/**
 * Providers: tools that live outside the engine (an MCP server, an HTTP tool worker, a NATS satellite),
 * served behind the same gate as the tools it hosts. A provider knows its upstream's tools and how to
 * call one; the engine gives each of its tools an id `<provider>.<tool>`, the provider's declared
 * permissions, and everything else a call goes through (grants, approvals, secrets, limits, events,
 * audit). To the caller a provider's tool and a local one are the same.
 */
import type { ErrorCode } from '../errors.js';

/** A tool as the upstream describes it; the engine checks its schemas like any definition's. */
export interface ProviderTool {
  /** The upstream's own name for it (MCP tool name, manifest id, satellite tool name). */
  name: string;
  description?: string;
  /** JSON Schema of the input (an object schema). */
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  /** The upstream's own bound on one call, when it states one (ms); the engine takes the smaller. */
  timeoutMs?: number;
  /** What else the upstream says of it (MCP annotations, a manifest's egress metadata), kept as given. */
  annotations?: Record<string, unknown>;
}

/** What a call gives the provider besides its input. */
export interface ProviderCallContext {
  /** Aborted when the call is cancelled or times out: the provider cancels upstream (MCP notifications/cancelled). */
  signal: AbortSignal;
  /** The call's whole budget, ms (already the smaller of the tool's and the caller's). */
  timeoutMs: number;
  /** The engine's run id, for the upstream's logs. */
  runId: string;
  traceId: string;
  /** A line the upstream logged while the call ran (MCP logging notifications, a worker's log lines). */
  onLog?(line: { level: 'debug' | 'info' | 'warn' | 'error'; message: string }): void;
  /** Progress the upstream told (MCP notifications/progress). */
  onProgress?(progress: { progress: number; total?: number; message?: string }): void;
  /** A satellite node the caller asked for (`node_id`), when the provider's tools can be targeted. */
  nodeId?: string;
}

/**
 * A call's outcome as the upstream gave it. An error the upstream reported is `ok: false` with the code
 * closest to it (`TOOL_ERROR` for a tool's own failure, `UNAVAILABLE` when the upstream could not be
 * reached or died mid-call, `TIMEOUT`, `CANCELLED`); a malformed answer is `BAD_OUTPUT`, never data.
 */
export type ProviderOutcome =
  | { ok: true; data: unknown; logs?: Array<{ level: string; message: string }> }
  | { ok: false; code: ErrorCode; message: string; retryable?: boolean; details?: Record<string, unknown> };

export type ProviderState = 'idle' | 'starting' | 'ready' | 'restarting' | 'failed' | 'closed';

export interface ProviderStatus {
  name: string;
  kind: string;
  state: ProviderState;
  tools: number;
  /** Starts after the first one (crashes recovered from). */
  restarts: number;
  /** Why it is not ready, when it is not (the last failure), for `arium doctor` and the inspector. */
  error?: string;
  /** Kind-specific facts: a stdio server's pid and sandbox, an HTTP worker's URL, live satellites. */
  details?: Record<string, unknown>;
}

export interface Provider {
  readonly name: string;
  readonly kind: string;
  /** Connects (starts the server, reads the manifest, subscribes to heartbeats) and learns its tools. */
  start(): Promise<void>;
  /** The tools it offers now (empty before `start`). */
  tools(): ProviderTool[];
  /** Told whenever `tools()` changes (MCP list_changed, a satellite joining or leaving); returns an unsubscribe. */
  onToolsChanged(listener: () => void): () => void;
  /** Runs one of its tools. Never throws: failures are outcomes. */
  call(tool: string, input: unknown, ctx: ProviderCallContext): Promise<ProviderOutcome>;
  status(): ProviderStatus;
  /** Stops what it started; calls in flight end `UNAVAILABLE`. */
  close(): Promise<void>;
}

/** What the engine lends a provider it creates. */
export interface ProviderDeps {
  /** The project folder (manifest paths and the like are relative to it). */
  projectDir: string;
  /** The provider's declared permissions (`net.fetch` opens a sandboxed server's network). */
  permissions?: readonly string[];
  /** A secret's value by name (from the project's `secrets`), or undefined when it has none. */
  secret(name: string): string | undefined;
  /** Where a provider reports what it does on its own (a restart, a dropped satellite), for the engine's log and events. */
  log(level: 'info' | 'warn' | 'error', message: string): void;
}

/**
 * One kind of provider, as `arium.json` names it (`"mcp": {…}`, `"http": {…}`, `"nats": {…}`): it checks
 * its own part of a provider's settings and makes the provider. `parse` throws an Error whose message
 * says what is wrong and where (`at` is the JSON pointer of the settings object, e.g. `/providers/github/mcp`).
 */
export interface ProviderKind<Settings = unknown> {
  readonly key: string;
  parse(raw: unknown, at: string): Settings;
  create(name: string, settings: Settings, deps: ProviderDeps): Provider;
}
