import { EventEmitter } from 'node:events';
import type { MatchedRule } from './approvals/rules.js';
import type { ErrorInfo } from './errors.js';
import type { LogLine } from './result.js';

/** Common fields of every event. */
interface BaseEvent {
  at: string;
  run_id: string;
  trace_id: string;
}

export interface ToolInvocationEvent extends BaseEvent {
  type: 'ToolInvocationEvent';
  tool: string;
  /** For a step of a macro: the run id of the macro's call (the step shares its trace id). */
  parent_run_id?: string;
  /** The input, secrets redacted and cut to the policy's `event_payload_bytes`. */
  input: unknown;
  caller: string | null;
}

export interface VfsChangeSummary {
  written: string[];
  deleted: string[];
  created_dirs: string[];
  moved: Array<{ from: string; to: string }>;
}

export interface ToolResultEvent extends BaseEvent {
  type: 'ToolResultEvent';
  tool: string;
  /** For a step of a macro: the run id of the macro's call (the step shares its trace id). */
  parent_run_id?: string;
  duration_ms: number;
  output_bytes: number;
  /** The input the tool ran with (the caller's, with the schema's defaults filled in), redacted and capped. */
  input: unknown;
  /** The output, secrets redacted and size-capped like the input. */
  output: unknown;
  vfs: VfsChangeSummary | null;
  /** How many times the tool ran: more than 1 when a run lost a race to another call's commit and ran again. */
  attempts: number;
  /** Lines the tool logged (bounded by the policy's `log_bytes`), when it logged any. */
  logs?: LogLine[];
  /** The remote worker that ran the call (remote runners only). */
  worker?: { id: string; host: string };
}

export interface ToolErrorEvent extends BaseEvent {
  type: 'ToolErrorEvent';
  tool: string;
  /** For a step of a macro: the run id of the macro's call (the step shares its trace id). */
  parent_run_id?: string;
  duration_ms: number;
  error: ErrorInfo;
  /** How many times the tool ran (0 when the call failed before it ran). */
  attempts: number;
  /** The input as the tool got it (defaults filled in), once the call passed validation. */
  input?: unknown;
  /** Lines the tool logged before it failed, when it logged any. */
  logs?: LogLine[];
  /** The remote worker that had the call, once one accepted it (remote runners only). */
  worker?: { id: string; host: string };
}

export interface SecurityEvent extends Omit<BaseEvent, 'run_id' | 'trace_id'> {
  type: 'SecurityEvent';
  /** The call's ids; null for a widening found by a reload, or a refused request, which belong to no call. */
  run_id: string | null;
  trace_id: string | null;
  /** The tool; for a refused request, the one its path names, or empty when it names none. */
  tool: string;
  /**
   * `denied`: a permission was missing; `intrusion`: the tool tried to leave its sandbox;
   * `widened`: a reloaded definition asks for more than the version it replaces, and is served;
   * `widening_refused`: the same, refused because the project says so (`permission_widening`);
   * `request_refused`: the HTTP gateway refused a request by its `Host` or `Origin` (DNS rebinding, a
   * cross-site page): `operation` is the method and path, `request` says which header; or the holder of
   * a project refused a request another gateway forwarded over NATS (unsigned, wrongly signed, stale or
   * replayed): `operation` names the subject, `reason` says why, and there is no `request`.
   */
  action: 'denied' | 'intrusion' | 'widened' | 'widening_refused' | 'request_refused';
  /** The permission that was missing, for `denied`. */
  permission: string | null;
  /** What the tool tried, e.g. `vfs.write /etc/x` or `import node:fs`; for a widening, `reload tools/x.json`. */
  operation: string | null;
  reason: string;
  /** For a widening: the permissions before and after, and the ones the old version did not cover. */
  previous_permissions?: string[];
  permissions?: string[];
  added_permissions?: string[];
  /** For `request_refused`: the header refused, its value (cut to 200 characters), and the client's address. */
  request?: { header: 'host' | 'origin'; value: string; address: string };
}

export interface RegistryProblem {
  file: string;
  message: string;
  /** Where in the file, when known (a JSON pointer or line:column). */
  at?: string;
  /** The tool id the file declares, when it could be read. */
  id?: string;
  /** True when the engine still serves the last good version of this file. */
  stale?: boolean;
  /**
   * Set when the tool loads and runs but a model API cannot take its schema (`openai`, `anthropic`,
   * `gemini`, `mcp`): the exports and MCP's tools/list leave it out for that vendor.
   */
  vendor?: string;
}

/** The project's skills (`skills/<name>/SKILL.md`) changed: by name, and every skill problem now. */
export interface SkillsChangeEvent {
  type: 'SkillsChangeEvent';
  at: string;
  run_id: null;
  trace_id: null;
  added: string[];
  updated: string[];
  removed: string[];
  problems: RegistryProblem[];
}

export interface RegistryChangeEvent {
  type: 'RegistryChangeEvent';
  at: string;
  run_id: null;
  trace_id: null;
  added: string[];
  updated: string[];
  removed: string[];
  problems: RegistryProblem[];
}

