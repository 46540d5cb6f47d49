// Over 500 lines: one sandbox process and everything that crosses its pipe (calls, programs, a
// runner's setup, ctx.vfs answers and their budget) share one message loop and one crash path.
import { type ChildProcess, fork } from 'node:child_process';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { ERROR_CODES, type ErrorCode, ToolFailure } from '../../src/errors.js';
import type { LogLine } from '../../src/result.js';
import type { RunContext } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { observe } from './protocol.js';
import type { FromWorker, ToolRef, ToWorker } from './sandbox-protocol.js';
import { SupervisedCalls, serveVfs, tail, type VfsAnswer } from './supervision.js';
import { uncaughtVfsCode, type WireError } from './vfs-ops.js';

/**
 * One isolated-vm sandbox process (a runner's worker/main.mjs, on the bootstrap of worker/sandbox.mjs)
 * and the calls it is running. The engine process never loads isolated-vm; when V8 aborts in here, only
 * this process dies, its calls fail, and the runner's pool (sandbox-pool.ts) starts another one.
 */

/** Which runner a sandbox serves, for what its failures say. */
export interface SandboxOwner {
  /** The runner's name (`js-runner`), given in failures' details. */
  runner: string;
  /** What its sandbox is called in messages (`JS`, as in "the JS sandbox process stopped"). */
  label: string;
}

export interface SandboxConfig extends SandboxOwner {
  workerPath: string;
  execArgv: string[];
  /** Passed to the worker as JSON in argv[2]. */
  workerConfig: Record<string, unknown>;
  /** The answer bytes the processes of one pool share (ANSWER_BYTES for them all); default one of its own. */
  answers?: AnswerBudget;
  /** A command the worker's Node starts under (taskset and its cores, affinity.ts), or none. */
  prefix?: readonly string[];
}

/**
 * Bytes of VFS answers on their way to the sandbox processes of one pool: the bound is the engine's
 * memory, so a pool of N processes holds ANSWER_BYTES in all, not N times it. A process whose requests
 * wait is woken when any process's answer is written out.
 */
export class AnswerBudget {
  bytes = 0;
  peak = 0;
  readonly #waiting = new Set<() => void>();

  take(bytes: number): void {
    this.bytes += bytes;
    if (this.bytes > this.peak) this.peak = this.bytes;
  }

  release(bytes: number): void {
    this.bytes -= bytes;
    for (const serve of this.#waiting) {
      if (this.bytes > ANSWER_BYTES) break;
      serve();
    }
  }

  /** `serve` runs whenever answer bytes are released, until the returned function is called. */
  watch(serve: () => void): () => void {
    this.#waiting.add(serve);
    return () => this.#waiting.delete(serve);
  }
}

export interface WorkerInfo {
  node: string;
  isolatedVm: string;
}

/** After asking the worker to stop a call, how long it may take before the process counts as stuck. */
const STOP_GRACE_MS = 2_000;
const STDERR_KEEP = 8_192;
const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODES);
const LEVELS: ReadonlySet<string> = new Set(['log', 'info', 'warn', 'error']);

/**
 * How many bytes of VFS answers may be on their way to the sandbox at once before its next requests
 * wait: each answer is a copy in this process until it is written out, and sixteen reads of a 60 MB
 * file at once took this process to 1.85 GB. Answers under SMALL_ANSWER are not counted.
 */
const ANSWER_BYTES = 16 * 1024 * 1024;
const SMALL_ANSWER = 64 * 1024;

/**
 * Largest blob the bulk pipe may announce. A write is at most one file (64 MiB by default, and the
 * quota can be raised), so this only stops a corrupted length from allocating gigabytes.
 */
const MAX_BLOB = 1024 * 1024 * 1024;

/** About how large an answer is on the channel: a file's text, or a listing's entries. */
function answerSize(payload: unknown): number {
  if (typeof payload === 'string') return payload.length;
  const entries = (payload as { entries?: unknown } | null)?.entries;
  return Array.isArray(entries) ? entries.length * 128 : 0;
}

