import { type ChildProcess, spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { ToolFailure } from '../../src/errors.js';
import type { RunContext } from '../../src/runner.js';
import { checking, observe, reported } from '../shared/protocol.js';
import { type CallEntry, SupervisedCalls, serveVfs, tail, type VfsAnswer } from '../shared/supervision.js';
import { uncaughtVfsCode } from '../shared/vfs-ops.js';

/**
 * The engine's side of one Python fork server (runners/python/sandbox/arium_server.py): frames over fd 3 (to it) and
 * fd 4 (from it), the calls it is running, and their `ctx.vfs` requests, served here on each call's
 * permission-checked VFS. The server never runs tool code, but it lives in the sandbox, so everything
 * it sends is checked before use; the envelope of a result is built by the dispatcher, never from it.
 */

export interface ServerStart {
  command: string;
  args: string[];
  cwd: string;
}

export interface ServerInfo {
  python: string;
  pid: number;
  uid: number;
  /** Why calls keep the engine's uid (as root), when they do. */
  uidNote?: string;
  /** With namespaces: the kernel's Landlock ABI version (0: none); 6 and later scope abstract sockets per call. */
  landlock?: number;
}

const MAX_FRAME = 1024 * 1024 * 1024;
const STDERR_KEEP = 8_192;
/** After asking the server to kill a call, how long before the server itself counts as stuck. */
const STOP_GRACE_MS = 3_000;
const LEVELS: ReadonlySet<string> = new Set(['log', 'info', 'warn', 'error', 'stdout', 'stderr']);
const SIGXCPU = 24;
const SIGKILL = 9;
const MAX_INTRUSIONS = 16;

interface PythonCall {
  /** The last ctx.vfs failures the engine answered, by the request's seq: an escaping one ends the call with its code. */
  vfsFailures: Map<number, ToolFailure>;
}

type Pending = CallEntry & PythonCall;

/** How many ctx.vfs failures a call remembers (a tool that catches thousands keeps only the latest). */
const REMEMBERED_VFS_FAILURES = 64;

type Frame = Record<string, unknown>;

export class ServerProcess {
  readonly ready: Promise<ServerInfo>;
  onExit: (() => void) | null = null;
  /** The zygote could not use what a compile process sent for a tool (a fault of the harness: see PythonRunner.status()). */
  onCompileRefused: ((entry: string, why: string) => void) | null = null;
  readonly #child: ChildProcess;
  readonly #in: Writable;
  readonly #calls: SupervisedCalls<PythonCall> = new SupervisedCalls<PythonCall>({
    graceMs: STOP_GRACE_MS,
    kill: () => this.#child.kill('SIGKILL'),
    stop: (id) => this.#send({ t: 'kill', id }),
    busy: () => this.#busy(),
    idle: () => this.#idle(),
  });
  /** Bytes read from the server and not yet framed, as read (joined once a frame is whole). */
  #chunks: Buffer[] = [];
  #have = 0;
  /** A `vfs` frame whose blob (the bytes to write, right after it) is being read into `data`. */
  #carrying: { frame: Frame; data: Buffer; fill: number } | null = null;
  #stderr = '';
  #exited = false;
  #stopping = false;
  /** Takes no more calls and closes once the ones it runs are done (retire()). */
  #retiring = false;
  #info: ServerInfo | null = null;

  constructor(start: ServerStart) {
    // node:child_process, not execa, for the reason given in runners/shared/sandbox-process.ts: a process
    // supervised for the engine's life, whose frames are read as they come.
    this.#child = spawn(start.command, start.args, {
      cwd: start.cwd,
      // Nothing of the engine's environment enters the sandbox (inside a PID namespace, /proc/1/environ
      // would show bubblewrap's own).
      env: {},
      stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
      detached: false,
    });
    this.#in = this.#child.stdio[3] as Writable;
    const out = this.#child.stdio[4] as Readable;
    this.#in.on('error', () => {});
    this.#child.stderr?.setEncoding('utf8');
    this.#child.stderr?.on('data', (chunk: string) => {
      this.#stderr = tail(this.#stderr, chunk, STDERR_KEEP);
    });
    this.ready = new Promise<ServerInfo>((resolve, reject) => {
      out.on('data', (chunk: Buffer) => {
        try {
          for (const frame of this.#frames(chunk)) {
            if (frame.t === 'ready') observe('py.fromServer', frame);
            if (frame.t === 'ready' && !this.#info) {
              this.#info = {
                python: String(frame.python),
                pid: Number(frame.pid),
                uid: Number(frame.uid),
                ...(typeof frame.uid_note === 'string' ? { uidNote: frame.uid_note } : {}),
                ...(typeof frame.landlock === 'number' ? { landlock: frame.landlock } : {}),
              };
              resolve(this.#info);
            } else {
              this.#onFrame(frame);
            }
          }
        } catch (error) {
          // The server broke the protocol: it cannot be trusted with more calls.
          this.#stderr += `\nprotocol error: ${(error as Error).message}`;
          this.#child.kill('SIGKILL');
        }
      });
      this.#child.on('exit', (code, signal) => {
        this.#exited = true;
        if (!this.#info) reject(new Error(`the Python sandbox exited during start-up (${signal ?? `code ${code}`}): ${this.lastError()}`));
        this.#failAll(code, signal);
        this.onExit?.();
      });
      this.#child.on('error', (error) => reject(error));
    });
    this.ready.then(
      () => this.#idle(),
      () => {},
    );
  }

  get accepting(): boolean {
    return !this.#exited && !this.#stopping && !this.#retiring;
  }

  get info(): ServerInfo | null {
    return this.#info;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get inFlight(): number {
    return this.#calls.size;
  }

  lastError(): string {
    return this.#stderr.trim().split('\n').pop() ?? '';
  }

  /** `entry` relative to the tools folder; `root`, the folder below it the tool's version sits in (a worker's). */
  call(ctx: RunContext, entry: string, logBytes: number, root?: string): Promise<unknown> {
    return this.#calls.open(ctx, { vfsFailures: new Map() }, (id) => {
      const own = root && entry.startsWith(`${root}/`) ? entry.slice(root.length + 1) : entry;
      const module = own.replace(/\.py$/, '').replace(/[^A-Za-z0-9_]/g, '_');
      this.#send({
        t: 'call',
        id,
        entry,
        ...(root ? { root } : {}),
        module,
        input: ctx.input,
        limits: { timeout_ms: ctx.limits.timeout_ms, memory_mb: ctx.limits.memory_mb, output_bytes: ctx.limits.output_bytes },
        log_bytes: logBytes,
        // Past the permission gate, a declared permission is a granted one: only then may the call run programs.
        exec: ctx.tool.declared.some((permission) => permission.name === 'sys.exec'),
        tool: ctx.tool.spec.id,
        run_id: ctx.runId,
        trace_id: ctx.traceId,
        ...(ctx.streamLogs ? { stream_logs: true } : {}),
      });
    });
  }

  /** The tool is gone or replaced: warm processes forked from now on stop compiling it ahead of time (see WARM_COMPILED in arium_server.py). */
  forget(entry: string): void {
    this.#send({ t: 'forget', entry });
  }

  /** Stops taking calls and closes once those in flight are done (the project's environment was replaced). */
  retire(): void {
    this.#retiring = true;
    if (this.#calls.size === 0) void this.close();
  }

  close(): Promise<void> {
    if (this.#exited) return Promise.resolve();
    this.#stopping = true;
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.#child.kill('SIGKILL'), 1_000);
      this.#child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      this.#send({ t: 'shutdown' });
      this.#in.end();
    });
  }

  #send(message: Frame): void {
    if (this.#exited || this.#in.destroyed) return;
    observe('py.toServer', message);
    const body = Buffer.from(JSON.stringify(message), 'utf8');
    const header = Buffer.allocUnsafe(4);
    header.writeUInt32BE(body.length);
    this.#in.write(Buffer.concat([header, body]));
  }

  /**
   * Frames in what the server sent. Chunks are kept as they come and joined once per frame: joining on
   * every chunk copied a large frame over and over (a 64 MiB write, ~1,300 chunks, took minutes).
   */
  *#frames(chunk: Buffer): Generator<Frame> {
    this.#chunks.push(chunk);
    this.#have += chunk.length;
    for (;;) {
      const carrying = this.#carrying;
      if (carrying) {
        // A blob is read straight into one buffer of its size: the VFS keeps that buffer as the file.
        while (carrying.fill < carrying.data.length && this.#chunks.length > 0) {
          const head = this.#chunks[0] as Buffer;
          const n = Math.min(head.length, carrying.data.length - carrying.fill);
          head.copy(carrying.data, carrying.fill, 0, n);
          carrying.fill += n;
          this.#have -= n;
          if (n === head.length) this.#chunks.shift();
          else this.#chunks[0] = head.subarray(n);
        }
        if (carrying.fill < carrying.data.length) return;
        this.#carrying = null;
        carrying.frame.blob = carrying.data;
        yield carrying.frame;
        continue;
      }
      if (this.#have < 4) return;
      if ((this.#chunks[0] as Buffer).length < 4) this.#chunks = [Buffer.concat(this.#chunks, this.#have)];
      const size = (this.#chunks[0] as Buffer).readUInt32BE(0);
      if (size > MAX_FRAME) throw new Error(`a frame of ${size} bytes`);
      if (this.#have < 4 + size) return;
      const all = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks, this.#have);
      const body = all.toString('utf8', 4, 4 + size);
      const rest = all.subarray(4 + size);
      // A small rest is copied out, so it does not keep the whole joined buffer alive.
      this.#chunks = rest.length === 0 ? [] : [rest.length < all.length / 2 ? Buffer.from(rest) : rest];
      this.#have = rest.length;
      const frame = JSON.parse(body) as unknown;
      if (frame === null || typeof frame !== 'object' || Array.isArray(frame)) throw new Error('a frame that is not an object');
      const blob = (frame as Frame).blob;
      if (blob !== undefined) {
        if ((frame as Frame).t !== 'vfs' || !Number.isSafeInteger(blob) || (blob as number) < 0 || (blob as number) > MAX_FRAME) {
          throw new Error(`a frame announcing a blob of ${String(blob)} bytes`);
        }
        this.#carrying = { frame: frame as Frame, data: Buffer.allocUnsafe(blob as number), fill: 0 };
        continue;
      }
      yield frame as Frame;
    }
  }

  #onFrame(frame: Frame): void {
    // The copy with the blob's length is made only while the protocol is checked (tests).
    if (checking()) observe('py.fromServer', Buffer.isBuffer(frame.blob) ? { ...frame, blob: frame.blob.length } : frame);
    if (frame.t === 'protocol') {
      const channel = frame.channel === 'py.toChild' ? 'py.toChild' : 'py.fromChild';
      reported(channel, String(frame.kind), typeof frame.problem === 'string' ? frame.problem : null);
      return;
    }
    if (frame.t === 'vfs') this.#vfs(frame);
    else if (frame.t === 'done') this.#done(frame);
    else if (frame.t === 'log') this.#log(frame);
    else if (frame.t === 'compile-refused') this.onCompileRefused?.(String(frame.entry), String(frame.message));
  }

  /** A log line of a call whose caller follows its logs, sent as it was written. */
  #log(frame: Frame): void {
    const pending = this.#calls.get(Number(frame.id));
    if (!pending || pending.settled) return;
    const level = typeof frame.level === 'string' && LEVELS.has(frame.level) ? frame.level : 'log';
    pending.ctx.log(level as 'log', String(frame.message));
  }

  #vfs(frame: Frame): void {
    const id = Number(frame.id);
    const seq = frame.seq;
    const blob = frame.blob;
    if (Buffer.isBuffer(blob) && frame.op === 'write' && Array.isArray(frame.args))
      frame.args[1] = new Uint8Array(blob.buffer, blob.byteOffset, blob.length);
    // A failure that ends the call also ends its process: the tool must not catch a denial and go on.
    const answer = serveVfs(this.#calls, id, frame.op, frame.args, () => this.#send({ t: 'kill', id }));
    if (answer instanceof Promise) void answer.then((settled) => this.#reply(id, seq, settled));
    else this.#reply(id, seq, answer);
  }

  #reply(id: number, seq: unknown, answer: VfsAnswer): void {
    if (answer.ok) {
      const value = answer.value;
      this.#send({ t: 'vfs-reply', id, seq, ok: true, value: value instanceof Uint8Array ? Buffer.from(value).toString('base64') : value });
      return;
    }
    const pending = this.#calls.get(id);
    if (pending && answer.failure && typeof seq === 'number') {
      pending.vfsFailures.set(seq, answer.failure);
      if (pending.vfsFailures.size > REMEMBERED_VFS_FAILURES) pending.vfsFailures.delete(pending.vfsFailures.keys().next().value as number);
    }
    this.#send({ t: 'vfs-reply', id, seq, ok: false, error: answer.error });
  }

  #done(frame: Frame): void {
    const id = Number(frame.id);
    const pending = this.#calls.finish(id);
    if (!pending) return;
    if (Array.isArray(frame.intrusions)) {
      // Said by the call's own process (the tool could forge more): at most a few, each a bounded string, about itself; also
      // for a call already ended (a timeout), since the attempt was made.
      for (const operation of frame.intrusions.slice(0, MAX_INTRUSIONS)) {
        pending.ctx.intrusion(String(operation).slice(0, 300), 'running a program needs the sys.exec permission, which the tool does not declare');
      }
    }
    if (pending.settled) return;
    pending.settled = true;
    const logs = Array.isArray(frame.logs) ? (frame.logs as Frame[]) : [];
    for (const line of logs) {
      const level = typeof line?.level === 'string' && LEVELS.has(line.level) ? line.level : 'log';
      pending.ctx.log(level as 'log', String(line?.message));
    }
    const dropped = Number(frame.dropped);
    if (Number.isSafeInteger(dropped) && dropped > 0) pending.ctx.meta.logs_dropped = dropped;
    try {
      pending.resolve(this.#outcome(pending, frame, logs));
    } catch (error) {
      pending.reject(error);
    }
  }

  /** The tool's output, or the failure to throw: from what the server saw of the call. */
  #outcome(pending: Pending, frame: Frame, logs: Frame[]): unknown {
    const { ctx } = pending;
    const id = ctx.tool.spec.id;
    const failure = frame.failure as Frame | undefined;
    if (failure && typeof failure === 'object') {
      const code = failure.code === 'BUSY' || failure.code === 'UNAVAILABLE' ? failure.code : 'TOOL_ERROR';
      throw new ToolFailure('execution', code, String(failure.message));
    }
    const reply = frame.reply as Frame | undefined;
    if (reply?.t === 'result' && typeof reply.output === 'string') {
      if (Buffer.byteLength(reply.output) > ctx.limits.output_bytes) {
        throw new ToolFailure('execution', 'OUTPUT_LIMIT', `${id} returned more than ${ctx.limits.output_bytes} bytes of JSON`, {
          details: { limit: ctx.limits.output_bytes },
        });
      }
      try {
        return JSON.parse(reply.output);
      } catch {
        throw new ToolFailure('execution', 'INVALID_OUTPUT', `${id} returned text that is not JSON`);
      }
    }
    if (reply?.t === 'error') {
      const message = String(reply.message ?? '');
      const stack = typeof reply.traceback === 'string' && reply.traceback !== '' ? { toolStack: reply.traceback } : {};
      switch (reply.kind) {
        case 'memory':
          throw this.#memory(ctx, 'MemoryError');
        case 'invalid_output': {
          if (typeof reply.pointer !== 'string')
            throw new ToolFailure('execution', 'INVALID_OUTPUT', `${id} returned a value that is not JSON: ${message}`);
          const reason = String(reply.reason ?? message);
          throw new ToolFailure('execution', 'INVALID_OUTPUT', `The output is not plain JSON at "${reply.pointer || '/'}": ${reason}`, {
            details: { pointer: reply.pointer, reason },
          });
        }
        case 'output_limit':
          throw new ToolFailure('execution', 'OUTPUT_LIMIT', `${id} returned more than ${ctx.limits.output_bytes} bytes of JSON (${message})`, {
            details: { limit: ctx.limits.output_bytes },
          });
        case 'sandbox':
          throw new ToolFailure('execution', 'UNAVAILABLE', `The Python sandbox could not confine the call: ${message}`);
        case 'vfs': {
          // Only a failure the engine itself answered (looked up by its request) gives the call its code:
          // the reply comes from the tool's own process, which could claim any code.
          const recorded = typeof reply.seq === 'number' ? pending.vfsFailures.get(reply.seq) : undefined;
          const code = recorded ? uncaughtVfsCode(recorded.code) : 'TOOL_ERROR';
          if (recorded && code !== 'TOOL_ERROR') {
            throw new ToolFailure('execution', code, recorded.message, { ...stack, ...(recorded.details ? { details: recorded.details } : {}) });
          }
          throw new ToolFailure('execution', 'TOOL_ERROR', `VfsError: ${message}`, {
            ...stack,
            details: { name: 'VfsError', vfs_code: String(recorded?.code ?? reply.code).slice(0, 64) },
          });
        }
        default:
          throw new ToolFailure('execution', 'TOOL_ERROR', message || `${id} raised an exception`, stack);
      }
    }
    // No reply: the process ended on its own, or was killed.
    const signal = Number(frame.signal);
    const seconds = Math.ceil(ctx.limits.timeout_ms / 1000);
    if (frame.killed === 'deadline' || signal === SIGXCPU) {
      throw new ToolFailure(
        'execution',
        'TIMEOUT',
        `${id} used up its time (${ctx.limits.timeout_ms} ms${signal === SIGXCPU ? `, ${seconds + 1} s of CPU` : ''})`,
        {
          details: { timeout_ms: ctx.limits.timeout_ms },
        },
      );
    }
    const said = logs.map((l) => String(l?.message)).join('\n');
    if (/MemoryError|Cannot allocate memory|out of memory/i.test(said) && frame.reply === undefined) throw this.#memory(ctx, 'allocation failed');
    if (Number.isInteger(signal) && signal > 0) {
      throw new ToolFailure(
        'execution',
        'TOOL_ERROR',
        `${id}'s process was ended by signal ${signal}${signal === SIGKILL ? ' (SIGKILL)' : ''} before it replied`,
        {
          details: { signal },
        },
      );
    }
    throw new ToolFailure(
      'execution',
      'TOOL_ERROR',
      `${id}'s process exited (code ${String(frame.exit)}) without a reply: did it exit, exec another program or close its channel?`,
      {
        details: { exit: frame.exit },
      },
    );
  }

  #memory(ctx: RunContext, why: string): ToolFailure {
    const mb = ctx.limits.memory_mb;
    return new ToolFailure('execution', 'MEMORY_LIMIT', `${ctx.tool.spec.id} exceeded its memory limit of ${mb} MB (${why})`, {
      details: { memory_mb: mb },
    });
  }

  #failAll(code: number | null, signal: NodeJS.Signals | null): void {
    const how = signal ? `signal ${signal}` : `exit code ${code}`;
    this.#calls.failAll(() =>
      this.#stopping
        ? new ToolFailure('execution', 'UNAVAILABLE', 'The Python runner was shut down while the tool ran')
        : new ToolFailure('execution', 'UNAVAILABLE', `The Python sandbox stopped (${how}); it is replaced and the call can be retried`),
    );
  }

  #busy(): void {
    this.#child.ref();
    for (const stream of [this.#child.stdio[2], this.#child.stdio[4]]) (stream as unknown as { ref?: () => void } | null)?.ref?.();
  }

  #idle(): void {
    if (this.#calls.size > 0) return;
    if (this.#retiring && !this.#stopping) {
      void this.close();
      return;
    }
    this.#child.unref();
    for (const stream of [this.#child.stdio[2], this.#child.stdio[3], this.#child.stdio[4]]) {
      (stream as unknown as { unref?: () => void } | null)?.unref?.();
    }
  }
}