/** A call that an `approvals` rule matched waits for a person: nothing of it has run yet. */
export interface ApprovalRequestedEvent extends BaseEvent {
  type: 'ApprovalRequested';
  /** The tool's id (approval is keyed on it, never on a display name). */
  tool: string;
  /** The input the tool would run with, secret-looking keys masked and cut like every event's. */
  input: unknown;
  /** Who asks: the call's `caller` option (e.g. `mcp`, `http:127.0.0.1`, `cli:alice`), or null. */
  caller: string | null;
  /** The rule that matched. */
  rule: MatchedRule;
  /** When the wait ends as a denial (`APPROVAL_TIMEOUT`) if nobody answers. */
  expires_at: string;
}

/** How an approval ended. The call runs only after `approved`. */
export interface ApprovalResolvedEvent extends BaseEvent {
  type: 'ApprovalResolved';
  tool: string;
  /**
   * `approved` / `denied`: a person answered (`by`); `timed_out`: nobody did in time; `cancelled`: the
   * call's signal aborted; `closed`: the engine closed while it waited.
   */
  outcome: 'approved' | 'denied' | 'timed_out' | 'cancelled' | 'closed';
  /** Who answered, as the answer said; null when nobody did. */
  by: string | null;
  reason: string | null;
  /** When the approval was asked for (`at` is when it ended). */
  requested_at: string;
  /** True when the call came already approved (`arium call --approve`): no one was asked while it waited. */
  preapproved?: boolean;
}

export type EngineEvent =
  | ToolInvocationEvent
  | ToolResultEvent
  | ToolErrorEvent
  | SecurityEvent
  | RegistryChangeEvent
  | SkillsChangeEvent
  | ApprovalRequestedEvent
  | ApprovalResolvedEvent;

/** Typed event map: each event under its own name, and every event again under `event`. */
export interface EngineEventMap {
  invocation: [ToolInvocationEvent];
  result: [ToolResultEvent];
  error: [ToolErrorEvent];
  security: [SecurityEvent];
  registry: [RegistryChangeEvent];
  skills: [SkillsChangeEvent];
  /** Both approval events, requested and resolved. */
  approval: [ApprovalRequestedEvent | ApprovalResolvedEvent];
  event: [EngineEvent];
}

const CHANNEL: Record<EngineEvent['type'], keyof EngineEventMap> = {
  ToolInvocationEvent: 'invocation',
  ToolResultEvent: 'result',
  ToolErrorEvent: 'error',
  SecurityEvent: 'security',
  RegistryChangeEvent: 'registry',
  SkillsChangeEvent: 'skills',
  ApprovalRequested: 'approval',
  ApprovalResolved: 'approval',
};

/** Every event type, e.g. for a reader of the audit log to tell an event from a damaged line. */
export const ENGINE_EVENT_TYPES = Object.freeze(Object.keys(CHANNEL) as Array<EngineEvent['type']>);

type Sink = (event: EngineEvent) => void;

/**
 * The engine's event bus. Emitting never throws into the pipeline: a listener that throws is reported
 * once as a process warning and the call goes on. `EventEmitter` treats an `error` event with no
 * listener as fatal, so events are delivered only to channels that have listeners.
 */
export class EventBus extends EventEmitter<EngineEventMap> {
  readonly #sinks: Sink[] = [];
  #warned = false;
  /** Scrubs the project's secrets from every event, so listeners, the audit log and every surface see none. */
  readonly #scrubber: { active: boolean; value<T>(value: T): T } | null;

  constructor(scrubber: { active: boolean; value<T>(value: T): T } | null = null) {
    super();
    this.#scrubber = scrubber?.active ? scrubber : null;
  }

  /** Cheap check that lets the dispatcher skip building events nobody reads. */
  get active(): boolean {
    return this.#sinks.length > 0 || this.listenerCount('event') > 0 || this.eventNames().length > 0;
  }

  addSink(sink: Sink): void {
    this.#sinks.push(sink);
  }

  publish(given: EngineEvent): void {
    const event = this.#scrubber ? this.#scrubber.value(given) : given;
    const channel = CHANNEL[event.type];
    for (const sink of this.#sinks) this.#guard(() => sink(event));
    if (this.listenerCount(channel) > 0) this.#guard(() => (this.emit as (n: string, e: EngineEvent) => boolean)(channel, event));
    if (this.listenerCount('event') > 0) this.#guard(() => this.emit('event', event));
  }

  #guard(deliver: () => unknown): void {
    try {
      deliver();
    } catch (error) {
      if (!this.#warned) {
        this.#warned = true;
        process.emitWarning(`An Arium event listener threw and was ignored: ${describe(error)}`);
      }
    }
  }
}

/** Text for whatever a listener threw. Reading it may itself throw (a revoked Proxy, a throwing toString). */
function describe(thrown: unknown): string {
  try {
    return String((thrown as Error)?.message ?? thrown);
  } catch {
    return 'a value that cannot be printed';
  }
}
