import { randomUUID } from 'node:crypto';
import type { Limiter } from './concurrency.js';
import { type ErrorInfo, isRetryable, type Stage, ToolFailure } from './errors.js';
import type { EventBus } from './events.js';
import { Executor } from './execution.js';
import { type CallLimits, ERROR_MESSAGE_CHARS, type Policy } from './limits.js';
import { copyInput, forEvent } from './payload.js';
import { type GrantSet, PermissionSyntaxError } from './permissions.js';
import type { Registry } from './registry/registry.js';
import type { ResultMeta, ToolResult } from './result.js';
import type { Runner } from './runner.js';
import type { RunnerName, Tool } from './tool.js';
import { summarize } from './validation.js';
import type { VfsState } from './vfs/state.js';

/** Per-call options. Every field is optional; none can widen what the engine allows. */
export interface CallOptions {
  /** Narrow the engine's grants for this call (a grant not covered by the engine's is dropped). */
  grants?: readonly string[];
  /** Correlates several calls of one agent step; generated when absent. */
  trace_id?: string;
  /** Who is calling, for events and audit (e.g. "mcp", "http:127.0.0.1"). */
  caller?: string;
  /** Cancels the call (result `CANCELLED`). */
  signal?: AbortSignal;
  /** Shorten the timeout for this call; never lengthens the tool's own. */
  timeout_ms?: number;
}

export interface DispatcherDeps {
  registry: Registry;
  runners: ReadonlyMap<RunnerName, Runner>;
  /** The committed VFS: each call runs in a transaction of it and commits only on success. */
  state: VfsState;
  bus: EventBus;
  policy: Readonly<Policy>;
  grants: GrantSet;
  limiter: Limiter;
}

const TRACE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
function toolLabel(id: unknown): string {
  return typeof id === 'string' ? (id.length > 200 ? `${id.slice(0, 200)}…` : id) : `(${typeof id})`;
}

/**
 * The one code path every call takes, whatever its runner or surface:
 * lookup → validation → permission → execution under policy → structured result, with events.
 * `call` never throws and never rejects: every failure, including engine bugs, becomes a result.
 */
export class Dispatcher {
  readonly #d: DispatcherDeps;
  readonly #grantCache = new Map<string, GrantSet>();
  readonly #executor: Executor;

  constructor(deps: DispatcherDeps) {
    this.#d = deps;
    this.#executor = new Executor({ state: deps.state, policy: deps.policy, limiter: deps.limiter });
  }

