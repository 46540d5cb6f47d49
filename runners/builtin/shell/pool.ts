import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ToolFailure } from '../../../src/errors.js';

/**
 * The worker threads of `shell.run` (runners/builtin/shell/worker.mjs). One is kept warm: started at
 * the first shell call, reused by the next ones, replaced when it crashes or is terminated. A call that
 * finds it busy gets a thread of its own, which ends with the call unless it can become the warm one;
 * at most MAX_WORKERS run at once and further calls wait. A thread runs one script at a time, so a
 * timeout terminates only the thread of the call that ran out of time.
 */

/** Threads running scripts at once; a thread costs about 25 MB with just-bash loaded. */
const MAX_WORKERS = 8;
/** After asking a script to stop (a denial ended its call), how long it may take before its thread is terminated. */
const STOP_GRACE_MS = 1_000;
/** Bytes of a thread's own stdout/stderr (not a script's) kept for the message when it dies. */
const CONSOLE_KEEP = 4_096;

/** A script to run, as the worker receives it. */
export interface ShellJob {
  script: string;
  cwd: string;
  env: Record<string, string>;
  stdin: string | undefined;
  limits: { loops: number; commands: number; timeMs: number; outputBytes: number };
  /** Characters of stdout and of stderr sent back; the rest is only counted. */
  keep: number;
}

export interface ShellOutput {
  text: string;
  /** UTF-8 bytes of the whole output. */
  bytes: number;
  cut: boolean;
}

export interface ShellDone {
  exitCode: number;
  stdout: ShellOutput;
  stderr: ShellOutput;
}

/** A file-system request of a script: served by the call (runners/builtin/shell/run.ts); throws to answer an error. */
export type FsServer = (op: string, args: Record<string, unknown>) => unknown;
/** A failure as the worker's file system gives it to just-bash: a node:fs code and message. */
export type FsAnswerError = { code: string; message: string };
export type FsAnswerMaker = (op: string, args: Record<string, unknown>, error: unknown) => FsAnswerError;

type FromWorker =
  | { t: 'ready' }
  | { t: 'failed'; message: string }
  | { t: 'fs'; id: number; req: number; op: string; args: Record<string, unknown> }
  | { t: 'done'; id: number; exitCode: number; stdout: ShellOutput; stderr: ShellOutput; aborted: boolean }
  | { t: 'done'; id: number; error: string };

/** The worker script: plain JavaScript next to this file in the sources, three levels up from dist/runners/builtin/shell/. */
export function workerPath(): string {
  const candidates = [new URL('./worker.mjs', import.meta.url), new URL('../../../../runners/builtin/shell/worker.mjs', import.meta.url)];
  for (const url of candidates) {
    const path = fileURLToPath(url);
    if (existsSync(path)) return path;
  }
  throw new ToolFailure('execution', 'UNAVAILABLE', 'The shell worker (runners/builtin/shell/worker.mjs) is missing from the installation');
}

let nextRunId = 1;

interface Running {
  id: number;
  serve: FsServer;
  answerError: FsAnswerMaker;
  resolve: (done: ShellDone) => void;
  reject: (error: unknown) => void;
}

/** One worker thread and the script it runs. */
export class ShellWorker {
  readonly memoryMb: number;
  readonly #worker: Worker;
  readonly #ready: Promise<void>;
  #running: Running | null = null;
  #dead: ToolFailure | null = null;
  #console = '';
  readonly #onExit: (worker: ShellWorker) => void;

