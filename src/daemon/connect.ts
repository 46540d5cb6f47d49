/**
 * `connect()`: a project held by the workspace's daemon, reached from another process, with the
 * engine's own API (`ProjectHandle`). Every method is a request to the daemon's gateway over its Unix
 * socket (`/p/<project>/v1/…`); events come on its SSE stream. This module loads nothing of the engine
 * (its imports are Node's, the daemon's thin modules, the leaf modules of errors and events, and types).
 */
import { randomUUID } from 'node:crypto';
import type { ApprovalAnswer, ApprovalDecision, PendingApproval } from '../approvals/gate.js';
import type { CallTarget } from '../dispatcher.js';
import { type ErrorCode, type ErrorInfo, isRetryable, type Stage, ToolFailure } from '../errors.js';
import { EventBus } from '../events.js';
import type { ProjectCallOptions, ProjectDiffOptions, ProjectEvents, ProjectHandle, ToolDescription } from '../project-api.js';
import type { ErrResult, ToolResult } from '../result.js';
import type { SkillInfo } from '../skills/skill.js';
import type { DiffResult, RestoreResult } from '../vfs/history.js';
import type { SnapshotInfo } from '../vfs/state.js';
import { EventStream } from './event-stream.js';
import { DaemonError, type DaemonLink, ensureDaemon, findDaemon } from './link.js';
import { type SocketFetch, socketFetch } from './socket-fetch.js';
import { CLIENT_HEADER, TOOL_RESULT_TYPE } from './wire.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface ConnectOptions {
  /** The workspace folder: one daemon serves each workspace. */
  workspace: string;
  /** The project, a folder of the workspace. */
  project: string;
  /**
   * Names this client: its calls' caller, in events, approvals and the audit log, is `connect:<name>`.
   * 1-56 characters of `A-Z a-z 0-9 . _ : @ -`. Default: this process's pid.
   */
  name?: string;
  /** Start the workspace's daemon when none runs, now and when a call finds it stopped (default true). */
  start?: boolean;
  /** Where the daemon's folder is found (`XDG_RUNTIME_DIR`). Default `process.env`. */
  env?: Env;
}

const NAME = /^[A-Za-z0-9._:@-]{1,56}$/;

/** Connection errors that mean the request reached no daemon: nothing of it ran. */
const NOT_SENT: ReadonlySet<string> = new Set(['ENOENT', 'ECONNREFUSED', 'ENOTSOCK']);

function notSent(error: unknown): boolean {
  return NOT_SENT.has(String((error as NodeJS.ErrnoException | null)?.code));
}

/** The gateway's body for a run or an error it gives itself (src/surfaces/http/envelope.ts). */
interface Envelope {
  ok: boolean;
  tool_id: string | null;
  tool_run_id: string | null;
  output?: unknown;
  error?: { code: ErrorCode; stage: Stage; message: string; retryable: boolean; details?: Record<string, unknown> };
  meta?: { trace_id: string | null; duration_ms: number };
}

/** A project of the workspace's daemon, as a `ProjectHandle`. Made by `connect()`. */
export class ProjectClient implements ProjectHandle {
  readonly project: string;
  /** The workspace the daemon serves. */
  readonly workspace: string;
  /** The caller the daemon names for this client's calls: `connect:<name>`. */
  readonly caller: string;
  readonly #bus = new EventBus();
  readonly #stream: EventStream;
  readonly #start: boolean;
  readonly #env: Env;
  readonly #base: string;
  #link: DaemonLink | null = null;
  #fetch: SocketFetch | null = null;
  #eventsFrom: number | null = null;
  #closed = false;

  constructor(options: Required<Pick<ConnectOptions, 'workspace' | 'project'>> & { caller: string; start: boolean; env: Env }) {
    this.project = options.project;
    this.workspace = options.workspace;
    this.caller = options.caller;
    this.#start = options.start;
    this.#env = options.env;
    this.#base = `/p/${encodeURIComponent(options.project)}`;
    this.#stream = new EventStream(this.#bus, (lastId, signal) => this.#openEvents(lastId, signal));
  }

  /** The engine's events, delivered from the daemon's stream while this has listeners. */
  get events(): ProjectEvents {
    return this.#bus;
  }