export function toolRef(tool: Tool): ToolRef {
  if (!tool.entryPath || !tool.toolsDir) throw new ToolFailure('execution', 'INTERNAL', `${tool.spec.id} has no entry file`);
  // A worker's tool: its imports stay inside its own version of the tools folder, not any it was sent.
  return { entry: tool.entryPath, root: tool.root ? join(tool.toolsDir, tool.root) : tool.toolsDir };
}

/** isolated-vm could not be loaded in the sandbox process (not built for this Node, or broken): a setup problem. */
export class IsolatedVmUnloadable extends Error {
  override readonly name = 'IsolatedVmUnloadable';
}

/**
 * Serves one tool call of a code-mode program: `path` is the property path under `tools` (parts joined
 * by U+0000), `input` the input as JSON text. Resolves with the answer the program gets (a failed call
 * is an answer too); rejects with a ToolFailure that ends the whole program (a bound it went past).
 */
export type ToolCallServer = (path: string, input: string) => Promise<{ ok: true; value: unknown } | { ok: false; error: WireError }>;

/** What a call of a code-mode program adds to its entry: how its tool calls are served. */
interface ProgramEntry {
  tools?: ToolCallServer;
}

/** The module reference a program's call carries: it names no file, the worker builds the program's module. */
const PROGRAM_REF: ToolRef = Object.freeze({ entry: '', root: '' });

