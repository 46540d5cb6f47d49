import { randomUUID } from 'node:crypto';
import type { ApprovalAnswer, ApprovalGate, PendingApproval } from './approvals/gate.js';
import { isCapabilityRequest, routeCapability } from './capabilities.js';
import type { Limiter } from './concurrency.js';
import { type ErrorInfo, isRetryable, type Stage, ToolFailure } from './errors.js';
import type { EventBus } from './events.js';
import { type Execution, Executor, OUTSIDE_EFFECTS, type RunScope } from './execution.js';
import { type CallLimits, ERROR_MESSAGE_CHARS, MACRO_LIMITS, type Policy } from './limits.js';
import { copyInput, forEvent } from './payload.js';
import { type GrantSet, PermissionSyntaxError } from './permissions.js';
import type { Registry } from './registry/registry.js';
import type { LogLine, ResultMeta, ToolResult } from './result.js';
import type { Runner, StepCaller } from './runner.js';
import { hasSecretReference, withSecrets } from './secrets/references.js';
import type { Scrubber } from './secrets/scrub.js';
import type { ResolvedSecret } from './secrets/sources.js';
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
  /**
   * Shorten the timeout for this call; never lengthens the tool's own. The timeout starts when the call
   * starts to run: a wait for approval does not count (it has its own, `approvals.timeout_ms`).
   */
  timeout_ms?: number;
  /**
   * Which tools a capability may resolve to, besides the grants (a surface passes its profile's tool
   * list). An explicit id is not checked against it: a surface checks the ids it offers itself.
   */
  offered?: (toolId: string) => boolean;
  /**
   * The host vouches that a person approved this one call already (`arium call --approve`): a call an
   * `approvals` rule matches runs without waiting, and the events and audit log say who approved it.
   */
  approval?: ApprovalAnswer;
  /** Told when the call starts to wait for approval, to ask a person (a terminal prompt, an MCP elicitation). */
  onApproval?: (pending: PendingApproval) => void;
  /**
   * Told each log line of the call as the tool writes it (secrets scrubbed, within the call's log cap),
   * for a surface that shows a long call's progress (MCP logging notifications). `meta.logs` still holds
   * the lines of the run that produced the result; lines of a run thrown away on a CONFLICT were told too.
   */
  onLog?: (line: LogLine) => void;
}

export type { CallTarget, CapabilityRequest } from './capabilities.js';

export interface DispatcherDeps {
  registry: Registry;
  runners: ReadonlyMap<RunnerName, Runner>;
  /** The committed VFS: each call runs in a transaction of it and commits only on success. */
  state: VfsState;
  bus: EventBus;
  policy: Readonly<Policy>;
  grants: GrantSet;
  limiter: Limiter;
  approvals: ApprovalGate;
  /** The project's secrets, read at start, and what scrubs their values from everything a call hands out. */
  secrets: ReadonlyMap<string, ResolvedSecret>;
  scrubber: Scrubber;
}

/**
 * A call made as a step of a composite call (a macro): it runs in that call's transaction with its
 * grants, trace and deadline, and its events name the composite call's run.
 */
interface StepParent extends RunScope {
  runId: string;
  traceId: string;
  /** The composite calls this one runs under, outermost first. */
  chain: readonly string[];
}