  /** The daemon this client last reached (null before the first request, or once it stopped). */
  get daemon(): DaemonLink | null {
    return this.#link;
  }

  /** Events the daemon no longer held when the stream came back after a break. */
  get missedEvents(): number {
    return this.#stream.missed;
  }

  async call<T = unknown>(id: CallTarget, input: unknown, options: ProjectCallOptions = {}): Promise<ToolResult<T>> {
    const started = Date.now();
    // Chosen here when the caller gives none, so that a call whose answer is lost can still be found.
    const traceId = options.trace_id ?? randomUUID();
    const tool = typeof id === 'string' ? id : `capability:${String((id as { capability?: unknown })?.capability)}`;
    const fail = (stage: Stage, code: ErrorCode, message: string): ErrResult => ({
      ok: false,
      error: { type: 'ToolError', tool, stage, code, message, retryable: isRetryable(code) },
      meta: { tool, run_id: '', trace_id: traceId, duration_ms: Date.now() - started },
    });
    if (this.#closed) return fail('transport', 'UNAVAILABLE', 'This client is closed; connect() again');
    if (options.signal?.aborted) return fail('execution', 'CANCELLED', 'The call was cancelled before it started');
    const capability = typeof id === 'object' && id !== null ? (id as { capability?: unknown }).capability : undefined;
    if (typeof id !== 'string' && typeof capability !== 'string') {
      return fail('validation', 'INVALID_INPUT', 'A call names a tool id or { capability: "<name>" }');
    }
    let body: string;
    try {
      body = JSON.stringify({
        input,
        trace_id: traceId,
        ...(options.timeout_ms !== undefined ? { timeout_ms: options.timeout_ms } : {}),
        ...(options.grants !== undefined ? { grants: options.grants } : {}),
        ...(options.approval !== undefined ? { approval: options.approval } : {}),
      });
    } catch (error) {
      return fail('validation', 'INVALID_INPUT', `The input cannot be sent to the daemon as JSON: ${(error as Error).message}`);
    }
    const path =
      typeof id === 'string' ? `/v1/tools/${encodeURIComponent(id)}:run` : `/v1/capabilities/${encodeURIComponent(capability as string)}:run`;
    // A listener added before the call sees its events: the stream is open before the call is sent.
    await this.#stream.ready;
    let status = 0;
    let text: string;
    let type: string | null = null;
    try {
      const response = await this.#send(path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: TOOL_RESULT_TYPE },
        body,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      status = response.status;
      type = response.headers.get('content-type');
      text = await response.text();
    } catch (error) {
      if (options.signal?.aborted) {
        return fail(
          'execution',
          'CANCELLED',
          'The call was cancelled: its request was closed, and the daemon cancels a call whose client went away (one that had already committed stays committed)',
        );
      }
      if (error instanceof DaemonError) return fail('transport', 'UNAVAILABLE', error.message);
      if (notSent(error)) return fail('transport', 'UNAVAILABLE', `No Arium daemon answers for ${this.workspace}; the call did not run`);
      const pid = this.#link?.pid;
      this.#lost();
      return fail(
        'transport',
        'UNAVAILABLE',
        `The Arium engine (daemon${pid ? ` pid ${pid}` : ''}) stopped before it answered: whether the call committed is unknown (if it ran, its trace_id ${traceId} is in the events and the audit log)`,
      );
    }
    return decodeResult<T>(text, status, type, tool, traceId);
  }

  async tools(): Promise<ToolDescription[]> {
    return (await this.#ask<{ tools: ToolDescription[] }>('GET', '/v1/tools')).tools;
  }

  async tool(id: string): Promise<ToolDescription | undefined> {
    try {
      return await this.#ask<ToolDescription>('GET', `/v1/tools/${encodeURIComponent(id)}`);
    } catch (error) {
      if (error instanceof ToolFailure && error.code === 'UNKNOWN_TOOL') return undefined;
      throw error;
    }
  }

  /** The skills the daemon's `surfaces.http` profile offers (`GET /v1/skills`). */
  async skills(): Promise<SkillInfo[]> {
    return (await this.#ask<{ skills: SkillInfo[] }>('GET', '/v1/skills')).skills;
  }

  async skill(name: string): Promise<(SkillInfo & { body: string }) | undefined> {
    try {
      return await this.#ask<SkillInfo & { body: string }>('GET', `/v1/skills/${encodeURIComponent(name)}`);
    } catch (error) {
      if (error instanceof ToolFailure && error.code === 'NOT_FOUND') return undefined;
      throw error;
    }
  }

  /** A call of `vfs.snapshot` by this client: with the daemon's `surfaces.http` grants, through approvals. */
  snapshot(options: { label?: string; message?: string } = {}): Promise<SnapshotInfo> {
    return this.#ask<SnapshotInfo>('POST', '/v1/snapshots', options);
  }

  async snapshots(): Promise<SnapshotInfo[]> {
    return (await this.#ask<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots')).snapshots;
  }

  diff(from?: string, to?: string, options: ProjectDiffOptions = {}): Promise<DiffResult> {
    const query = new URLSearchParams();
    if (from !== undefined) query.set('from', from);
    if (to !== undefined) query.set('to', to);
    if (options.path !== undefined) query.set('path', options.path);
    if (options.file !== undefined) query.set('file', options.file);
    if (options.stat_only === true) query.set('stat', 'true');
    const search = query.toString();
    return this.#ask<DiffResult>('GET', `/v1/diff${search ? `?${search}` : ''}`);
  }

  /** A call of `vfs.restore` by this client, as `snapshot` is. */
  async restore(ref: string): Promise<RestoreResult> {
    const { restored, backup, written, deleted } = await this.#ask<RestoreResult>('POST', '/v1/restore', { ref });
    return { restored, backup, written, deleted };
  }

  async approvals(): Promise<PendingApproval[]> {
    return (await this.#ask<{ approvals: PendingApproval[] }>('GET', '/v1/approvals')).approvals;
  }

  approve(runId: string, answer: { by: string }): Promise<ApprovalDecision> {
    return this.#ask<ApprovalDecision>('POST', `/v1/approvals/${encodeURIComponent(runId)}`, { decision: 'approve', by: answer.by });
  }

  deny(runId: string, answer: ApprovalAnswer): Promise<ApprovalDecision> {
    return this.#ask<ApprovalDecision>('POST', `/v1/approvals/${encodeURIComponent(runId)}`, {
      decision: 'deny',
      by: answer.by,
      ...(answer.reason !== undefined ? { reason: answer.reason } : {}),
    });
  }

  /** Ends the event stream; later calls fail `UNAVAILABLE`. The daemon and its project go on. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#stream.stop();
  }

  /** Checks that the daemon serves the project (and has it opened), for `connect()`. */
  async opened(): Promise<void> {
    await this.#reach(this.#start);
    await this.#ask('GET', '/v1/project');
  }

  async #reach(start: boolean): Promise<SocketFetch> {
    if (this.#fetch) return this.#fetch;
    const link = start ? await ensureDaemon(this.workspace, { env: this.#env }) : await findDaemon(this.workspace, this.#env);
    if (!link) throw new DaemonError('UNAVAILABLE', `No Arium daemon runs for ${this.workspace}`);
    this.#link = link;
    this.#fetch = socketFetch(link.socket, { [CLIENT_HEADER]: this.caller });
    return this.#fetch;
  }

  #lost(): void {
    this.#link = null;
    this.#fetch = null;
  }

  /**
   * A request to the daemon. One that reached no daemon (it stopped, its socket is gone) is sent once
   * more to the daemon found, or started, then: nothing of it ran.
   */
  async #send(path: string, init: RequestInit): Promise<Response> {
    const url = `http://localhost${this.#base}${path}`;
    try {
      return await (await this.#reach(this.#start))(url, init);
    } catch (error) {
      if (!notSent(error)) throw error;
      this.#lost();
      return await (await this.#reach(this.#start))(url, init);
    }
  }

  /** A request answered with JSON; an error answer is thrown as the engine throws it (`ToolFailure`). */
  async #ask<T>(method: string, path: string, body?: unknown): Promise<T> {
    if (this.#closed) throw new ToolFailure('transport', 'UNAVAILABLE', 'This client is closed; connect() again');
    let response: Response;
    let text: string;
    try {
      response = await this.#send(path, {
        method,
        ...(body !== undefined ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
      });
      text = await response.text();
    } catch (error) {
      if (error instanceof DaemonError) throw new ToolFailure('transport', 'UNAVAILABLE', error.message, { cause: error });
      this.#lost();
      throw new ToolFailure(
        'transport',
        'UNAVAILABLE',
        `The Arium daemon of ${this.workspace} did not answer ${method} ${path}: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new ToolFailure(
        'transport',
        'INTERNAL',
        `The Arium daemon answered ${method} ${path} with ${response.status} and a body that is not JSON`,
      );
    }
    if (response.ok) return parsed as T;
    const error = (parsed as Envelope).error;
    if (!error) throw new ToolFailure('transport', 'INTERNAL', `The Arium daemon answered ${method} ${path} with ${response.status} and no error`);
    throw new ToolFailure(error.stage, error.code, error.message, error.details ? { details: error.details } : {});
  }

  async #openEvents(lastId: number | null, signal: AbortSignal): Promise<Response> {
    // The stream never starts a daemon: a call does, when this client may.
    const fetch = await this.#reach(false);
    const from = this.#link?.pid ?? null;
    if (from !== this.#eventsFrom) {
      if (this.#eventsFrom !== null) {
        this.#stream.fromFirst();
        lastId = 0;
      }
      this.#eventsFrom = from;
    }
    try {
      return await fetch(`http://localhost${this.#base}/v1/events`, {
        headers: lastId === null ? {} : { 'last-event-id': String(lastId) },
        signal,
      });
    } catch (error) {
      if (notSent(error)) this.#lost();
      throw error;
    }
  }
}

/** The daemon's answer to a run as the engine's result: its own when it sent it, else the envelope's fields. */
function decodeResult<T>(text: string, status: number, type: string | null, tool: string, traceId: string): ToolResult<T> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return transportFailure(tool, traceId, 'INTERNAL', `The Arium daemon answered the call with ${status} and a body that is not JSON`);
  }
  if (type?.startsWith(TOOL_RESULT_TYPE)) return parsed as ToolResult<T>;
  // An error the gateway gave before the call reached the engine (its schema, an unknown tool).
  const envelope = parsed as Envelope;
  const error = envelope.error;
  if (!error) return transportFailure(tool, traceId, 'INTERNAL', `The Arium daemon answered the call with ${status} and no result`);
  const info: ErrorInfo = {
    type: 'ToolError',
    tool: envelope.tool_id ?? tool,
    stage: error.stage,
    code: error.code,
    message: error.message,
    retryable: error.retryable,
  };
  if (error.details !== undefined) info.details = error.details;
  return {
    ok: false,
    error: info,
    meta: {
      tool: envelope.tool_id ?? tool,
      run_id: envelope.tool_run_id ?? '',
      trace_id: envelope.meta?.trace_id ?? traceId,
      duration_ms: envelope.meta?.duration_ms ?? 0,
    },
  };
}

function transportFailure(tool: string, traceId: string, code: ErrorCode, message: string): ErrResult {
  return {
    ok: false,
    error: { type: 'ToolError', tool, stage: 'transport', code, message, retryable: isRetryable(code) },
    meta: { tool, run_id: '', trace_id: traceId, duration_ms: 0 },
  };
}

/**
 * The project `project` of the workspace's daemon, with the engine's API: finds the daemon (starts it
 * when `start`, the default, allows), checks that it serves the project, and returns its client.
 * Throws `DaemonError` when no daemon can be reached, a `ToolFailure` (`NOT_FOUND`) for a project the
 * workspace does not have, and `TypeError` for bad options.
 */
export async function connect(options: ConnectOptions): Promise<ProjectClient> {
  if (typeof options?.workspace !== 'string' || options.workspace === '') throw new TypeError('connect() needs { workspace: "<folder>" }');
  if (typeof options.project !== 'string' || options.project === '') throw new TypeError('connect() needs { project: "<name>" }');
  const name = options.name ?? String(process.pid);
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TypeError(`connect() name must be 1-56 characters of A-Z a-z 0-9 . _ : @ - (got ${JSON.stringify(name)})`);
  }
  const client = new ProjectClient({
    workspace: options.workspace,
    project: options.project,
    caller: `connect:${name}`,
    start: options.start ?? true,
    env: options.env ?? process.env,
  });
  await client.opened();
  return client;
}
