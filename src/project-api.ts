/**
 * What an agent loop needs of a project, whichever process holds it: the in-process `Engine`
 * (src/engine.ts) and the client `connect()` returns (src/daemon/connect.ts), which forwards to the
 * workspace's daemon, both implement `ProjectHandle`. Code written against it runs on either. Types
 * only: the thin client imports this module and loads nothing of the engine by it.
 */
import type { EventEmitter } from 'node:events';
import type { ApprovalAnswer, ApprovalDecision, PendingApproval } from './approvals/gate.js';
import type { CallOptions, CallTarget } from './dispatcher.js';
import type { EngineEventMap } from './events.js';
import type { ToolResult } from './result.js';
import type { SkillInfo } from './skills/skill.js';
import type { ToolInfo } from './tool.js';
import type { DiffOptions, DiffResult, RestoreResult } from './vfs/history.js';
import type { SnapshotInfo } from './vfs/state.js';

/**
 * A value now (the engine answers in its own process) or later (the client asks the daemon): `await`
 * it either way.
 */
export type Awaitable<T> = T | Promise<T>;

/**
 * The options of a call that mean the same in-process and across the socket. The engine takes more
 * (`caller`, `offered`, `onApproval`, `onLog`): those are the host's, and a daemon's client cannot set them.
 */
export type ProjectCallOptions = Pick<CallOptions, 'grants' | 'trace_id' | 'timeout_ms' | 'signal' | 'approval'>;

/** The diff options that cross the socket (a `visible` filter is a function, and stays in its process). */
export type ProjectDiffOptions = Pick<DiffOptions, 'path' | 'file' | 'stat_only'>;

/** What every surface shows of a tool: what a caller needs, no host paths or sources. */
export type ToolDescription = Pick<
  ToolInfo,
  'id' | 'name' | 'description' | 'runner' | 'schema' | 'output_schema' | 'permissions' | 'examples' | 'limits' | 'provides'
>;

/** The engine's events, by channel (`invocation`, `result`, `error`, `security`, `registry`, `approval`, `event`). */
export type ProjectEvents = Pick<EventEmitter<EngineEventMap>, 'on' | 'once' | 'off' | 'listenerCount'>;

/** One project, held in this process or by the workspace's daemon. */
export interface ProjectHandle {
  /** The project's name in its workspace. */
  readonly project: string;
  /**
   * Engine events as they happen: the same event objects, on the same channels. The engine delivers
   * a call's events before the call resolves; a client gets them on a stream of their own, so they
   * may arrive just after the call's result.
   */
  readonly events: ProjectEvents;
  /** Calls a tool (by id or `{ capability }`); never throws: a failure is a result with `ok: false`. */
  call<T = unknown>(id: CallTarget, input: unknown, options?: ProjectCallOptions): Promise<ToolResult<T>>;
  tools(): Awaitable<ToolDescription[]>;
  tool(id: string): Awaitable<ToolDescription | undefined>;
  /** The project's skills this handle's surface offers (README "Skills"). */
  skills(): Awaitable<SkillInfo[]>;
  /** One skill with its body as written, or undefined when it is not offered. */
  skill(name: string): Awaitable<(SkillInfo & { body: string }) | undefined>;
  /** Saves the live tree as a snapshot. */
  snapshot(options?: { label?: string; message?: string }): Awaitable<SnapshotInfo>;
  /** Every snapshot, oldest first. */
  snapshots(): Awaitable<SnapshotInfo[]>;
  /** Compares `live` or snapshots (id, prefix, label, `latest`); default: newest snapshot → live. */
  diff(from?: string, to?: string, options?: ProjectDiffOptions): Awaitable<DiffResult>;
  /** Brings the live tree back to a snapshot, saving the live tree first so it can be undone. */
  restore(ref: string): Awaitable<RestoreResult>;
  /** Calls waiting for a person's approval, oldest first. */
  approvals(): Awaitable<PendingApproval[]>;
  /** Lets a waiting call run; throws a `ToolFailure` (`NOT_FOUND`, `ALREADY_RESOLVED`, `INVALID_INPUT`). */
  approve(runId: string, answer: { by: string }): Awaitable<ApprovalDecision>;
  /** Ends a waiting call as `APPROVAL_DENIED`; throws as `approve` does. */
  deny(runId: string, answer: ApprovalAnswer): Awaitable<ApprovalDecision>;
  /** The engine: closes it. A client: ends its event stream and its requests; the daemon goes on. */
  close(): Promise<void>;
}