const TRACE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
function toolLabel(id: unknown): string {
  if (isCapabilityRequest(id)) return `capability:${toolLabel(id.capability)}`;
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

  async call(id: unknown, input: unknown, options: CallOptions = {}, parent?: StepParent): Promise<ToolResult> {
    const started = performance.now();
    const runId = randomUUID();
    let label = toolLabel(id);
    const meta: ResultMeta = { tool: label, run_id: runId, trace_id: parent?.traceId ?? runId, duration_ms: 0 };
    const parentRun = parent ? { parent_run_id: parent.runId } : {};
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
      // A capability is resolved first, so every event, policy and audit line names the tool that runs.
      let routed: Tool | null = null;
      if (isCapabilityRequest(id)) {
        routed = routeCapability(this.#d.registry, id.capability, this.#grantsFor(opts.grants), opts.offered);
        meta.capability = id.capability as string;
        label = routed.spec.id;
        meta.tool = label;
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
          input: inputError ? '[rejected input]' : this.#shown(copy),
          caller: typeof opts.caller === 'string' ? opts.caller.slice(0, 200) : null,
          ...parentRun,
        });
      }
      invocationSent = true;
      const tool = routed ?? this.#lookup(id);
      if (inputError) throw inputError;
      if (hasSecretReference(copy, 0)) {
        stage = 'permission';
        if (tool.spec.steps !== undefined) {
          // A value in a macro's input would reach its steps through their templates, tools that may
          // not declare the secret: a step names the secret itself, and its own tool is checked.
          this.#security(
            runId,
            meta.trace_id,
            tool.spec.id,
            'secret.read',
            `pass a secret to macro ${tool.spec.id}`,
            'a macro takes no secret references',
          );
          throw new ToolFailure(
            'permission',
            'DENIED',
            `Permission denied: ${tool.spec.id} is a macro, whose input cannot carry {"$secret": …}; put the reference in the input template of the step that needs it, whose tool must declare secret.read:NAME`,
            { details: { tool: tool.spec.id } },
          );
        }
        copy = withSecrets(copy, tool, this.#grantsFor(opts.grants), this.#d.secrets, (permission, operation, reason) =>
          this.#security(runId, meta.trace_id, tool.spec.id, permission, operation, reason),
        );
        stage = 'validation';
      }
      const violations = tool.validateInput(copy);
      if (violations) {
        throw new ToolFailure('validation', 'INVALID_INPUT', `Invalid input for ${tool.spec.id}: ${summarize(violations)}`, {
          details: { violations },
        });
      }
      stage = 'permission';
      // A step never gets more than the caller of its macro was granted.
      const grants = parent ? parent.grants : this.#grantsFor(opts.grants);
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
      const rule = this.#d.approvals.needs(tool.spec.id, copy);
      if (rule && parent) {
        // A step runs inside its macro's transaction and slot: waiting for a person there would hold both.
        throw new ToolFailure(
          'permission',
          'APPROVAL_DENIED',
          `${tool.spec.id} needs approval (approvals.rules[${rule.index}]), and a step of a macro cannot wait for it: call ${tool.spec.id} directly`,
          { details: { rule } },
        );
      }
      if (rule) {
        // Before the concurrency slot and the transaction: a call waiting for a person holds nothing.
        await this.#d.approvals.wait({
          runId,
          traceId: meta.trace_id,
          tool: tool.spec.id,
          input: copy,
          caller: typeof opts.caller === 'string' ? opts.caller.slice(0, 200) : null,
          rule,
          signal: opts.signal,
          preapproved: opts.approval,
          onPending: typeof opts.onApproval === 'function' ? opts.onApproval : undefined,
        });
      }
      stage = 'execution';
      const runner = this.#d.runners.get(tool.spec.runner);
      if (!runner) {
        throw new ToolFailure('execution', 'MISCONFIGURED', `No ${tool.spec.runner} is set up in this engine to run ${tool.spec.id}`);
      }
      meta.runner = runner.name;
      const toolId = tool.spec.id;
      const execution: Execution = {
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
        ...(opts.onLog ? { onLog: this.#logTeller(opts.onLog) } : {}),
        steps: (scope) => this.#steps(scope, { runId, traceId: meta.trace_id, chain: [...(parent?.chain ?? []), toolId] }),
      };
      let { output, outputBytes, vfs } = parent ? await this.#executor.runStep(execution, parent) : await this.#executor.run(execution);
      meta.duration_ms = performance.now() - started;
      const { scrubber } = this.#d;
      if (scrubber.active) {
        output = scrubber.value(output);
        if (meta.logs) meta.logs = scrubber.lines(meta.logs);
      }
      if (bus.active) {
        bus.publish({
          type: 'ToolResultEvent',
          at: new Date().toISOString(),
          run_id: runId,
          trace_id: meta.trace_id,
          tool: label,
          duration_ms: meta.duration_ms,
          output_bytes: outputBytes,
          input: this.#shown(copy),
          output: forEvent(output, policy.event_payload_bytes),
          vfs: vfs.changed ? vfs.changes : null,
          attempts: runs.count,
          ...(meta.logs && meta.logs.length > 0 ? { logs: meta.logs } : {}),
          ...parentRun,
          ...(meta.worker ? { worker: meta.worker } : {}),
        });
      }
      return { ok: true, data: output, meta };
    } catch (thrown) {
      meta.duration_ms = performance.now() - started;
      const { scrubber } = this.#d;
      const error = scrubber.value(toErrorInfo(thrown, label, stage, (text) => scrubber.text(text)));
      if (scrubber.active && meta.logs) meta.logs = scrubber.lines(meta.logs);
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
            ...parentRun,
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
          ...(stage === 'validation' ? {} : { input: this.#shown(copy) }),
          ...(meta.logs && meta.logs.length > 0 ? { logs: meta.logs } : {}),
          ...parentRun,
          ...(meta.worker ? { worker: meta.worker } : {}),
        });
      }
      return { ok: false, error, meta };
    }
  }

  /**
   * The step caller of a composite call's run: each step is a full call, in the run's transaction, with
   * the caller's grants and what is left of the run's time. A step that would make the chain of macros
   * deeper than MACRO_LIMITS.max_depth (a tool reloaded under a running call; the registry refuses such
   * chains) fails naming the chain.
   */
  #steps(scope: RunScope, self: Omit<StepParent, keyof RunScope>): StepCaller {
    return async (step) => {
      if (self.chain.length >= MACRO_LIMITS.max_depth && this.#d.registry.get(step.tool)?.spec.steps !== undefined) {
        throw new ToolFailure(
          'execution',
          'MISCONFIGURED',
          `Macros nest deeper than ${MACRO_LIMITS.max_depth}: ${[...self.chain, step.tool].join(' → ')}`,
          { details: { chain: [...self.chain, step.tool], max_depth: MACRO_LIMITS.max_depth } },
        );
      }
      const left = Math.max(1, Math.floor(scope.deadline - performance.now()));
      const options: CallOptions = { timeout_ms: left, signal: scope.signal, caller: `macro:${self.chain.at(-1)}` };
      return this.call(step.tool, step.input, options, { ...scope, ...self });
    };
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

  /** A caller's log listener, given each line scrubbed; a listener that throws does not fail the call. */
  #logTeller(listener: (line: LogLine) => void): (line: LogLine) => void {
    const { scrubber } = this.#d;
    return (line) => {
      try {
        listener(scrubber.active ? { level: line.level, message: scrubber.text(line.message) } : line);
      } catch {
        // The listener's problem (a closed connection, say): the call goes on.
      }
    };
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
      max_attempts: this.#actsOutside(tool, 0) ? 1 : (own?.max_attempts ?? policy.max_attempts),
    };
  }

  /**
   * Whether a macro reaches, through its steps, a tool that may act outside the VFS: a CONFLICT re-runs
   * a macro whole, so such a macro runs once, as such a tool does (the executor sees only the macro's
   * own permissions).
   */
  #actsOutside(tool: Tool, depth: number): boolean {
    const steps = tool.spec.steps;
    if (steps === undefined || depth > MACRO_LIMITS.max_depth) return false;
    return steps.some((step) => {
      const target = this.#d.registry.get(step.tool);
      return target !== undefined && (target.declared.some((p) => OUTSIDE_EFFECTS.has(p.name)) || this.#actsOutside(target, depth + 1));
    });
  }

  /**
   * An input as events show it: scrubbed before it is cut to the payload size, since a cut through a
   * secret's value leaves its first characters, which scrubbing after the cut would not recognise.
   */
  #shown(input: unknown): unknown {
    return forEvent(this.#d.scrubber.value(input), this.#d.policy.event_payload_bytes);
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

/**
 * Plain JSON error for a result. Host stacks never leave this function; only a tool's own stack does.
 * `scrub` runs on the message before it is cut: a cut through a secret's value leaves its first
 * characters, which scrubbing after the cut would not recognise.
 */
export function toErrorInfo(thrown: unknown, tool: string, stage: Stage, scrub: (text: string) => string = (text) => text): ErrorInfo {
  if (isFailure(thrown)) {
    const info: ErrorInfo = {
      type: 'ToolError',
      tool,
      stage: thrown.stage,
      code: thrown.code,
      message: bounded(scrub(thrown.message)),
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
    message: bounded(scrub(`Internal error in the engine while running ${tool}: ${message}`)),
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