  async call(id: unknown, input: unknown, options: CallOptions = {}): Promise<ToolResult> {
    const started = performance.now();
    const runId = randomUUID();
    const label = toolLabel(id);
    const meta: ResultMeta = { tool: label, run_id: runId, trace_id: runId, duration_ms: 0 };
    const { bus, policy } = this.#d;
    let stage: Stage = 'validation';
    let invocationSent = false;
    /** How many times the tool ran (0 when the call failed before it ran). */
    const runs = { count: 0 };
    /** The caller's input, copied; past validation, with the schema's defaults filled in. */
    let copy: unknown;
    try {
      const opts = options ?? {};
      if (opts.trace_id !== undefined) {
        if (typeof opts.trace_id !== 'string' || !TRACE_ID.test(opts.trace_id)) {
          throw new ToolFailure('validation', 'INVALID_INPUT', 'trace_id must be 1-128 characters of A-Z a-z 0-9 . _ : -', {
            details: { option: 'trace_id' },
          });
        }
        meta.trace_id = opts.trace_id;
      }
      let inputError: unknown = null;
      try {
        copy = copyInput(input, { bytes: policy.input_bytes, depth: policy.input_depth });
      } catch (error) {
        inputError = error;
      }
      if (bus.active) {
        bus.publish({
          type: 'ToolInvocationEvent',
          at: new Date().toISOString(),
          run_id: runId,
          trace_id: meta.trace_id,
          tool: label,
          input: inputError ? '[rejected input]' : forEvent(copy, policy.event_payload_bytes),
          caller: typeof opts.caller === 'string' ? opts.caller.slice(0, 200) : null,
        });
      }
      invocationSent = true;
      const tool = this.#lookup(id);
      if (inputError) throw inputError;
      const violations = tool.validateInput(copy);
      if (violations) {
        throw new ToolFailure('validation', 'INVALID_INPUT', `Invalid input for ${tool.spec.id}: ${summarize(violations)}`, {
          details: { violations },
        });
      }
      stage = 'permission';
      const grants = this.#grantsFor(opts.grants);
      const missing = grants.missing(tool.declared);
      if (missing) {
        this.#security(runId, meta.trace_id, tool.spec.id, missing.text, `call ${tool.spec.id}`, 'a declared permission is not granted');
        throw new ToolFailure(
          'permission',
          'DENIED',
          `Permission denied: ${tool.spec.id} needs "${missing.text}", which the caller was not granted`,
          {
            details: { permission: missing.text, granted: grants.texts() },
          },
        );
      }
      stage = 'execution';
      const runner = this.#d.runners.get(tool.spec.runner);
      if (!runner) {
        throw new ToolFailure('execution', 'MISCONFIGURED', `No ${tool.spec.runner} is set up in this engine to run ${tool.spec.id}`);
      }
      meta.runner = runner.name;
      const toolId = tool.spec.id;
      const { output, outputBytes, vfs } = await this.#executor.run({
        tool,
        runner,
        input: copy,
        grants,
        limits: this.#limits(tool, opts),
        signal: opts.signal,
        meta,
        runs,
        denied: (permission, operation, path) =>
          this.#security(
            runId,
            meta.trace_id,
            toolId,
            permission,
            `${operation} ${path}`,
            permission === null ? 'a path that tries to leave the VFS' : 'VFS access outside what was declared and granted',
          ),
        intrusion: (operation, reason) => this.#security(runId, meta.trace_id, toolId, null, operation, reason),
      });
      meta.duration_ms = performance.now() - started;
      if (bus.active) {
        bus.publish({
          type: 'ToolResultEvent',
          at: new Date().toISOString(),
          run_id: runId,
          trace_id: meta.trace_id,
          tool: label,
          duration_ms: meta.duration_ms,
          output_bytes: outputBytes,
          input: forEvent(copy, policy.event_payload_bytes),
          output: forEvent(output, policy.event_payload_bytes),
          vfs: vfs.changed ? vfs.changes : null,
          attempts: runs.count,
          ...(meta.logs && meta.logs.length > 0 ? { logs: meta.logs } : {}),
          ...(meta.worker ? { worker: meta.worker } : {}),
        });
      }
      return { ok: true, data: output, meta };
    } catch (thrown) {
      meta.duration_ms = performance.now() - started;
      const error = toErrorInfo(thrown, label, stage);
      if (bus.active) {
        if (!invocationSent) {
          bus.publish({
            type: 'ToolInvocationEvent',
            at: new Date().toISOString(),
            run_id: runId,
            trace_id: meta.trace_id,
            tool: label,
            input: '[rejected input]',
            caller: null,
          });
        }
        bus.publish({
          type: 'ToolErrorEvent',
          at: new Date().toISOString(),
          run_id: runId,
          trace_id: meta.trace_id,
          tool: label,
          duration_ms: meta.duration_ms,
          error,
          attempts: runs.count,
          // Past validation the input is the one the tool got (defaults filled in); before it, only the invocation shows it.
          ...(stage === 'validation' ? {} : { input: forEvent(copy, policy.event_payload_bytes) }),
          ...(meta.logs && meta.logs.length > 0 ? { logs: meta.logs } : {}),
          ...(meta.worker ? { worker: meta.worker } : {}),
        });
      }
      return { ok: false, error, meta };
    }
  }

  #lookup(id: unknown): Tool {
    if (typeof id !== 'string') {
      throw new ToolFailure('validation', 'UNKNOWN_TOOL', `A tool id must be a string, not ${id === null ? 'null' : typeof id}`);
    }
    const tool = this.#d.registry.get(id);
    if (tool) return tool;
    const close = suggest(
      id,
      this.#d.registry.list().map((t) => t.spec.id),
    );
    const hint = close.length > 0 ? ` Did you mean ${close.map((c) => `"${c}"`).join(' or ')}?` : '';
    throw new ToolFailure('validation', 'UNKNOWN_TOOL', `Unknown tool "${toolLabel(id)}".${hint}`, { details: { suggestions: close } });
  }

  #grantsFor(requested: readonly string[] | undefined): GrantSet {
    if (requested === undefined) return this.#d.grants;
    if (!Array.isArray(requested) || requested.some((g) => typeof g !== 'string')) {
      throw new ToolFailure('validation', 'INVALID_INPUT', 'grants must be an array of permission strings', { details: { option: 'grants' } });
    }
    // A key no list of strings can share with another: with join('\n'), the single grant
    // "vfs.read:/a\nvfs.write" hit the cached set of ["vfs.read:/a", "vfs.write"] and got vfs.write.
    const key = JSON.stringify(requested);
    let set = this.#grantCache.get(key);
    if (!set) {
      try {
        set = this.#d.grants.narrow(requested);
      } catch (error) {
        if (error instanceof PermissionSyntaxError)
          throw new ToolFailure('validation', 'INVALID_INPUT', error.message, { details: { option: 'grants' } });
        throw error;
      }
      if (this.#grantCache.size > 1000) this.#grantCache.clear();
      this.#grantCache.set(key, set);
    }
    return set;
  }

  #limits(tool: Tool, opts: CallOptions): CallLimits {
    const { policy } = this.#d;
    const own = tool.spec.limits;
    let timeout = own?.timeout_ms ?? policy.timeout_ms;
    if (typeof opts.timeout_ms === 'number' && opts.timeout_ms > 0 && opts.timeout_ms < timeout) timeout = opts.timeout_ms;
    return {
      timeout_ms: timeout,
      memory_mb: own?.memory_mb ?? policy.memory_mb,
      output_bytes: own?.output_bytes ?? policy.output_bytes,
      max_attempts: own?.max_attempts ?? policy.max_attempts,
    };
  }

  #security(runId: string, traceId: string, tool: string, permission: string | null, operation: string | null, reason: string): void {
    if (!this.#d.bus.active) return;
    this.#d.bus.publish({
      type: 'SecurityEvent',
      at: new Date().toISOString(),
      run_id: runId,
      trace_id: traceId,
      tool,
      action: permission === null ? 'intrusion' : 'denied',
      permission,
      operation,
      reason,
    });
  }
}

