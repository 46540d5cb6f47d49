import { type ChildProcess, fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ToolFailure } from '../../../src/errors.js';

/**
 * The processes of `shell.run` (runners/builtin/shell/worker.mjs, a Node child process). One is kept
 * warm: started at the first shell call, reused by the next ones, replaced when it crashes or is
 * killed. A call that finds it busy gets a process of its own, which ends with the call unless it can
 * become the warm one; at most MAX_PROCESSES run at once and further calls wait. A process runs one
 * script at a time, so a timeout or a crash ends only the call that was running in it.
 *
 * Why a process and not a worker thread: V8 can end the whole process when a heap reaches its limit
 * ("FATAL ERROR: Reached heap limit", an abort), and a worker thread's `resourceLimits` does not
 * always turn that into the thread's own end (a script that builds large strings aborted the engine in
 * a thread). Here the abort ends the shell's process; the call that ran in it fails with MEMORY_LIMIT.
 */

/** Processes running scripts at once; one costs about 60 MB of memory with just-bash loaded. */
const MAX_PROCESSES = 8;
/** After asking a script to stop (a denial ended its call), how long it may take before its process is killed. */
const STOP_GRACE_MS = 1_000;
/** Bytes of a process's own stdout/stderr (not a script's) kept for the message when it dies. */
const CONSOLE_KEEP = 4_096;
/**
 * A process whose heap holds more than this share of its limit after a script is not kept warm: the
 * garbage a script leaves (large strings it built) can make V8 abort in a later collection, which must
 * not end the next call.
 */
const REUSE_HEAP_SHARE = 0.5;
/** What V8 prints before it aborts for want of memory (its heap or a single allocation too large). */
const OUT_OF_MEMORY = /JavaScript heap out of memory|Reached heap limit|Allocation failed|invalid size error|Fatal JavaScript OOM/i;

/** A script to run, as the shell's process receives it. */
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
/** A failure as the process's file system gives it to just-bash: a node:fs code and message. */
export type FsAnswerError = { code: string; message: string };
export type FsAnswerMaker = (op: string, args: Record<string, unknown>, error: unknown) => FsAnswerError;

type FromProcess =
  | { t: 'ready' }
  | { t: 'failed'; message: string }
  | { t: 'fs'; id: number; req: number; op: string; args: Record<string, unknown> }
  | { t: 'done'; id: number; exitCode: number; stdout: ShellOutput; stderr: ShellOutput; heapBytes: number }
  | { t: 'done'; id: number; error: string; heapBytes: number }
  | { t: 'done'; id: number; braceRange: BraceRange; heapBytes: number };

/** A brace range longer than the shell expands (worker.mjs): the items it would give, null when too many to count. */
interface BraceRange {
  range: string;
  items: number | null;
  max: number;
}

/** The process's script: plain JavaScript next to this file in the sources, three levels up from dist/runners/builtin/shell/. */
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

/** A handle that can stop keeping the event loop alive (a child process, its IPC channel, its pipes). */
type Holdable = { ref(): void; unref(): void };

/** One shell process and the script it runs. */
export class ShellProcess {
  readonly memoryMb: number;
  readonly #child: ChildProcess;
  readonly #ready: Promise<void>;
  readonly #closed: Promise<void>;
  #running: Running | null = null;
  #dead: ToolFailure | null = null;
  /** The heap the last script left behind (bytes), as the process measured it when it answered. */
  #heapBytes = 0;
  #console = '';
  /** V8 said it ran out of memory (seen as the text comes, in case more follows it than CONSOLE_KEEP keeps). */
  #outOfMemory = false;

