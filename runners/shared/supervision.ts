import { ToolFailure } from '../../src/errors.js';
import type { RunContext } from '../../src/runner.js';
import { endsCall, isForwarded, isVfsOp, runVfsOp, toWire, type WireError } from './vfs-ops.js';

/**
 * What both sandbox processes (the JS one, the Python fork server) need to supervise the calls they
 * run, kept once: each host keeps only its transport, its start command and what its sandbox's
 * answers mean.
 */

/** One call a sandbox process is running. Hosts add their own fields (`E`). */
export interface CallEntry {
  readonly ctx: RunContext;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  /** The caller has its answer (a result, or a failure settled early); the sandbox may still owe its end. */
  settled: boolean;
  stopTimer: NodeJS.Timeout | null;
  readonly onAbort: () => void;
}

export interface SupervisionHooks {
  /** How long a sandbox gets to end a call that was settled early before the whole process is killed. */
  graceMs: number;
  /** Kills the process (a sandbox that cannot stop a tool cannot be trusted to go on). */
  kill(): void;
  /** Asks the sandbox to stop a call the engine gave up on (deadline, cancel). */
  stop(id: number): void;
  /** The process has calls: it keeps the engine's event loop alive. */
  busy(): void;
  /** It has none (hosts may have other reasons to stay busy). */
  idle(): void;
}

export class SupervisedCalls<E extends object = object> {
  readonly #calls = new Map<number, CallEntry & E>();
  readonly #hooks: SupervisionHooks;
  #seq = 0;

  constructor(hooks: SupervisionHooks) {
    this.#hooks = hooks;
  }

  get size(): number {
    return this.#calls.size;
  }

  /** Calls the sandbox has not answered yet (settled early or not). */
  values(): IterableIterator<CallEntry & E> {
    return this.#calls.values();
  }

  get(id: number): (CallEntry & E) | undefined {
    return this.#calls.get(id);
  }

  has(id: number): boolean {
    return this.#calls.has(id);
  }

  /**
   * Registers a call and hands its id to `send`, which sends it to the sandbox. The promise settles with
   * the sandbox's answer (see `finish`), or early with a failure (`settle`, `failAll`).
   */
  open(ctx: RunContext, extra: E, send: (id: number) => void): Promise<unknown> {
    const id = ++this.#seq;
    return new Promise((resolve, reject) => {
      const entry = { ...extra, ctx, resolve, reject, settled: false, stopTimer: null, onAbort: () => this.#abort(id) } as CallEntry & E;
      this.#calls.set(id, entry);
      this.#hooks.busy();
      ctx.signal.addEventListener('abort', entry.onAbort, { once: true });
      send(id);
    });
  }

  /** The engine gave up on the call (deadline or cancel) and has its answer; the tool must stop. */
  #abort(id: number): void {
    const entry = this.#calls.get(id);
    if (!entry || entry.settled) return;
    this.settle(id, new ToolFailure('execution', 'CANCELLED', 'The call was stopped by the engine'));
    this.#hooks.stop(id);
  }

  /** Fails the call now; the sandbox still owes its end, and the process is killed if it does not come in time. */
  settle(id: number, failure: ToolFailure): void {
    const entry = this.#calls.get(id);
    if (!entry || entry.settled) return;
    entry.settled = true;
    entry.reject(failure);
    entry.stopTimer = setTimeout(() => {
      // The sandbox could not stop the tool (its event loop is stuck, say): only killing the process helps.
      if (this.#calls.has(id)) this.#hooks.kill();
    }, this.#hooks.graceMs);
    entry.stopTimer.unref();
  }

  /**
   * The sandbox ended the call: its entry, with timer and listener gone, or undefined for an unknown id.
   * The caller settles it (if `settled` is still false) from what the sandbox said.
   */
  finish(id: number): (CallEntry & E) | undefined {
    const entry = this.#calls.get(id);
    if (!entry) return undefined;
    this.#calls.delete(id);
    this.#release(entry);
    if (this.#calls.size === 0) this.#hooks.idle();
    return entry;
  }

  /** The process is gone: every call it still ran fails with what `failure` says (given how many ran). */
  failAll(failure: (entry: CallEntry & E, running: number) => ToolFailure): void {
    const running = [...this.#calls.values()].filter((e) => !e.settled).length;
    for (const entry of this.#calls.values()) {
      this.#release(entry);
      if (entry.settled) continue;
      entry.settled = true;
      entry.reject(failure(entry, running));
    }
    this.#calls.clear();
  }

  #release(entry: CallEntry): void {
    if (entry.stopTimer) clearTimeout(entry.stopTimer);
    entry.ctx.signal.removeEventListener('abort', entry.onAbort);
  }
}

export type VfsAnswer = { ok: true; value: unknown } | { ok: false; error: WireError; failure: ToolFailure | null };

/**
 * Runs one `ctx.vfs` request of a call on its permission-checked view. A failure that must end the
 * call (a denial, an engine fault: a tool must not catch one and go on) is settled at once and
 * `stop` asks the sandbox to stop the tool; the tool still gets the error as its answer. The answer is
 * a promise when the view is served by another process (a remote runner's worker forwards each request
 * to the engine that owns the VFS); hosts then answer when it settles, matched by the request's id.
 */
export function serveVfs(
  calls: SupervisedCalls,
  id: number,
  op: unknown,
  args: unknown,
  stop: (failure: ToolFailure) => void,
): VfsAnswer | Promise<VfsAnswer> {
  const entry = calls.get(id);
  if (!entry || entry.settled) return { ok: false, error: { code: 'CANCELLED', message: 'The call has ended' }, failure: null };
  if (!isVfsOp(op) || !Array.isArray(args)) return { ok: false, error: { code: 'INVALID_INPUT', message: 'Unknown VFS operation' }, failure: null };
  const vfs: unknown = entry.ctx.vfs;
  if (isForwarded(vfs)) {
    return vfs.forward(op, args).then(
      (value): VfsAnswer => ({ ok: true, value }),
      (error) => failed(calls, id, op, error, stop),
    );
  }
  try {
    return { ok: true, value: runVfsOp(entry.ctx.vfs, op, args) };
  } catch (error) {
    return failed(calls, id, op, error, stop);
  }
}

function failed(calls: SupervisedCalls, id: number, op: string, error: unknown, stop: (failure: ToolFailure) => void): VfsAnswer {
  const failure =
    error instanceof ToolFailure ? error : new ToolFailure('execution', 'INTERNAL', `ctx.vfs.${op} failed in the engine`, { cause: error });
  if (failure.code === 'INTERNAL' || endsCall(failure)) {
    const entry = calls.get(id);
    if (entry && !entry.settled) {
      calls.settle(id, failure);
      stop(failure);
    }
  }
  return { ok: false, error: toWire(failure), failure };
}

/** After a failed start, the failure calls get at once for a while, instead of one start per call. */
export class StartBackoff {
  #failed: { at: number; error: unknown } | null = null;
  readonly #ms: number;

  constructor(ms: number) {
    this.#ms = ms;
  }

  /** The last start's failure while it is recent, else null (a start may be tried). */
  blocking(): unknown | null {
    return this.#failed !== null && Date.now() - this.#failed.at < this.#ms ? this.#failed.error : null;
  }

  get failed(): boolean {
    return this.#failed !== null;
  }

  failedWith(error: unknown): void {
    this.#failed = { at: Date.now(), error };
  }

  succeeded(): void {
    this.#failed = null;
  }
}

/** The last `keep` characters of a process's stderr, for the messages of its failures. */
export function tail(kept: string, chunk: string, keep: number): string {
  return (kept + chunk).slice(-keep);
}