export class SandboxProcess {
  readonly ready: Promise<WorkerInfo>;
  /** Called once when the process is gone (crashed, stopped, or drained). */
  onExit: (() => void) | null = null;
  /** Called when the worker asks to be replaced (a catastrophic V8 error in one of its isolates). */
  onDrain: (() => void) | null = null;
  readonly #child: ChildProcess;
  readonly #owner: SandboxOwner;
  readonly #calls: SupervisedCalls<ProgramEntry> = new SupervisedCalls<ProgramEntry>({
    graceMs: STOP_GRACE_MS,
    kill: () => this.#child.kill('SIGKILL'),
    stop: (id) => this.#send({ t: 'abort', id, code: 'CANCELLED', message: 'The call was stopped by the engine' }),
    busy: () => this.#busy(),
    idle: () => this.#idle(),
  });
  readonly #probes = new Map<number, (value: Record<string, unknown>) => void>();
  #probeSeq = 0;
  /** Bytes of VFS answers handed to the IPC channels of the pool and not written out yet (see ANSWER_BYTES). */
  readonly #answers: AnswerBudget;
  readonly #unwatch: () => void;
  /** This process's part of the pool's answer bytes: released when written out, or all at its exit. */
  #owed = 0;
  /** VFS requests that wait while large answers are being written, in the order they came. */
  readonly #held: Array<Extract<FromWorker, { t: 'vfs' }>> = [];
  /**
   * Large writes come as raw bytes on a pipe of their own (the bulk pipe), not as base64 in the JSON
   * channel: a 64 MiB write took the engine through ~440 MiB of strings and copies that way. Each blob
   * is read straight into one buffer of its exact size, which the VFS then keeps as the file's bytes.
   * Blobs complete here in the order the worker sent them, matched to `vfs` messages in that order.
   */
  readonly #blobs: Buffer[] = [];
  readonly #blobHeader = Buffer.alloc(4);
  #blobHeaderFill = 0;
  #blob: Buffer | null = null;
  #blobFill = 0;
  #stderr = '';
  #exited = false;
  #draining = false;
  #stopping = false;
  #info: WorkerInfo | null = null;
  #unavailable: string | null = null;
  #closing: Promise<void> | null = null;

  constructor(config: SandboxConfig) {
    this.#owner = { runner: config.runner, label: config.label };
    this.#answers = config.answers ?? new AnswerBudget();
    this.#unwatch = this.#answers.watch(() => this.#serveHeld());
    // node:child_process, not execa: this process lives as long as the engine and is supervised here
    // (grace-period kills, exit reasons, restarts); execa's result promise and output buffering serve
    // a command that runs and ends, and would hold an always-pending promise for this one.
    // fork() runs `execPath ...execArgv worker`: with a prefix, that is `taskset --cpu-list N node ...`,
    // which becomes Node in the same process, IPC channel and all.
    const [prefixed, ...prefixArgs] = config.prefix ?? [];
    this.#child = fork(config.workerPath, [JSON.stringify({ ...config.workerConfig, label: config.label, bulkFd: 4 })], {
      ...(prefixed !== undefined ? { execPath: prefixed } : {}),
      execArgv: prefixed !== undefined ? [...prefixArgs, process.execPath, ...config.execArgv] : config.execArgv,
      // JSON costs a third less CPU per message than 'advanced' here; small bytes travel as flagged
      // base64, large writes on the bulk pipe (fd 4).
      serialization: 'json',
      // Tool code never sees this process's environment, but nothing in it should be there to leak.
      env: {},
      stdio: ['ignore', 'ignore', 'pipe', 'ipc', 'pipe'],
    });
    const bulk = this.#child.stdio[4] as Readable | null;
    bulk?.on('data', (chunk: Buffer) => this.#onBulk(chunk));
    bulk?.on('error', () => {});
    this.#child.stderr?.setEncoding('utf8');
    this.#child.stderr?.on('data', (chunk: string) => {
      this.#stderr = tail(this.#stderr, chunk, STDERR_KEEP);
    });
    this.ready = new Promise<WorkerInfo>((resolve, reject) => {
      this.#child.on('message', (message: FromWorker) => {
        observe('js.fromWorker', message);
        if (message?.t === 'ready') {
          this.#info = { node: String(message.node), isolatedVm: String(message.isolatedVm) };
          resolve(this.#info);
        } else if (message?.t === 'unavailable') {
          this.#unavailable = String(message.reason);
          reject(new IsolatedVmUnloadable(this.#unavailable));
        } else {
          this.#onMessage(message);
        }
      });
      this.#child.on('exit', (code, signal) => {
        this.#exited = true;
        this.#unwatch();
        // Answers not written out are not: the other processes of the pool may have the bytes.
        const owed = this.#owed;
        this.#owed = 0;
        if (owed > 0) this.#answers.release(owed);
        if (!this.#info && !this.#unavailable) {
          reject(
            new Error(
              `the ${this.#owner.label} sandbox process exited during start-up (${signal ?? `code ${code}`}): ${this.#stderr.trim().split('\n').pop() ?? ''}`,
            ),
          );
        }
        this.#failAll(code, signal);
        this.onExit?.();
      });
      this.#child.on('error', (error) => reject(error));
    });
    // Starting up is work: the engine's event loop stays alive until the worker is ready (or failed).
    this.ready.then(
      () => this.#idle(),
      () => {},
    );
  }

  /** False once the process is going away: new calls go to another one. */
  get accepting(): boolean {
    return !this.#exited && !this.#draining && !this.#stopping;
  }

  get info(): WorkerInfo | null {
    return this.#info;
  }

  get inFlight(): number {
    return this.#calls.size;
  }

  /** The most bytes of VFS answers that were on their way to the sandbox at once. */
  get answerPeak(): number {
    return this.#answers.peak;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /**
   * Runs a call; `ref` names the module to load instead of the tool's entry (its bundle); `setup` is
   * what the runner's worker needs beyond it to start the tool (plain JSON, passed through as it is).
   */
  call(ctx: RunContext, ref: ToolRef = toolRef(ctx.tool), setup?: Record<string, unknown>): Promise<unknown> {
    return this.#calls.open(ctx, {}, (id) => {
      const tool = ctx.tool;
      this.#send({
        t: 'call',
        id,
        tool: ref,
        input: ctx.input,
        // What the tool may know of its limits (ctx.limits): the same three fields as a Python tool's.
        limits: { timeout_ms: ctx.limits.timeout_ms, memory_mb: ctx.limits.memory_mb, output_bytes: ctx.limits.output_bytes },
        info: { tool: tool.spec.id, runId: ctx.runId, traceId: ctx.traceId },
        ...(ctx.streamLogs ? { stream_logs: true as const } : {}),
        ...(setup ? { setup } : {}),
        ...(tool.spec.context === 'persistent' ? { persistent: true as const } : {}),
      });
    });
  }

  /**
   * Runs a code-mode program (code.run) as the call `ctx` describes: `program` is the body of an async
   * function of `tools`, and each tool it calls is served by `tools`.
   */
  program(ctx: RunContext, program: string, tools: ToolCallServer): Promise<unknown> {
    return this.#calls.open(ctx, { tools }, (id) => {
      this.#send({
        t: 'call',
        id,
        tool: PROGRAM_REF,
        input: null,
        limits: { timeout_ms: ctx.limits.timeout_ms, memory_mb: ctx.limits.memory_mb, output_bytes: ctx.limits.output_bytes },
        info: { tool: ctx.tool.spec.id, runId: ctx.runId, traceId: ctx.traceId },
        ...(ctx.streamLogs ? { stream_logs: true as const } : {}),
        program,
      });
    });
  }

  prepare(tool: Tool, ref: ToolRef = toolRef(tool)): void {
    this.#send({ t: 'prepare', tool: ref, memoryMb: tool.spec.limits?.memory_mb ?? 128 });
  }

  /** Asks the worker for facts about itself (`stats`) or about its own confinement (`probe`, used by tests). */
  ask(kind: 'stats' | 'probe'): Promise<Record<string, unknown>> {
    const id = ++this.#probeSeq;
    return new Promise((resolve) => {
      this.#probes.set(id, resolve);
      this.#busy();
      this.#send({ t: kind, id });
    });
  }

  /** Takes no new calls and stops once the running ones are done. */
  retire(): void {
    this.#draining = true;
    this.#closeIfDrained();
  }

  forget(tool: Tool): void {
    if (tool.entryPath) this.#send({ t: 'forget', entry: tool.entryPath, tool: tool.spec.id });
  }

  /** Stops the process; calls still running fail with UNAVAILABLE. */
  close(): Promise<void> {
    if (this.#exited) return Promise.resolve();
    this.#closing ??= new Promise<void>((resolve) => {
      this.#stopping = true;
      const timer = setTimeout(() => this.#child.kill('SIGKILL'), 1_000);
      this.#child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      this.#send({ t: 'shutdown' });
    });
    return this.#closing;
  }

  #send(message: ToWorker): void {
    if (this.#exited || !this.#child.connected) return;
    observe('js.toWorker', message);
    this.#child.send(message);
  }

  /** Sends a VFS answer of about `bytes`; requests wait while too many answer bytes are still being written. */
  #answer(message: ToWorker, bytes: number): void {
    if (this.#exited || !this.#child.connected) return;
    observe('js.toWorker', message);
    if (bytes < SMALL_ANSWER) {
      this.#child.send(message);
      return;
    }
    this.#answers.take(bytes);
    this.#owed += bytes;
    this.#child.send(message, undefined, undefined, () => {
      if (this.#owed < bytes) return;
      this.#owed -= bytes;
      this.#answers.release(bytes);
    });
  }

  /**
   * Serves VFS requests in the order they came, while few enough answer bytes are being written and,
   * for a request whose bytes come on the bulk pipe, once they are all here.
   */
  #serveHeld(): void {
    while (this.#held.length > 0 && this.#answers.bytes <= ANSWER_BYTES) {
      const next = this.#held[0] as Extract<FromWorker, { t: 'vfs' }>;
      let blob: Buffer | undefined;
      if (next.blob !== undefined) {
        if (this.#blobs.length === 0) return;
        blob = this.#blobs.shift() as Buffer;
        if (blob.length !== next.blob) {
          this.#brokenBulk(`a request announced ${next.blob} bytes and the bulk pipe brought ${blob.length}`);
          return;
        }
      }
      this.#held.shift();
      this.#vfs(next, blob);
    }
  }

  /** Bytes from the bulk pipe: blobs of a 4-byte little-endian length and that many bytes. */
  #onBulk(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.#blob === null) {
        const n = Math.min(4 - this.#blobHeaderFill, chunk.length - at);
        chunk.copy(this.#blobHeader, this.#blobHeaderFill, at, at + n);
        this.#blobHeaderFill += n;
        at += n;
        if (this.#blobHeaderFill < 4) break;
        this.#blobHeaderFill = 0;
        const length = this.#blobHeader.readUInt32LE(0);
        if (length > MAX_BLOB) {
          this.#brokenBulk(`the bulk pipe announced a blob of ${length} bytes`);
          return;
        }
        this.#blob = Buffer.allocUnsafe(length);
        this.#blobFill = 0;
      }
      const n = Math.min(this.#blob.length - this.#blobFill, chunk.length - at);
      chunk.copy(this.#blob, this.#blobFill, at, at + n);
      this.#blobFill += n;
      at += n;
      if (this.#blobFill === this.#blob.length) {
        this.#blobs.push(this.#blob);
        this.#blob = null;
      }
    }
    this.#serveHeld();
  }

  /** The two channels disagree: nothing later can be matched, so the process goes (its calls fail UNAVAILABLE). */
  #brokenBulk(reason: string): void {
    this.#stderr = tail(this.#stderr, `\nbulk pipe out of step: ${reason}`, STDERR_KEEP);
    this.#held.length = 0;
    this.#blobs.length = 0;
    this.#child.kill('SIGKILL');
  }

  #onMessage(message: FromWorker): void {
    switch (message?.t) {
      case 'vfs':
        this.#held.push(message);
        this.#serveHeld();
        return;
      case 'done':
        this.#done(message);
        return;
      case 'log': {
        const pending = this.#calls.get(message.id);
        if (pending && !pending.settled) pending.ctx.log(LEVELS.has(message.level) ? message.level : 'log', String(message.message));
        return;
      }
      case 'draining':
        this.#draining = true;
        this.onDrain?.();
        this.#closeIfDrained();
        return;
      case 'stats':
      case 'probe': {
        const resolve = this.#probes.get(message.id);
        this.#probes.delete(message.id);
        resolve?.(message);
        this.#idle();
        return;
      }
    }
  }

  /** A `ctx.vfs` request from a running tool, served on the call's own permission-checked VFS. */
  #vfs(message: Extract<FromWorker, { t: 'vfs' }>, blob?: Buffer): void {
    if (message.op === 'tool') {
      this.#tool(message);
      return;
    }
    const args = message.args;
    if (Array.isArray(args) && message.op === 'write') {
      if (message.binary === 1 && typeof args[1] === 'string') args[1] = new Uint8Array(Buffer.from(args[1], 'base64'));
      if (blob !== undefined) args[1] = new Uint8Array(blob.buffer, blob.byteOffset, blob.length);
    }
    const answer = serveVfs(this.#calls, message.id, message.op, args, (failure) =>
      this.#send({ t: 'abort', id: message.id, code: failure.code, message: failure.message }),
    );
    if (answer instanceof Promise) void answer.then((settled) => this.#reply(message, settled));
    else this.#reply(message, answer);
  }

  /** A tool call of a program, served by the program's own server; only a program's call has one. */
  #tool(message: Extract<FromWorker, { t: 'vfs' }>): void {
    const { id, rid } = message;
    const entry = this.#calls.get(id);
    if (!entry || entry.settled) return;
    const [path, input] = Array.isArray(message.args) ? message.args : [];
    if (!entry.tools || typeof path !== 'string' || typeof input !== 'string') {
      this.#send({ t: 'reply', id, rid, ok: false, error: { code: 'INVALID_INPUT', message: 'Only a code.run program calls tools' } });
      return;
    }
    entry.tools(path, input).then(
      (answer) => {
        if (entry.settled) return;
        if (answer.ok) this.#answer({ t: 'reply', id, rid, ok: true, value: answer.value }, 0);
        else this.#send({ t: 'reply', id, rid, ok: false, error: answer.error });
      },
      (error: unknown) => {
        if (entry.settled) return;
        const failure =
          error instanceof ToolFailure
            ? error
            : new ToolFailure('execution', 'INTERNAL', 'A tool call of the program failed in the engine', { cause: error });
        // The program went past a bound: it ends here, whatever it would do with an error.
        this.#calls.settle(id, failure);
        this.#send({ t: 'abort', id, code: failure.code, message: failure.message });
      },
    );
  }

  #reply(message: Extract<FromWorker, { t: 'vfs' }>, answer: VfsAnswer): void {
    const { id, rid } = message;
    if (!answer.ok) {
      this.#send({ t: 'reply', id, rid, ok: false, error: answer.error });
      return;
    }
    const value = answer.value;
    if (value instanceof Uint8Array) {
      const base64 = Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
      this.#answer({ t: 'reply', id, rid, ok: true, value: base64, bytes: true }, base64.length);
      return;
    }
    this.#answer({ t: 'reply', id, rid, ok: true, value }, answerSize(value));
  }

  #done(message: Extract<FromWorker, { t: 'done' }>): void {
    const pending = this.#calls.finish(message.id);
    if (!pending) return;
    this.#closeIfDrained();
    if (pending.settled) return;
    pending.settled = true;
    const logs: LogLine[] = Array.isArray(message.logs) ? message.logs : [];
    for (const line of logs) pending.ctx.log(LEVELS.has(line?.level) ? line.level : 'log', String(line?.message));
    // The dispatcher replaces this count with its own when it drops lines too (its cap is the smaller one).
    if (Number.isSafeInteger(message.dropped) && message.dropped > 0) pending.ctx.meta.logs_dropped = message.dropped;
    if (message.ok === true) {
      pending.resolve(message.data);
      return;
    }
    const error = message.error ?? { code: 'INTERNAL', message: 'The sandbox reported a failure without details' };
    let code: ErrorCode = KNOWN_CODES.has(error.code) ? error.code : 'INTERNAL';
    let text = String(error.message);
    if ((error.details as { uncaught?: unknown } | undefined)?.uncaught === true) {
      // The tool let a ctx.vfs failure escape: the call ends with its code, or as the tool's own error.
      code = uncaughtVfsCode(error.code);
      const { uncaught: _, ...details } = error.details as Record<string, unknown>;
      error.details = code === 'TOOL_ERROR' ? { ...details, name: 'VfsError', vfs_code: String(error.code) } : details;
      if (code === 'TOOL_ERROR') text = `VfsError: ${text}`;
    }
    const stage = code === 'DENIED' ? 'permission' : 'execution';
    const options: ConstructorParameters<typeof ToolFailure>[3] = {};
    if (error.details && typeof error.details === 'object') {
      options.details = error.details;
      // Set by the sandbox's module loader only (never by tool code): an import that tried to leave the tools folder.
      const intrusion = (error.details as { intrusion?: unknown }).intrusion;
      if (typeof intrusion === 'string') pending.ctx.intrusion(intrusion.slice(0, 300), String(error.message).slice(0, 500));
    }
    if (typeof error.stack === 'string' && error.stack !== '') options.toolStack = error.stack;
    pending.reject(new ToolFailure(stage, code, text, options));
  }

  /** A draining process ends once the calls sent to it are done; no new ones come (see `accepting`). */
  #closeIfDrained(): void {
    if (this.#draining && this.#calls.size === 0 && !this.#stopping) void this.close();
  }

  #failAll(code: number | null, signal: NodeJS.Signals | null): void {
    const how = signal ? `signal ${signal}` : `exit code ${code}`;
    const outOfMemory = /out of memory|invalid size error|heap limit|allocation failed|CALL_AND_RETRY_LAST/i.test(this.#stderr);
    this.#calls.failAll((pending, running) => {
      const { runner, label } = this.#owner;
      if (this.#stopping) {
        return new ToolFailure('execution', 'UNAVAILABLE', `The ${runner} was shut down while the tool ran`, { details: { runner } });
      }
      if (running === 1 && outOfMemory) {
        const mb = pending.ctx.limits.memory_mb;
        return new ToolFailure(
          'execution',
          'MEMORY_LIMIT',
          `${pending.ctx.tool.spec.id} exceeded its memory limit of ${mb} MB (V8 aborted the sandbox process, which was replaced)`,
          { details: { memory_mb: mb, reason: 'the sandbox process aborted', runner } },
        );
      }
      return new ToolFailure(
        'execution',
        'UNAVAILABLE',
        `The ${label} sandbox process stopped (${how}) while ${running} call(s) ran; it has been replaced and the call can be retried`,
        { details: { calls: running, runner } },
      );
    });
    for (const resolve of this.#probes.values()) resolve({ error: 'the sandbox process exited' });
    this.#probes.clear();
  }

  /** The process keeps the engine's event loop alive only while it has work. */
  #busy(): void {
    this.#child.ref();
    this.#child.channel?.ref();
    (this.#child.stderr as unknown as { ref?: () => void } | null)?.ref?.();
  }

  #idle(): void {
    if (this.#calls.size > 0 || this.#probes.size > 0) return;
    this.#child.unref();
    this.#child.channel?.unref();
    (this.#child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
  }
}
