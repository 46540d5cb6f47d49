// Over 500 lines: one pipeline, the stages of a call, which share the call's record and the dispatcher's deps.
import { randomUUID } from 'node:crypto';
import type { ApprovalAnswer, ApprovalDecision, ApprovalGate, PendingApproval } from './approvals/gate.js';
import type { MatchedRule } from './approvals/rules.js';
import { isCapabilityRequest, routeCapability } from './capabilities.js';
import { callableTools } from './code-mode/callable.js';
import type { CallerTools, ToolCatalog } from './code-mode/catalog.js';
import type { Limiter } from './concurrency.js';
import { toErrorInfo } from './error-info.js';
import { type Stage, ToolFailure } from './errors.js';
import type { EventBus } from './events.js';
import { actsOutside, type Execution, Executor, OUTSIDE_EFFECTS, type Outcome, type RunScope } from './execution.js';
import { type CallLimits, MACRO_LIMITS, type Policy } from './limits.js';
import { copyInput, forEvent } from './payload.js';
import { type GrantSet, PermissionSyntaxError } from './permissions.js';
import type { Registry } from './registry/registry.js';
import type { LogLine, Progress, ResultMeta, ToolResult } from './result.js';
import type { Runner, StepCaller, ToolCaller } from './runner.js';
import { hasSecretReference, withSecrets } from './secrets/references.js';
import type { Scrubber } from './secrets/scrub.js';
import type { ResolvedSecret } from './secrets/sources.js';
import { suggest } from './suggest.js';
import type { RunnerName, Tool } from './tool.js';
import type { ToolVfs } from './tool-vfs.js';
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
   * list), and the only ones a code.run program may call and the code-mode builtins (tools.search,
   * tools.describe, tools.call, code.types) show and reach for this call. An explicit id is not checked
   * against it: a surface checks the ids it offers itself.
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
  /**
   * Told the progress a tool reports as it runs (a provider's upstream: MCP notifications/progress), its
   * message scrubbed, for a surface that passes it on. Tools that report none never call it.
   */
  onProgress?: (progress: Progress) => void;
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
  /**
   * Why an id the registry does not hold cannot be served now, when there is a better answer than
   * UNKNOWN_TOOL (a provider's tool while the provider is down: UNAVAILABLE); null otherwise.
   */
  unknown?: (id: string) => ToolFailure | null;
  /** The tools by registry version, for the code-mode builtins' `ctx.catalog`. */
  catalog?: ToolCatalog;
}

/**
 * A call made by another call: a step of a macro, or a call of a code-mode program. It has its parent's
 * grants and trace, and its events name the parent's run.
 */
interface StepParent {
  runId: string;
  traceId: string;
  /** The composite calls this one runs under, outermost first. */
  chain: readonly string[];
  grants: GrantSet;
  /**
   * The parent's run, when this call runs in its transaction (a macro's step, an atomic program's
   * call); null for a call that commits on its own (a program that is not atomic).
   */
  scope: RunScope | null;
}

const TRACE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** The code-mode tool: its calls' inner calls are made through `#calls`. */
const CODE_RUN = 'code.run';
function toolLabel(id: unknown): string {
  if (isCapabilityRequest(id)) return `capability:${toolLabel(id.capability)}`;
  return typeof id === 'string' ? (id.length > 200 ? `${id.slice(0, 200)}…` : id) : `(${typeof id})`;
}

/** Who is calling, as events and approvals show it. */
function callerOf(options: CallOptions): string | null {
  return typeof options.caller === 'string' ? options.caller.slice(0, 200) : null;
}

/**
 * One call as it goes through the stages of `Dispatcher.call`: each stage reads what the ones before it
 * left here and adds its own part. One plain object per call, so a stage costs a method call and no
 * allocation of its own.
 */
