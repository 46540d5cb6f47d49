import { ToolFailure } from '../errors.js';
import type { ApprovalResolvedEvent, EventBus } from '../events.js';
import { forEvent } from '../payload.js';
import type { ApprovalRules, MatchedRule } from './rules.js';

/**
 * Where a call that needs a person's approval waits. The dispatcher asks here after validation and the
 * permission gate and before the call takes a concurrency slot or opens a VFS transaction: a waiting
 * call holds nothing another call needs, and nothing of it has run or been written.
 */

/** One call waiting for an answer, as `engine.approvals()` and `GET /v1/approvals` show it. */
export interface PendingApproval {
  run_id: string;
  trace_id: string;
  /** The tool's id. */
  tool: string;
  /** The input, secrets scrubbed and secret-looking keys masked, cut like an event's. */
  input: unknown;
  caller: string | null;
  rule: MatchedRule;
  requested_at: string;
  expires_at: string;
}

/** An answer: who gives it and, for a denial, why. */
export interface ApprovalAnswer {
  by: string;
  reason?: string;
}

/** How an approval ended. */
export interface ApprovalDecision {
  run_id: string;
  tool: string;
  outcome: ApprovalResolvedEvent['outcome'];
  by: string | null;
  reason: string | null;
  at: string;
}

export interface ApprovalGateOptions {
  bus: EventBus;
  rules: ApprovalRules;
  timeout_ms: number;
  max_pending: number;
  remembered: number;
  /** The policy's `event_payload_bytes`: the shown input is cut to it. */
  payload_bytes: number;
  /**
   * Replaces the project's secret values by `[secret:NAME]`: the input a call waits with has the values
   * of its `{"$secret": NAME}` references, and every place that shows it (the list, the events, an MCP
   * elicitation, a terminal prompt) gets it scrubbed, before it is cut.
   */
  scrub: <T>(value: T) => T;
}

export interface ApprovalRequest {
  runId: string;
  traceId: string;
  tool: string;
  input: unknown;
  caller: string | null;
  rule: MatchedRule;
  signal: AbortSignal | undefined;
  /** The call comes approved already (`arium call --approve`): who approved it. */
  preapproved?: ApprovalAnswer | undefined;
  /** Told when the call starts to wait (a surface that asks a person itself: a terminal, MCP elicitation). */
  onPending?: ((pending: PendingApproval) => void) | undefined;
}

interface Waiting {
  pending: PendingApproval;
  settle: (outcome: ApprovalDecision['outcome'], answer: ApprovalAnswer | null) => ApprovalDecision;
}

const BY_CHARS = 200;
const REASON_CHARS = 2000;

export class ApprovalGate {
  readonly #o: ApprovalGateOptions;
  readonly #waiting = new Map<string, Waiting>();
  readonly #resolved = new Map<string, ApprovalDecision>();
  #closed = false;

  constructor(options: ApprovalGateOptions) {
    this.#o = options;
  }

  /** The rule that makes a call of `tool` with `input` wait for approval, or null. */
  needs(tool: string, input: unknown): MatchedRule | null {
    return this.#o.rules.size === 0 ? null : this.#o.rules.match(tool, input);
  }

