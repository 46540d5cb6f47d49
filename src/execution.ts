import type { CallerTools } from './code-mode/catalog.js';
import { CommitGate, type Limiter } from './concurrency.js';
import { ToolFailure } from './errors.js';
import type { CallLimits, Policy } from './limits.js';
import { checkOutput } from './payload.js';
import type { GrantSet, PermissionName } from './permissions.js';
import type { LogLine, Progress, ResultMeta } from './result.js';
import type { RunContext, Runner, StepCaller, ToolCaller } from './runner.js';
import type { Tool } from './tool.js';
import { type DenialReporter, ToolVfs } from './tool-vfs.js';
import { summarize } from './validation.js';
import type { VfsState } from './vfs/state.js';
import type { Transaction } from './vfs/transaction.js';

const NEVER_ABORTED = new AbortController().signal;
/** The reason a call's signal carries when the call is over and its work must stop. */
const CALL_ENDED = Object.freeze(new ToolFailure('execution', 'CANCELLED', 'The call has ended'));
/**
 * A tool that declares one of these may act outside the VFS, where a second run would do things twice:
 * such a call is never run again after losing a race.
 */
export const OUTSIDE_EFFECTS: ReadonlySet<PermissionName> = new Set<PermissionName>(['sys.exec', 'net.fetch']);

/**
 * Whether a call of `tool` may act outside the VFS: it declares one of OUTSIDE_EFFECTS, or a provider
 * serves it (its upstream is outside by definition). A composite call one of whose inner calls does is
 * not run again on a CONFLICT either.
 */
export function actsOutside(tool: Tool): boolean {
  return tool.spec.runner === 'provider' || tool.declared.some((p) => OUTSIDE_EFFECTS.has(p.name));
}
/** The longest pause, in ms, before running a call again after it lost a race (the pause is random below it). */
const MAX_BACKOFF_MS = 100;

/** What a call's runs came to: the accepted output, and the view whose changes were committed. */
export interface Outcome {
  output: unknown;
  outputBytes: number;
  vfs: ToolVfs;
}

/** One call as the dispatcher hands it over, past validation and the permission gate. */
export interface Execution {
  tool: Tool;
  runner: Runner;
  input: unknown;
  grants: GrantSet;
  limits: CallLimits;
  signal: AbortSignal | undefined;
  meta: ResultMeta;
  /** How many times the tool ran; kept up to date for the events (0 until it runs). */
  runs: { count: number };
  /** Reports a VFS access refused at run time (SecurityEvent). */
  denied: DenialReporter;
  /** Reports an attempt to leave the sandbox that a runner refused (SecurityEvent). */
  intrusion: (operation: string, reason: string) => void;
  /** Told each log line kept as the tool writes it (the caller's `onLog`, scrubbed by the dispatcher). */
  onLog?: (line: LogLine) => void;
  /** Told the progress the tool reports (the caller's `onProgress`, scrubbed by the dispatcher). */
  onProgress?: (progress: Progress) => void;
  /** Makes the step caller of a run, for a runner with the `steps` capability (a macro). */
  steps?: (scope: RunScope) => StepCaller;
  /** Makes the tool caller of a run, for a runner with the `calls` capability (code mode). */
  calls?: (scope: RunScope) => ToolCaller;
  /**
   * The call runs under the concurrency slot of the call that made it (a code.run program's call that
   * commits on its own), as a macro's step does: taking a slot of its own could wait forever on slots
   * that programs waiting for their calls hold.
   */
  underSlot?: boolean;
  /** The tools the caller may call, for a runner with the `catalog` capability. */
  catalog?: () => CallerTools;
}

const NO_SLOT = () => {};

/** What the steps of a composite call share with it: its transaction, grants, signal and deadline. */
export interface RunScope {
  transaction: Transaction;
  grants: GrantSet;
  /** Aborted when the composite call ends, times out or is cancelled. */
  signal: AbortSignal;
  /** `performance.now()` past which the composite call has run out of time. */
  deadline: number;
  /** The composite call's VFS change summary: each step's changes are added to it as the step succeeds. */
  changes: ToolVfs['changes'];
  /**
   * Set once an inner call of this run (at any depth) may have acted outside the VFS (`actsOutside`):
   * the run is then never thrown away and run again after a CONFLICT, since that would act twice.
   */
  effects: { outside: boolean };
}