/** Plain JSON error for a result. Host stacks never leave this function; only a tool's own stack does. */
export function toErrorInfo(thrown: unknown, tool: string, stage: Stage): ErrorInfo {
  if (isFailure(thrown)) {
    const info: ErrorInfo = {
      type: 'ToolError',
      tool,
      stage: thrown.stage,
      code: thrown.code,
      message: bounded(thrown.message),
      retryable: isRetryable(thrown.code),
    };
    if (thrown.details) info.details = thrown.details;
    if (thrown.toolStack) info.stack = thrown.toolStack;
    return info;
  }
  let message: string;
  try {
    message = thrown instanceof Error ? String(thrown.message) : String(thrown);
  } catch {
    message = 'unprintable value';
  }
  return {
    type: 'ToolError',
    tool,
    stage,
    code: 'INTERNAL',
    message: bounded(`Internal error in the engine while running ${tool}: ${message}`),
    retryable: false,
  };
}

/** A message cut to ERROR_MESSAGE_CHARS, saying how much was cut. */
function bounded(message: string): string {
  if (message.length <= ERROR_MESSAGE_CHARS) return message;
  return `${message.slice(0, ERROR_MESSAGE_CHARS)}… (${message.length - ERROR_MESSAGE_CHARS} more characters cut)`;
}

/**
 * `instanceof` runs the thrown value's prototype lookup, and a hostile value (a revoked Proxy, a Proxy
 * whose getPrototypeOf trap throws) makes that throw: the catch block that builds the result must not.
 */
function isFailure(thrown: unknown): thrown is ToolFailure {
  try {
    return thrown instanceof ToolFailure;
  } catch {
    return false;
  }
}

/** Ids within a small edit distance of `id`, closest first. */
function suggest(id: string, ids: readonly string[]): string[] {
  if (id.length > 128) return [];
  const scored: Array<[number, string]> = [];
  for (const candidate of ids) {
    const d = distance(id, candidate);
    if (d <= Math.max(2, Math.floor(candidate.length / 4))) scored.push([d, candidate]);
  }
  return scored
    .sort((a, b) => a[0] - b[0])
    .slice(0, 3)
    .map(([, c]) => c);
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0] as number;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j] as number;
      row[j] = Math.min((row[j] as number) + 1, (row[j - 1] as number) + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length] as number;
}