  pending(): PendingApproval[] {
    return [...this.#waiting.values()].map((w) => structuredClone(w.pending));
  }

  /** Resolves when the call is approved; throws the call's failure otherwise. */
  wait(request: ApprovalRequest): Promise<ApprovalDecision> {
    const { bus, timeout_ms } = this.#o;
    const preapproved = request.preapproved === undefined ? null : checkAnswer(request.preapproved, 'approval');
    const requested = new Date();
    const pending: PendingApproval = {
      run_id: request.runId,
      trace_id: request.traceId,
      tool: request.tool,
      input: forEvent(this.#o.scrub(request.input), this.#o.payload_bytes),
      caller: request.caller,
      rule: request.rule,
      requested_at: requested.toISOString(),
      expires_at: new Date(requested.getTime() + timeout_ms).toISOString(),
    };
    if (!preapproved && this.#closed) {
      // A call that reaches the gate while the engine closes would wait for an answer nobody can give.
      return Promise.reject(
        new ToolFailure('permission', 'APPROVAL_DENIED', `${request.tool} needs approval and the engine is closing; it did not run`, {
          details: { run_id: request.runId, outcome: 'closed', by: null, reason: null },
        }),
      );
    }
    if (!preapproved && this.#waiting.size >= this.#o.max_pending) {
      return Promise.reject(
        new ToolFailure(
          'permission',
          'BUSY',
          `${request.tool} needs approval and ${this.#o.max_pending} calls already wait for one; try again later`,
          {
            details: { run_id: request.runId, pending: this.#waiting.size },
          },
        ),
      );
    }
    bus.publish({ type: 'ApprovalRequested', at: pending.requested_at, ...pendingFields(pending) });
    if (preapproved) {
      const decision = this.#finish(pending, 'approved', preapproved, true);
      return Promise.resolve(decision);
    }
    return new Promise<ApprovalDecision>((resolve, reject) => {
      const signal = request.signal;
      const onAbort = () => settle('cancelled', null);
      const timer = setTimeout(() => settle('timed_out', null), timeout_ms);
      const settle = (outcome: ApprovalDecision['outcome'], answer: ApprovalAnswer | null): ApprovalDecision => {
        this.#waiting.delete(pending.run_id);
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const decision = this.#finish(pending, outcome, answer, false);
        if (outcome === 'approved') resolve(decision);
        else reject(failure(decision, timeout_ms));
        return decision;
      };
      this.#waiting.set(pending.run_id, { pending, settle });
      if (signal?.aborted) {
        settle('cancelled', null);
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      if (request.onPending) {
        try {
          request.onPending(structuredClone(pending));
        } catch {
          // A surface that fails to ask leaves the approval pending for the other surfaces and the timeout.
        }
      }
    });
  }

  approve(runId: unknown, answer: unknown): ApprovalDecision {
    return this.#answer(runId, answer, 'approved');
  }

  deny(runId: unknown, answer: unknown): ApprovalDecision {
    return this.#answer(runId, answer, 'denied');
  }

  /** Ends every wait as a denial: the engine is closing. */
  close(): void {
    this.#closed = true;
    for (const waiting of [...this.#waiting.values()]) waiting.settle('closed', null);
  }

  #answer(runId: unknown, answer: unknown, outcome: 'approved' | 'denied'): ApprovalDecision {
    const verb = outcome === 'approved' ? 'approve' : 'deny';
    if (typeof runId !== 'string' || runId === '') {
      throw new ToolFailure('validation', 'INVALID_INPUT', `${verb}: the run id must be a non-empty string (engine.approvals() lists them)`, {
        details: { field: 'run_id' },
      });
    }
    const checked = checkAnswer(answer, verb);
    const waiting = this.#waiting.get(runId);
    if (waiting) return waiting.settle(outcome, checked);
    const done = this.#resolved.get(runId);
    if (done) {
      const who = done.by === null ? '' : ` by ${done.by}`;
      throw new ToolFailure(
        'validation',
        'ALREADY_RESOLVED',
        `The approval of run ${runId} was already resolved: ${done.outcome}${who} at ${done.at}`,
        {
          details: { ...done },
        },
      );
    }
    throw new ToolFailure(
      'validation',
      'NOT_FOUND',
      `No approval is pending for run ${clip(runId, 100)}: engine.approvals() (GET /v1/approvals, arium approvals) lists the pending ones`,
      { details: { run_id: clip(runId, 100) } },
    );
  }

  #finish(pending: PendingApproval, outcome: ApprovalDecision['outcome'], answer: ApprovalAnswer | null, preapproved: boolean): ApprovalDecision {
    const decision: ApprovalDecision = {
      run_id: pending.run_id,
      tool: pending.tool,
      outcome,
      by: answer?.by ?? null,
      reason: answer?.reason ?? null,
      at: new Date().toISOString(),
    };
    this.#resolved.set(pending.run_id, decision);
    if (this.#resolved.size > this.#o.remembered) {
      const oldest = this.#resolved.keys().next().value;
      if (oldest !== undefined) this.#resolved.delete(oldest);
    }
    this.#o.bus.publish({
      type: 'ApprovalResolved',
      at: decision.at,
      run_id: pending.run_id,
      trace_id: pending.trace_id,
      tool: pending.tool,
      outcome,
      by: decision.by,
      reason: decision.reason,
      requested_at: pending.requested_at,
      ...(preapproved ? { preapproved: true } : {}),
    });
    return decision;
  }
}

function pendingFields(p: PendingApproval) {
  return { run_id: p.run_id, trace_id: p.trace_id, tool: p.tool, input: p.input, caller: p.caller, rule: p.rule, expires_at: p.expires_at };
}

function checkAnswer(answer: unknown, verb: string): ApprovalAnswer {
  const given = (answer ?? {}) as { by?: unknown; reason?: unknown };
  if (typeof given !== 'object' || typeof given.by !== 'string' || given.by.trim() === '' || given.by.length > BY_CHARS) {
    throw new ToolFailure('validation', 'INVALID_INPUT', `${verb}: "by" must name who answers, 1-${BY_CHARS} characters (e.g. { by: "alice" })`, {
      details: { field: 'by' },
    });
  }
  if (given.reason !== undefined && (typeof given.reason !== 'string' || given.reason.length > REASON_CHARS)) {
    throw new ToolFailure('validation', 'INVALID_INPUT', `${verb}: "reason" must be a string of at most ${REASON_CHARS} characters`, {
      details: { field: 'reason' },
    });
  }
  return { by: given.by, ...(typeof given.reason === 'string' && given.reason !== '' ? { reason: given.reason } : {}) };
}

/** The failure a call ends with when its approval did not come. */
function failure(decision: ApprovalDecision, timeoutMs: number): ToolFailure {
  const details = { run_id: decision.run_id, outcome: decision.outcome, by: decision.by, reason: decision.reason, at: decision.at };
  switch (decision.outcome) {
    case 'timed_out':
      return new ToolFailure(
        'permission',
        'APPROVAL_TIMEOUT',
        `${decision.tool} needs approval and nobody gave it within ${timeoutMs} ms (approvals.timeout_ms), so it did not run`,
        { details: { ...details, timeout_ms: timeoutMs } },
      );
    case 'cancelled':
      return new ToolFailure('permission', 'CANCELLED', `The call of ${decision.tool} was cancelled while it waited for approval; it did not run`, {
        details,
      });
    case 'closed':
      return new ToolFailure('permission', 'APPROVAL_DENIED', `${decision.tool} did not run: the engine closed while the call waited for approval`, {
        details,
      });
    default:
      return new ToolFailure(
        'permission',
        'APPROVAL_DENIED',
        `${decision.tool} was denied by ${decision.by}${decision.reason ? `: ${decision.reason}` : ''}; it did not run`,
        { details },
      );
  }
}

function clip(text: string, chars: number): string {
  return text.length > chars ? `${text.slice(0, chars)}…` : text;
}