  constructor(memoryMb: number, onExit: (worker: ShellWorker) => void) {
    this.memoryMb = memoryMb;
    this.#onExit = onExit;
    this.#worker = new Worker(workerPath(), {
      // No host environment, no inherited flags, its console kept apart from the engine's (whose stdout
      // may be an MCP stdio channel), and a heap bound.
      env: {},
      execArgv: [],
      argv: [],
      stdout: true,
      stderr: true,
      resourceLimits: { maxOldGenerationSizeMb: memoryMb, maxYoungGenerationSizeMb: Math.min(32, Math.max(4, memoryMb >> 3)) },
    });
    for (const stream of [this.#worker.stdout, this.#worker.stderr]) {
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        this.#console = (this.#console + chunk).slice(-CONSOLE_KEEP);
      });
    }
    this.#ready = new Promise<void>((resolve, reject) => {
      const onMessage = (message: FromWorker) => {
        if (message.t === 'ready') {
          this.#worker.off('message', onMessage);
          resolve();
        } else if (message.t === 'failed') {
          this.#worker.off('message', onMessage);
          reject(new ToolFailure('execution', 'UNAVAILABLE', `shell.run is not available: just-bash could not be loaded (${message.message})`));
          void this.terminate();
        }
      };
      this.#worker.on('message', onMessage);
      this.#worker.once('exit', () => reject(this.#dead ?? new ToolFailure('execution', 'UNAVAILABLE', 'The shell worker exited while starting')));
    });
    // Whoever waits for the start sees its failure; nobody else must.
    this.#ready.catch(() => {});
    this.#worker.on('message', (message: FromWorker) => this.#message(message));
    this.#worker.on('error', (error: Error & { code?: string }) => {
      this.#dead ??=
        error.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? new ToolFailure('execution', 'MEMORY_LIMIT', `The script ran out of memory (the shell's heap is limited to ${this.memoryMb} MB)`, {
              details: { memory_mb: this.memoryMb },
            })
          : new ToolFailure('execution', 'INTERNAL', `The shell worker failed: ${error.message}`);
    });
    this.#worker.once('exit', (code) => {
      this.#dead ??= new ToolFailure(
        'execution',
        'INTERNAL',
        `The shell worker exited (code ${code})${this.#console ? `: ${this.#console.trim()}` : ''}`,
      );
      const running = this.#running;
      this.#running = null;
      running?.reject(this.#dead);
      this.#onExit(this);
    });
  }

  get alive(): boolean {
    return this.#dead === null;
  }

  ready(): Promise<void> {
    return this.#ready;
  }

  /** An idle thread does not keep the process alive; a running one does. */
  hold(busy: boolean): void {
    if (busy) this.#worker.ref();
    else this.#worker.unref();
  }

  /** Runs one script; `serve` answers its file-system requests. Rejects when the thread dies meanwhile. */
  run(job: ShellJob, serve: FsServer, answerError: FsAnswerMaker): Promise<ShellDone> {
    if (this.#dead) return Promise.reject(this.#dead);
    if (this.#running) return Promise.reject(new ToolFailure('execution', 'INTERNAL', 'The shell worker is already running a script'));
    const id = nextRunId++;
    return new Promise<ShellDone>((resolve, reject) => {
      this.#running = { id, serve, answerError, resolve, reject };
      this.#worker.postMessage({ t: 'run', id, ...job });
    });
  }

  /**
   * Asks the script to stop at its next statement; terminates the thread if it has not stopped within
   * STOP_GRACE_MS. The run's promise settles either way.
   */
  stop(): void {
    const running = this.#running;
    if (!running) return;
    this.#worker.postMessage({ t: 'abort', id: running.id });
    const timer = setTimeout(() => {
      if (this.#running === running) void this.terminate();
    }, STOP_GRACE_MS);
    timer.unref();
  }

  /** Ends the thread; a script it was running fails with `reason`. */
  async terminate(reason = new ToolFailure('execution', 'CANCELLED', 'The shell worker was terminated')): Promise<void> {
    this.#dead ??= reason;
    await this.#worker.terminate();
  }

  #message(message: FromWorker): void {
    const running = this.#running;
    if (message.t === 'fs') {
      if (!running || message.id !== running.id) return;
      let answer: Record<string, unknown>;
      try {
        answer = { t: 'answer', req: message.req, ok: true, value: running.serve(message.op, message.args ?? {}) };
      } catch (error) {
        answer = { t: 'answer', req: message.req, ok: false, ...running.answerError(message.op, message.args ?? {}, error) };
      }
      this.#worker.postMessage(answer);
    } else if (message.t === 'done') {
      if (!running || message.id !== running.id) return;
      this.#running = null;
      if ('error' in message) {
        // just-bash raises some failures out of the script instead of giving them an exit status: a
        // redirection whose write fails (a file in the way, a full quota) is one.
        running.reject(
          new ToolFailure('execution', 'TOOL_ERROR', `The shell stopped the script; nothing it wrote was kept: ${message.error}`, {
            details: { error: message.error.slice(0, 2000) },
          }),
        );
      } else {
        running.resolve({ exitCode: message.exitCode, stdout: message.stdout, stderr: message.stderr });
      }
    }
  }
}

export interface ShellPoolStatus {
  /** Threads alive now (the warm one and those running scripts). */
  workers: number;
  /** 1 when a warm thread waits for the next call. */
  idle: number;
  /** Threads started since the engine started. */
  started: number;
}

/** The threads of one engine; closed with it. */
export class ShellPool {
  readonly #all = new Set<ShellWorker>();
  #idle: ShellWorker | null = null;
  #started = 0;
  #closed = false;
  readonly #waiting: Array<() => void> = [];

  /** A thread ready to run a script with a heap of `memoryMb`. */
  async acquire(memoryMb: number, signal: AbortSignal): Promise<ShellWorker> {
    for (;;) {
      if (this.#closed) throw new ToolFailure('execution', 'UNAVAILABLE', 'The engine is closed');
      if (signal.aborted) throw new ToolFailure('execution', 'CANCELLED', 'The call ended before a shell was free');
      const idle = this.#idle;
      if (idle) {
        this.#idle = null;
        if (idle.alive && idle.memoryMb === memoryMb) {
          idle.hold(true);
          return idle;
        }
        void idle.terminate();
      }
      if (this.#all.size < MAX_WORKERS) break;
      await this.#slot(signal);
    }
    const worker = new ShellWorker(memoryMb, (w) => this.#gone(w));
    this.#all.add(worker);
    this.#started++;
    const onAbort = () => void worker.terminate();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      await worker.ready();
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    return worker;
  }

  /** Back after a call: kept warm when it is healthy and no other thread is; else terminated. */
  release(worker: ShellWorker, healthy: boolean): void {
    if (!healthy || this.#closed || !worker.alive || this.#idle !== null) {
      void worker.terminate();
      return;
    }
    worker.hold(false);
    this.#idle = worker;
    this.#waiting.shift()?.();
  }

  status(): ShellPoolStatus {
    return { workers: this.#all.size, idle: this.#idle ? 1 : 0, started: this.#started };
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#idle = null;
    for (const wake of this.#waiting.splice(0)) wake();
    const closed = new ToolFailure('execution', 'UNAVAILABLE', 'The engine was closed while the script ran');
    await Promise.allSettled([...this.#all].map((w) => w.terminate(closed)));
  }

  #gone(worker: ShellWorker): void {
    this.#all.delete(worker);
    if (this.#idle === worker) this.#idle = null;
    this.#waiting.shift()?.();
  }

  /** Waits until a thread ends or comes back warm. */
  #slot(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        signal.removeEventListener('abort', wake);
        const i = this.#waiting.indexOf(wake);
        if (i !== -1) this.#waiting.splice(i, 1);
        resolve();
      };
      this.#waiting.push(wake);
      signal.addEventListener('abort', wake, { once: true });
    });
  }
}