interface Call {
  readonly id: unknown;
  readonly options: CallOptions;
  /** The composite call this one is a step of. */
  readonly parent: StepParent | undefined;
  readonly runId: string;
  /** `performance.now()` when the call came in. */
  readonly started: number;
  readonly meta: ResultMeta;
  /** Spread into each event: names the composite call's run for a step, nothing otherwise. */
  readonly parentRun: { parent_run_id?: string };
  /** How events and errors name the tool: what the caller asked for until a capability names the tool. */
  label: string;
  /** Where a failure is counted when the thrown value does not say (an engine bug). */
  stage: Stage;
  /** Who is calling, as events and approvals show it (read when the announcement or an approval needs it). */
  caller: string | null;
  /** Whether the ToolInvocationEvent went out (a failure before it sends one of its own). */
  announced: boolean;
  /** The tool that runs: a capability's is known before the announcement, an id's after it. */
  tool: Tool | null;
  /** The caller's input, copied; past validation, with the schema's defaults filled in. */
  input: unknown;
  /** Why the input could not be copied; thrown once the call is announced and its tool resolved. */
  inputError: unknown;
  /** The engine's grants until the permit stage narrows them to the caller's (or a macro's). */
  grants: GrantSet;
  /** The approvals rule the call waits on. */
  rule: MatchedRule | null;
  /** How many times the tool ran (0 when the call failed before it ran). */
  readonly runs: { count: number };
  /** What the run came to, once it has run. */
  output: unknown;
  outputBytes: number;
  vfs: ToolVfs | null;
}

/** A call past the resolve stage: its tool is known. */
type Resolved = Call & { tool: Tool };