  constructor(memoryMb: number, onExit: (process: ShellProcess) => void) {
    this.memoryMb = memoryMb;
    this.#child = fork(workerPath(), [], {
      // No host environment (not even NODE_OPTIONS), no inherited flags, a heap bound (the young
      // generation, two semi-spaces, an eighth of it, 4 to 32 MB), its console kept apart from the
      // engine's (whose stdout may be an MCP stdio channel), and structured clone on the IPC channel,
      // so that file contents travel as bytes.
      env: {},
      execArgv: [`--max-old-space-size=${memoryMb}`, `--max-semi-space-size=${Math.min(16, Math.max(2, memoryMb >> 4))}`],
      cwd: '/',
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'advanced',
    });
    for (const stream of [this.#child.stdout, this.#child.stderr]) {
      stream?.setEncoding('utf8');
      stream?.on('data', (chunk: string) => {
        this.#console = (this.#console + chunk).slice(-CONSOLE_KEEP);
        if (!this.#outOfMemory && OUT_OF_MEMORY.test(this.#console)) this.#outOfMemory = true;
      });
    }
    this.#child.on('error', (error) => {
      this.#dead ??= new ToolFailure('execution', 'UNAVAILABLE', `The shell process could not be started: ${error.message}`);
    });
    // 'close', not 'exit': by then all it printed has been read, V8's last words included.
    this.#closed = new Promise<void>((resolve) => {
      this.#child.once('close', (code, signal) => {
        this.#dead ??= this.#death(code, signal);
        const running = this.#running;
        this.#running = null;
        running?.reject(this.#dead);
        onExit(this);
        resolve();
      });
    });
    this.#ready = new Promise<void>((resolve, reject) => {
      const onMessage = (message: FromProcess) => {
        if (message.t === 'ready') {
          this.#child.off('message', onMessage);
          resolve();
        } else if (message.t === 'failed') {
          this.#child.off('message', onMessage);
          reject(new ToolFailure('execution', 'UNAVAILABLE', `shell.run is not available: just-bash could not be loaded (${message.message})`));
          void this.terminate();
        }
      };
      this.#child.on('message', onMessage);
      void this.#closed.then(() => reject(this.#dead ?? new ToolFailure('execution', 'UNAVAILABLE', 'The shell process exited while starting')));
    });
    // Whoever waits for the start sees its failure; nobody else must.
    this.#ready.catch(() => {});
    this.#child.on('message', (message: FromProcess) => this.#message(message));
  }

  get alive(): boolean {
    return this.#dead === null;
  }

  /** Whether it can run another script: alive, and its heap not left near its limit by the last one. */
  get reusable(): boolean {
    return this.alive && this.#heapBytes <= this.memoryMb * 1024 * 1024 * REUSE_HEAP_SHARE;
  }

  ready(): Promise<void> {
    return this.#ready;
  }

  /** An idle process does not keep the engine's process alive; a running one does. */
  hold(busy: boolean): void {
    const child = this.#child;
    const handles = [child, child.channel, child.stdout, child.stderr] as Array<Partial<Holdable> | null | undefined>;
    for (const handle of handles) {
      if (busy) handle?.ref?.();
      else handle?.unref?.();
    }
  }

  /** Runs one script; `serve` answers its file-system requests. Rejects when the process dies meanwhile. */
  run(job: ShellJob, serve: FsServer, answerError: FsAnswerMaker): Promise<ShellDone> {
    if (this.#dead) return Promise.reject(this.#dead);
    if (this.#running) return Promise.reject(new ToolFailure('execution', 'INTERNAL', 'The shell process is already running a script'));
    const id = nextRunId++;
    return new Promise<ShellDone>((resolve, reject) => {
      this.#running = { id, serve, answerError, resolve, reject };
      this.#send({ t: 'run', id, ...job });
    });
  }

  /**
   * Asks the script to stop at its next statement; kills the process if it has not stopped within
   * STOP_GRACE_MS. The run's promise settles either way.
   */
  stop(): void {
    const running = this.#running;
    if (!running) return;
    this.#send({ t: 'abort', id: running.id });
    const timer = setTimeout(() => {
      if (this.#running === running) void this.terminate();
    }, STOP_GRACE_MS);
    timer.unref();
  }

  /** Ends the process; a script it was running fails with `reason`. */
  async terminate(reason = new ToolFailure('execution', 'CANCELLED', 'The shell process was terminated')): Promise<void> {
    this.#dead ??= reason;
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      // Held again, so that whoever awaits its end is not left with an event loop that has nothing to wait for.
      this.hold(true);
      this.#child.kill('SIGKILL');
    }
    await this.#closed;
  }

  /** Why the process ended, when nobody ended it: out of memory (V8 said so before aborting), or a crash. */
  #death(code: number | null, signal: NodeJS.Signals | null): ToolFailure {
    if (this.#outOfMemory) {
      return new ToolFailure('execution', 'MEMORY_LIMIT', `The script ran out of memory (the shell's heap is limited to ${this.memoryMb} MB)`, {
        details: { memory_mb: this.memoryMb },
      });
    }
    const how = signal ? `signal ${signal}` : `code ${code}`;
    return new ToolFailure('execution', 'INTERNAL', `The shell process exited (${how})${this.#console ? `: ${this.#console.trim()}` : ''}`);
  }

  /** A message to the process; lost when it is gone, which its 'close' reports. */
  #send(message: Record<string, unknown>): void {
    if (!this.#child.connected) return;
    const unreachable = (error: Error) => {
      this.#dead ??= new ToolFailure('execution', 'INTERNAL', `The shell process could not be reached: ${error.message}`);
      void this.terminate();
    };
    try {
      this.#child.send(message, (error) => {
        if (error) unreachable(error);
      });
    } catch (error) {
      // An answer that cannot be serialized: the script's call fails, not the engine.
      unreachable(error instanceof Error ? error : new Error(String(error)));
    }
  }

  #message(message: FromProcess): void {
    const running = this.#running;
    if (message.t === 'fs') {
      if (!running || message.id !== running.id) return;
      let answer: Record<string, unknown>;
      try {
        answer = { t: 'answer', req: message.req, ok: true, value: running.serve(message.op, message.args ?? {}) };
      } catch (error) {
        answer = { t: 'answer', req: message.req, ok: false, ...running.answerError(message.op, message.args ?? {}, error) };
      }
      this.#send(answer);
    } else if (message.t === 'done') {
      if (!running || message.id !== running.id) return;
      this.#running = null;
      this.#heapBytes = message.heapBytes;
      if ('braceRange' in message) {
        running.reject(braceRangeFailure(message.braceRange));
      } else if ('error' in message) {
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

/** The failure of a script with a brace range past what the shell expands: what it is, and how to stay under it. */
function braceRangeFailure({ range, items, max }: BraceRange): ToolFailure {
  const size = items === null ? 'too many items' : `${items} items`;
  return new ToolFailure(
    'execution',
    'TOOL_ERROR',
    `The brace range ${range} gives ${size}, and the shell expands at most ${max} items per range (it would cut the rest and carry on); ` +
      `the script was stopped and nothing it wrote was kept. Split the range (e.g. {1..${max}} {${max + 1}..${2 * max}}) or count with seq or a loop ` +
      `(for i in $(seq 1 ${2 * max}), or for ((i = 1; i <= ${2 * max}; i++)))`,
    { details: { limit: 'braceRangeItems', max, items, range } },
  );
}

export interface ShellPoolStatus {
  /** Processes alive now (the warm one and those running scripts). */
  workers: number;
  /** 1 when a warm process waits for the next call. */
  idle: number;
  /** Processes started since the engine started. */
  started: number;
}

/** The shell processes of one engine; closed with it. */
export class ShellPool {
  readonly #all = new Set<ShellProcess>();
  #idle: ShellProcess | null = null;
  #started = 0;
  #closed = false;
  readonly #waiting: Array<() => void> = [];

  /** A process ready to run a script with a heap of `memoryMb`. */
  async acquire(memoryMb: number, signal: AbortSignal): Promise<ShellProcess> {
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
      if (this.#all.size < MAX_PROCESSES) break;
      await this.#slot(signal);
    }
    const shell = new ShellProcess(memoryMb, (p) => this.#gone(p));
    this.#all.add(shell);
    this.#started++;
    const onAbort = () => void shell.terminate();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      await shell.ready();
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    return shell;
  }

  /** Back after a call: kept warm when it is healthy and no other process is; else killed. */
  release(shell: ShellProcess, healthy: boolean): void {
    if (!healthy || this.#closed || !shell.reusable || this.#idle !== null) {
      void shell.terminate();
      return;
    }
    shell.hold(false);
    this.#idle = shell;
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
    await Promise.allSettled([...this.#all].map((p) => p.terminate(closed)));
  }

  #gone(shell: ShellProcess): void {
    this.#all.delete(shell);
    if (this.#idle === shell) this.#idle = null;
    this.#waiting.shift()?.();
  }

  /** Waits until a process ends or comes back warm. */
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