export interface ExecutorDeps {
  state: VfsState;
  policy: Readonly<Policy>;
  limiter: Limiter;
}

/**
 * Runs a call: a concurrency slot, the call's VFS transaction and context, the runner under the
 * deadline, the output checks and the commit. A run whose commit is refused because another call
 * changed what it read (CONFLICT) is thrown away and the tool runs again on the new state, after a
 * random pause, up to `max_attempts` runs; the last of several holds the commit gate, so that no other
 * call commits before it. The timeout covers all runs together.
 */
export class Executor {
  readonly #d: ExecutorDeps;
  readonly #gate = new CommitGate();

  constructor(deps: ExecutorDeps) {
    this.#d = deps;
  }

  async run(call: Execution): Promise<Outcome> {
    const { tool, limits } = call;
    const attempts = tool.declared.some((p) => OUTSIDE_EFFECTS.has(p.name)) ? 1 : limits.max_attempts;
    const preparing = call.runner.ready?.(tool);
    if (preparing) await preparing;
    const started = performance.now();
    for (let attempt = 1; ; attempt++) {
      const alone = attempt > 1 && attempt === attempts;
      const release = alone ? await this.#gate.hold() : null;
      let outcome: Outcome | null;
      try {
        const left = limits.timeout_ms - (performance.now() - started);
        if (left <= 0) {
          throw new ToolFailure(
            'execution',
            'TIMEOUT',
            `${tool.spec.id} did not finish within ${limits.timeout_ms} ms: it ran ${attempt - 1} times, and each time another call changed what it had read before it could commit`,
            { details: { timeout_ms: limits.timeout_ms, attempts: attempt - 1 } },
          );
        }
        call.runs.count = attempt;
        if (attempt > 1) {
          call.meta.attempts = attempt;
          delete call.meta.logs;
          delete call.meta.logs_dropped;
        }
        const runLimits = attempt === 1 ? limits : { ...limits, timeout_ms: Math.ceil(left) };
        const canLose = attempt < attempts;
        // A synchronous runner (the builtins) runs, is checked and commits with nothing in between, so
        // no other call can commit under it: unless another call holds the gate, and must commit first.
        // A tool of such a runner that waits (shell.run, system.exec) takes the asynchronous path, with a deadline.
        const waits = call.runner.asyncTools?.has(tool.spec.id) === true;
        const slot =
          call.runner.runSync && !waits && (alone || !this.#gate.held) ? (call.underSlot ? NO_SLOT : this.#d.limiter.tryAcquire(tool.spec.id)) : null;
        outcome = slot ? this.#attemptSync(call, runLimits, slot, canLose) : await this.#attempt(call, runLimits, alone, canLose, waits);
      } finally {
        release?.();
      }
      if (outcome) return outcome;
      await pause(Math.random() * Math.min(MAX_BACKOFF_MS, 2 ** attempt), call.signal);
    }
  }

  /**
   * One run through a runner's `run`; null when it lost a race it may retry. `waits`: a tool of a
   * synchronous runner that waits (shell.run), which gets a deadline as an interruptible runner's do.
   */
  async #attempt(call: Execution, limits: CallLimits, alone: boolean, canLose: boolean, waits: boolean): Promise<Outcome | null> {
    const { tool, runner, signal } = call;
    const release = call.underSlot ? NO_SLOT : (this.#d.limiter.tryAcquire(tool.spec.id) ?? (await this.#d.limiter.acquire(tool.spec.id, signal)));
    // An AbortController (and the DOMException its abort makes) costs more than a whole builtin call:
    // only runners that can be interrupted, and tools that wait, get a live one.
    const controller = runner.interruptible || waits ? new AbortController() : null;
    const { ctx, vfs, logs, effects } = this.#context(call, limits, controller?.signal ?? NEVER_ABORTED);
    let output: unknown;
    try {
      if (signal?.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call was cancelled before it started');
      output = controller ? await withDeadline(runner.run(ctx), limits.timeout_ms, controller, signal, tool.spec.id) : await runner.run(ctx);
    } catch (error) {
      this.#d.state.end(vfs.transaction);
      throw error;
    } finally {
      release();
      // Work a tool left running after it returned must stop too. With a reason made once: abort()
      // without one builds a DOMException per call (about 7 µs of the 13 an abort costs here).
      if (controller && !controller.signal.aborted) controller.abort(CALL_ENDED);
      this.#settle(call, vfs, logs);
    }
    try {
      const outputBytes = this.#check(tool, output, limits);
      // A call running alone must commit before anyone else; the others wait for it here.
      if (!alone && this.#gate.held && vfs.transaction.ops.length > 0) await this.#gate.passed(signal);
      return this.#commit(vfs, canLose && !effects.outside, signal, call.meta.run_id) ? { output, outputBytes, vfs } : null;
    } finally {
      this.#d.state.end(vfs.transaction);
    }
  }

  /** One run through a runner's `runSync`, in its slot, with nothing in between up to the commit. */
  #attemptSync(call: Execution, limits: CallLimits, release: () => void, canLose: boolean): Outcome | null {
    const { ctx, vfs, logs } = this.#context(call, limits, NEVER_ABORTED);
    try {
      if (call.signal?.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call was cancelled before it started');
      const output = (call.runner.runSync as (ctx: RunContext) => unknown)(ctx);
      const outputBytes = this.#check(call.tool, output, limits);
      return this.#commit(vfs, canLose, call.signal, call.meta.run_id) ? { output, outputBytes, vfs } : null;
    } finally {
      release();
      this.#settle(call, vfs, logs);
      this.#d.state.end(vfs.transaction);
    }
  }

  #context(
    call: Execution,
    limits: CallLimits,
    signal: AbortSignal,
    within?: RunScope,
  ): { ctx: RunContext; vfs: ToolVfs; logs: LogBuffer; effects: RunScope['effects'] } {
    const logs = new LogBuffer(this.#d.policy.log_bytes, call.onLog);
    const vfs = new ToolVfs(within?.transaction ?? this.#d.state.begin(), call.tool.declared, call.grants, call.denied);
    const capabilities = call.runner.capabilities;
    const composite = call.steps && capabilities?.includes('steps');
    const calling = call.calls && capabilities?.includes('calls');
    // One flag for a whole tree of composite calls: an outside effect anywhere in it keeps the
    // outermost run from running again.
    const effects = within?.effects ?? { outside: false };
    const scope = (): RunScope => ({
      transaction: vfs.transaction,
      grants: call.grants,
      signal,
      deadline: performance.now() + limits.timeout_ms,
      changes: vfs.changes,
      effects,
    });
    const ctx: RunContext = {
      tool: call.tool,
      input: call.input,
      limits,
      signal,
      runId: call.meta.run_id,
      traceId: call.meta.trace_id,
      vfs,
      history: call.runner.capabilities?.includes('history') ? this.#d.state : null,
      log: (level, message) => logs.push(level, message),
      ...(call.onLog ? { streamLogs: true } : {}),
      ...(call.onProgress ? { progress: call.onProgress } : {}),
      intrusion: call.intrusion,
      meta: call.meta,
      steps: composite ? call.steps?.(scope()) : null,
      calls: calling ? call.calls?.(scope()) : null,
      catalog: call.catalog && call.runner.capabilities?.includes('catalog') ? call.catalog : null,
    };
    return { ctx, vfs, logs, effects };
  }

  /** The end of a run, whatever became of it: its logs into `meta`, and its view of the VFS closed. */
  #settle(call: Execution, vfs: ToolVfs, logs: LogBuffer): void {
    if (logs.lines.length > 0) call.meta.logs = logs.lines;
    if (logs.dropped > 0) call.meta.logs_dropped = logs.dropped;
    // Whatever the tool left running can no longer reach the VFS through this call.
    vfs.seal();
  }

  /**
   * Runs one step of a composite call (a macro) in that call's transaction, under its concurrency slot,
   * deadline and signal, its output checked like any run's. Nothing is committed here: the composite
   * call commits all its steps at once or none, and a CONFLICT runs the whole composite call again.
   */
  async runStep(call: Execution, scope: RunScope): Promise<Outcome> {
    const { tool, runner, limits, signal } = call;
    call.runs.count = 1;
    // A builtin that waits (shell.run, system.exec) gets a deadline as an interruptible runner's call does.
    const waits = runner.asyncTools?.has(tool.spec.id) === true;
    const controller = runner.interruptible || waits ? new AbortController() : null;
    const { ctx, vfs, logs } = this.#context(call, limits, controller?.signal ?? NEVER_ABORTED, scope);
    // Marked before the run: an effect outside may have happened even when the step then fails.
    if (actsOutside(tool)) scope.effects.outside = true;
    // A step that outlives its composite call (a runner that cannot be stopped) must not write into a
    // transaction that has ended.
    const seal = () => vfs.seal();
    scope.signal.addEventListener('abort', seal, { once: true });
    try {
      if (signal?.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call was cancelled before it started');
      const sync = runner.runSync !== undefined && !waits;
      const output = sync
        ? (runner.runSync as (ctx: RunContext) => unknown)(ctx)
        : controller
          ? await withDeadline(runner.run(ctx), limits.timeout_ms, controller, signal, tool.spec.id)
          : await runner.run(ctx);
      const outputBytes = this.#check(tool, output, limits);
      const into = scope.changes;
      into.written.push(...vfs.changes.written);
      into.deleted.push(...vfs.changes.deleted);
      into.created_dirs.push(...vfs.changes.created_dirs);
      into.moved.push(...vfs.changes.moved);
      return { output, outputBytes, vfs };
    } finally {
      scope.signal.removeEventListener('abort', seal);
      if (controller && !controller.signal.aborted) controller.abort(CALL_ENDED);
      this.#settle(call, vfs, logs);
    }
  }

  /** Checks the output against the output limit and the tool's output_schema; returns its size. */
  #check(tool: Tool, output: unknown, limits: CallLimits): number {
    const outputBytes = checkOutput(output, { bytes: limits.output_bytes, depth: this.#d.policy.input_depth });
    if (tool.validateOutput) {
      const bad = tool.validateOutput(output);
      if (bad) {
        throw new ToolFailure('execution', 'INVALID_OUTPUT', `Output of ${tool.spec.id} does not match its output_schema: ${summarize(bad)}`, {
          details: { violations: bad },
        });
      }
    }
    return outputBytes;
  }

  /**
   * Only now, with the output accepted, do the call's VFS changes become visible and durable. False
   * when the commit lost a race and the call may run again.
   */
  #commit(vfs: ToolVfs, canLose: boolean, signal: AbortSignal | undefined, runId: string): boolean {
    if (signal?.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call was cancelled before its changes were committed');
    try {
      this.#d.state.commit(vfs.transaction, runId);
      return true;
    } catch (error) {
      if (canLose && error instanceof ToolFailure && error.code === 'CONFLICT') return false;
      throw error;
    }
  }
}

/** Waits `ms` before a call runs again; a cancelled call stops waiting. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(new ToolFailure('execution', 'CANCELLED', 'The call was cancelled before it could run again'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Races a runner's work against the wall-clock deadline and the caller's signal; aborts the runner on either. */
function withDeadline<T>(
  work: Promise<T>,
  timeoutMs: number,
  controller: AbortController,
  external: AbortSignal | undefined,
  tool: string,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      controller.abort();
      reject(new ToolFailure('execution', 'TIMEOUT', `${tool} did not finish within ${timeoutMs} ms`, { details: { timeout_ms: timeoutMs } }));
    }, timeoutMs);
    const onAbort = () => {
      controller.abort();
      reject(new ToolFailure('execution', 'CANCELLED', `The call of ${tool} was cancelled`));
    };
    if (external?.aborted) onAbort();
    else external?.addEventListener('abort', onAbort, { once: true });
    // Cleared before settling, in the reactions themselves: a `finally` would cost every call one more promise.
    const cleared = () => {
      clearTimeout(timer);
      external?.removeEventListener('abort', onAbort);
    };
    work.then(
      (value) => {
        cleared();
        resolve(value);
      },
      (error: unknown) => {
        cleared();
        reject(error);
      },
    );
  });
}

class LogBuffer {
  readonly lines: LogLine[] = [];
  dropped = 0;
  #left: number;
  readonly #tell: ((line: LogLine) => void) | undefined;

  constructor(max: number, tell?: (line: LogLine) => void) {
    this.#left = max;
    this.#tell = tell;
  }

  push(level: LogLine['level'], message: string): void {
    const text = String(message);
    if (this.#left <= 0) {
      this.dropped++;
      return;
    }
    const kept = text.length > this.#left ? `${text.slice(0, this.#left)}…` : text;
    this.#left -= kept.length;
    const line = { level, message: kept };
    this.lines.push(line);
    this.#tell?.(line);
  }
}