/**
 * The one code path every call takes, whatever its runner or surface. `call` is the list of its stages,
 * in order, each a method below that takes the call's record:
 * trace → route → copy → announce → resolve → secrets → validate → permit → approve → execute
 * (slot, transaction, run, commit: the Executor) → scrub → report; a failure anywhere goes to `fail`.
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
    const c = this.#open(id, input, options, parent);
    try {
      this.#trace(c);
      this.#route(c);
      this.#copy(c);
      this.#announce(c);
      const call = this.#resolve(c);
      this.#secrets(call);
      this.#validate(call);
      this.#permit(call);
      if (this.#needsApproval(call)) await this.#approve(call);
      this.#scrub(call, await this.#execute(call));
      return this.#report(call);
    } catch (thrown) {
      return this.#fail(c, thrown);
    }
  }

  /** The call's record; `input` is the caller's until the copy stage replaces it with its copy. */
  #open(id: unknown, input: unknown, options: CallOptions, parent: StepParent | undefined): Call {
    const started = performance.now();
    const runId = randomUUID();
    const label = toolLabel(id);
    return {
      id,
      options: options ?? {},
      parent,
      runId,
      started,
      meta: { tool: label, run_id: runId, trace_id: parent?.traceId ?? runId, duration_ms: 0 },
      parentRun: parent ? { parent_run_id: parent.runId } : {},
      label,
      stage: 'validation',
      caller: null,
      announced: false,
      tool: null,
      input,
      inputError: null,
      grants: this.#d.grants,
      rule: null,
      runs: { count: 0 },
      output: undefined,
      outputBytes: 0,
      vfs: null,
    };
  }

  /** The caller's trace id, checked, replaces the generated one. */
  #trace(c: Call): void {
    const traceId = c.options.trace_id;
    if (traceId === undefined) return;
    if (typeof traceId !== 'string' || !TRACE_ID.test(traceId)) {
      throw new ToolFailure('validation', 'INVALID_INPUT', 'trace_id must be 1-128 characters of A-Z a-z 0-9 . _ : -', {
        details: { option: 'trace_id' },
      });
    }
    c.meta.trace_id = traceId;
  }

  /** A capability is routed to its tool first, so every event, policy and audit line names the tool that runs. */
  #route(c: Call): void {
    if (!isCapabilityRequest(c.id)) return;
    const opts = c.options;
    c.tool = routeCapability(this.#d.registry, c.id.capability, this.#grantsFor(opts.grants), opts.offered);
    c.meta.capability = c.id.capability as string;
    c.label = c.tool.spec.id;
    c.meta.tool = c.label;
  }

  /** The input copied within the policy's size and depth; a failure waits until the call is announced. */
  #copy(c: Call): void {
    const { policy } = this.#d;
    try {
      c.input = copyInput(c.input, { bytes: policy.input_bytes, depth: policy.input_depth });
    } catch (error) {
      c.inputError = error;
    }
  }

  /** The ToolInvocationEvent: every call that got this far is announced, whether or not its tool exists. */
  #announce(c: Call): void {
    if (this.#d.bus.active) {
      c.caller = callerOf(c.options);
      this.#d.bus.publish({
        type: 'ToolInvocationEvent',
        at: new Date().toISOString(),
        run_id: c.runId,
        trace_id: c.meta.trace_id,
        tool: c.label,
        input: c.inputError ? '[rejected input]' : this.#shown(c.input),
        caller: c.caller,
        ...c.parentRun,
      });
    }
    c.announced = true;
  }

  /** The tool an id names (an unknown id fails here, after its announcement); then a copy's failure is thrown. */
  #resolve(c: Call): Resolved {
    c.tool ??= this.#lookup(c.id);
    if (c.inputError) throw c.inputError;
    return c as Resolved;
  }

  /** `{"$secret": NAME}` references in the input replaced by the values the tool may read. */
  #secrets(c: Resolved): void {
    if (!hasSecretReference(c.input, 0)) return;
    c.stage = 'permission';
    const { tool, runId } = c;
    if (tool.spec.steps !== undefined) {
      // A value in a macro's input would reach its steps through their templates, tools that may
      // not declare the secret: a step names the secret itself, and its own tool is checked.
      this.#security(
        runId,
        c.meta.trace_id,
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
    // A step or a program's call reads only the secrets its parent's caller may read.
    const grants = c.parent ? c.parent.grants : this.#grantsFor(c.options.grants);
    c.input = withSecrets(c.input, tool, grants, this.#d.secrets, (permission, operation, reason) =>
      this.#security(runId, c.meta.trace_id, tool.spec.id, permission, operation, reason),
    );
    c.stage = 'validation';
  }

  /** The input checked against the tool's schema, which fills in its defaults. */
  #validate(c: Resolved): void {
    const violations = c.tool.validateInput(c.input);
    if (violations) {
      throw new ToolFailure('validation', 'INVALID_INPUT', `Invalid input for ${c.tool.spec.id}: ${summarize(violations)}`, {
        details: { violations },
      });
    }
  }

  /** Every permission the tool declares must be granted; a step never gets more than its macro's caller. */
  #permit(c: Resolved): void {
    c.stage = 'permission';
    const { tool } = c;
    const grants = c.parent ? c.parent.grants : this.#grantsFor(c.options.grants);
    const missing = grants.missing(tool.declared);
    if (missing) {
      this.#security(c.runId, c.meta.trace_id, tool.spec.id, missing.text, `call ${tool.spec.id}`, 'a declared permission is not granted');
      throw new ToolFailure('permission', 'DENIED', `Permission denied: ${tool.spec.id} needs "${missing.text}", which the caller was not granted`, {
        details: { permission: missing.text, granted: grants.texts() },
      });
    }
    c.grants = grants;
  }

  /** Whether an approvals rule matches the call (kept in the record); a step cannot wait for one. */
  #needsApproval(c: Resolved): boolean {
    const rule = this.#d.approvals.needs(c.tool.spec.id, c.input);
    if (rule && c.parent?.scope) {
      // A step runs inside its macro's transaction and slot: waiting for a person there would hold both.
      const parent = c.parent.chain.at(-1) === CODE_RUN ? 'an atomic code.run program' : 'a macro';
      const instead = parent === 'a macro' ? `call ${c.tool.spec.id} directly` : 'run the program with atomic: false, or call the tool directly';
      throw new ToolFailure(
        'permission',
        'APPROVAL_DENIED',
        `${c.tool.spec.id} needs approval (approvals.rules[${rule.index}]), and a call inside ${parent} cannot wait for it: ${instead}`,
        { details: { rule } },
      );
    }
    c.rule = rule;
    return rule !== null;
  }

  /** Waits for a person's answer, before the concurrency slot and the transaction: a waiting call holds nothing. */
  #approve(c: Resolved): Promise<ApprovalDecision> {
    const opts = c.options;
    return this.#d.approvals.wait({
      runId: c.runId,
      traceId: c.meta.trace_id,
      tool: c.tool.spec.id,
      input: c.input,
      caller: c.caller ?? callerOf(opts),
      rule: c.rule as MatchedRule,
      signal: opts.signal,
      preapproved: opts.approval,
      onPending: typeof opts.onApproval === 'function' ? opts.onApproval : undefined,
    });
  }

  /**
   * Hands the call to its runner through the Executor, which takes a concurrency slot, opens the call's
   * transaction, runs the tool under its limits and commits (a step runs in its macro's transaction).
   */
  #execute(c: Resolved): Promise<Outcome> {
    c.stage = 'execution';
    const { tool, meta, runId, parent } = c;
    const opts = c.options;
    const runner = this.#d.runners.get(tool.spec.runner);
    if (!runner) {
      throw new ToolFailure('execution', 'MISCONFIGURED', `No ${tool.spec.runner} is set up in this engine to run ${tool.spec.id}`);
    }
    meta.runner = runner.name;
    const toolId = tool.spec.id;
    const execution: Execution = {
      tool,
      runner,
      input: c.input,
      grants: c.grants,
      limits: this.#limits(tool, opts),
      signal: opts.signal,
      meta,
      runs: c.runs,
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
      ...(opts.onProgress ? { onProgress: this.#progressTeller(opts.onProgress) } : {}),
      ...(parent ? { underSlot: true } : {}),
      steps: (scope) => this.#steps(scope, { runId, traceId: meta.trace_id, chain: [...(parent?.chain ?? []), toolId] }),
      calls: (scope) => this.#calls(scope, { runId, traceId: meta.trace_id, chain: [...(parent?.chain ?? []), toolId] }, opts.offered),
      ...(this.#d.catalog ? { catalog: this.#catalogOf(c) } : {}),
    };
    // Returned, not awaited here: an async stage would cost every call one more promise.
    return parent?.scope ? this.#executor.runStep(execution, parent.scope) : this.#executor.run(execution);
  }

  /** The run's outcome kept in the record (its time taken first); the project's secret values taken out of the output and the logs. */
  #scrub(c: Resolved, outcome: Outcome): void {
    c.meta.duration_ms = performance.now() - c.started;
    c.output = outcome.output;
    c.outputBytes = outcome.outputBytes;
    c.vfs = outcome.vfs;
    const { scrubber } = this.#d;
    if (!scrubber.active) return;
    c.output = scrubber.value(c.output);
    if (c.meta.logs) c.meta.logs = scrubber.lines(c.meta.logs);
  }

  /** The ToolResultEvent, and the result. */
  #report(c: Resolved): ToolResult {
    const { meta } = c;
    if (this.#d.bus.active) {
      const vfs = c.vfs as ToolVfs;
      this.#d.bus.publish({
        type: 'ToolResultEvent',
        at: new Date().toISOString(),
        run_id: c.runId,
        trace_id: meta.trace_id,
        tool: c.label,
        duration_ms: meta.duration_ms,
        output_bytes: c.outputBytes,
        input: this.#shown(c.input),
        output: forEvent(c.output, this.#d.policy.event_payload_bytes),
        vfs: vfs.changed ? vfs.changes : null,
        attempts: c.runs.count,
        ...(meta.logs && meta.logs.length > 0 ? { logs: meta.logs } : {}),
        ...c.parentRun,
        ...(meta.worker ? { worker: meta.worker } : {}),
      });
    }
    return { ok: true, data: c.output, meta };
  }

  /** A failure at any stage: its error scrubbed, the invocation announced if it was not, the ToolErrorEvent. */
  #fail(c: Call, thrown: unknown): ToolResult {
    const { meta } = c;
    meta.duration_ms = performance.now() - c.started;
    const { scrubber, bus } = this.#d;
    const error = scrubber.value(toErrorInfo(thrown, c.label, c.stage, (text) => scrubber.text(text)));
    if (scrubber.active && meta.logs) meta.logs = scrubber.lines(meta.logs);
    if (bus.active) {
      if (!c.announced) {
        bus.publish({
          type: 'ToolInvocationEvent',
          at: new Date().toISOString(),
          run_id: c.runId,
          trace_id: meta.trace_id,
          tool: c.label,
          input: '[rejected input]',
          caller: null,
          ...c.parentRun,
        });
      }
      bus.publish({
        type: 'ToolErrorEvent',
        at: new Date().toISOString(),
        run_id: c.runId,
        trace_id: meta.trace_id,
        tool: c.label,
        duration_ms: meta.duration_ms,
        error,
        attempts: c.runs.count,
        // Past validation the input is the one the tool got (defaults filled in); before it, only the invocation shows it.
        ...(c.stage === 'validation' ? {} : { input: this.#shown(c.input) }),
        ...(meta.logs && meta.logs.length > 0 ? { logs: meta.logs } : {}),
        ...c.parentRun,
        ...(meta.worker ? { worker: meta.worker } : {}),
      });
    }
    return { ok: false, error, meta };
  }

  /**
   * The step caller of a composite call's run: each step is a full call, in the run's transaction, with
   * the caller's grants and what is left of the run's time. A step that would make the chain of macros
   * deeper than MACRO_LIMITS.max_depth (a tool reloaded under a running call; the registry refuses such
   * chains) fails naming the chain.
   */
  #steps(scope: RunScope, self: Omit<StepParent, 'grants' | 'scope'>): StepCaller {
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
      return this.call(step.tool, step.input, options, { ...self, grants: scope.grants, scope });
    };
  }

  /**
   * The tool caller of a code-mode run (code.run): each call is a full call with the run's grants and
   * trace and what is left of its time, in the run's transaction when atomic, else committed on its
   * own. code.run is not callable from a program (one level: no recursion to bound), nor is a tool the
   * run's surface does not offer.
   */
  #calls(scope: RunScope, self: Omit<StepParent, 'grants' | 'scope'>, offered: CallOptions['offered']): ToolCaller {
    const reachable = (id: string) => id !== CODE_RUN && (offered === undefined || offered(id));
    return {
      callable: () => callableTools(this.#d.registry.list(), scope.grants, reachable),
      call: (id, input, atomic) => {
        if (!reachable(id) && this.#d.registry.get(id)) {
          const why = id === CODE_RUN ? 'a program cannot run another program' : 'the surface this program was called from does not offer it';
          return Promise.resolve(this.#refused(id, input, self, `${id} cannot be called from a code.run program: ${why}`));
        }
        const target = this.#d.registry.get(id);
        if (target && actsOutside(target)) scope.effects.outside = true;
        const left = Math.max(1, Math.floor(scope.deadline - performance.now()));
        const options: CallOptions = { timeout_ms: left, signal: scope.signal, caller: CODE_RUN };
        return this.call(id, input, options, { ...self, grants: scope.grants, scope: atomic ? scope : null });
      },
    };
  }

  /** A call refused before it starts, reported as any failed call is (announced, with its error event). */
  #refused(id: string, input: unknown, self: Omit<StepParent, 'grants' | 'scope'>, message: string): ToolResult {
    const c = this.#open(id, input, { caller: CODE_RUN }, { ...self, grants: this.#d.grants, scope: null });
    c.stage = 'permission';
    return this.#fail(c, new ToolFailure('permission', 'DENIED', message, { details: { tool: id } }));
  }

  /** What `ctx.catalog` gives the call's tool: the tools its caller may call, with the grants it passed the gate with. */
  #catalogOf(c: Resolved): () => CallerTools {
    const catalog = this.#d.catalog as ToolCatalog;
    const grants = c.grants;
    const offered = typeof c.options.offered === 'function' ? c.options.offered : undefined;
    return () => catalog.forCaller(grants, offered);
  }

  #lookup(id: unknown): Tool {
    if (typeof id !== 'string') {
      throw new ToolFailure('validation', 'UNKNOWN_TOOL', `A tool id must be a string, not ${id === null ? 'null' : typeof id}`);
    }
    const tool = this.#d.registry.get(id);
    if (tool) return tool;
    const why = this.#d.unknown?.(id);
    if (why) throw why;
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

  /** A caller's progress listener, given each report with its message scrubbed; a listener that throws does not fail the call. */
  #progressTeller(listener: (progress: Progress) => void): (progress: Progress) => void {
    const { scrubber } = this.#d;
    return (progress) => {
      try {
        listener(scrubber.active && progress.message !== undefined ? { ...progress, message: scrubber.text(progress.message) } : progress);
      } catch {
        // As for a log listener: the call goes on.
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
