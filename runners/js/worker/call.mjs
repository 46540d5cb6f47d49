// Over 500 lines: one call's whole life in the worker (lease, link, evaluate, relay, deadline, outcome)
// reads as one sequence; the persistent-context path shares every step but the lease.
import { requestBytes } from './host-gate.mjs';
import { link, release } from './link.mjs';
import { LoadError } from './loader.mjs';
import { SETUP_FILENAME } from './setup-script.mjs';

/**
 * One call in the worker: lease an isolate with a fresh context, link and evaluate the tool's modules,
 * start the tool through the prelude, relay its VFS requests to the host, and report one outcome.
 *
 * Everything that runs tool code (evaluate, invoke, deliver) is an async isolated-vm task on the
 * isolate's own thread, so this process stays free to serve other calls and to stop this one: on the
 * deadline, a cancel or a memory fault the isolate is disposed, which terminates whatever it runs
 * (loops, regexps, Atomics.wait, microtask floods).
 */

const VFS_OPS = new Set(['read', 'write', 'list', 'stat', 'exists', 'delete', 'mkdir', 'move']);
const LOG_LEVELS = new Set(['log', 'info', 'warn', 'error']);
/** VFS requests of one call being served by the host at once; the rest wait here, in order. */
const MAX_IN_FLIGHT = 16;
/** Write contents from this size on go to the engine on the bulk pipe as raw bytes, not base64. */
const BULK_MIN = 64 * 1024;

/** Whether a write with these options stores a string as UTF-8 (no encoding, or "utf8"). */
function writesText(options) {
  if (options === undefined || options === null) return true;
  if (typeof options !== 'object' || Array.isArray(options)) return false;
  return !Object.hasOwn(options, 'encoding') || options.encoding === undefined || options.encoding === 'utf8';
}
/** Requests one call may have queued here; the prelude already refuses more than 256 pending (and more than 64 MB). */
const MAX_QUEUED = 300;
/** After a result, how long the isolate may keep running what the tool left behind before it is disposed. */
const AFTER_RESULT_GRACE_MS = 250;
/** Heap a module needs per character of source, at most (source, bytecode, code cache): a generous bound. */
const CODE_TO_HEAP = 8;

const SANDBOX_FRAME = new RegExp(`\\((?:${SETUP_FILENAME}|arium:main|arium:start):|^\\s+at (?:${SETUP_FILENAME}|arium:main|arium:start):`);

/** Tool stacks keep only the tool's frames: nothing from the sandbox's own code or the host side of the boundary. */
export function toolStack(stack) {
  if (typeof stack !== 'string' || stack === '') return undefined;
  const kept = [];
  for (const line of stack.split('\n')) {
    if (line.includes('<isolated-vm boundary>')) break;
    if (!SANDBOX_FRAME.test(line)) kept.push(line);
  }
  const text = kept.join('\n');
  return text.length > 16_384 ? `${text.slice(0, 16_384)}…` : text;
}

/** A logged stack shows the tool's frames only. */
function sandboxFramesRemoved(text) {
  if (!text.includes('arium:')) return text;
  return text
    .split('\n')
    .filter((line) => !SANDBOX_FRAME.test(line))
    .join('\n');
}

function failure(code, message, extra = {}) {
  return { ok: false, error: { code, message, ...extra } };
}

export class CallRun {
  #msg;
  #deps;
  #deadline;
  #timer;
  #ended = false;
  #lease = null;
  #tasks = 0;
  #kill = null;
  #logs = [];
  #logBytes = 0;
  #dropped = 0;
  #queue = [];
  #inFlight = 0;
  /** Requests sent to the engine and not answered yet: rid -> the bytes they carried. */
  #flying = new Map();
  /** Requests of tool calls (a code-mode program's) not answered yet. */
  #toolCalls = new Set();
  #resume = () => this.#pump();
  #graceTimer = null;
  #released = false;
  #acquiring = false;
  /** Whether tool code ran in the leased context: a persistent one a call left untouched is not reset. */
  #touched = false;
  #ok = false;

  /** deps: { pool, persistent (persistent.mjs), loader, gate (host-gate.mjs), post(message), logCap, onFinished(run) } */
  constructor(msg, deps) {
    this.#msg = msg;
    this.#deps = deps;
    this.#deadline = Date.now() + msg.limits.timeout_ms;
    this.#timer = setTimeout(
      () => this.stop('TIMEOUT', `${msg.info.tool} did not finish within ${msg.limits.timeout_ms} ms`, { timeout_ms: msg.limits.timeout_ms }),
      msg.limits.timeout_ms,
    );
  }

  get id() {
    return this.#msg.id;
  }

  /** A code-mode program (code.run), which may call tools through the host: not a tool's module. */
  get #program() {
    return typeof this.#msg.program === 'string';
  }

  /** A tool whose context is kept between its calls (persistent.mjs); a program never is. */
  get #persistent() {
    return this.#msg.persistent === true && !this.#program;
  }

  get slot() {
    return this.#lease?.slot ?? null;
  }

  async start() {
    const { pool, loader } = this.#deps;
    const msg = this.#msg;
    let graph;
    let generated;
    try {
      graph = this.#program ? await loader.program(msg.program) : await loader.graph(msg.tool.entry, msg.tool.root);
      generated = loader.generated();
    } catch (error) {
      if (this.#ended) return;
      if (error instanceof LoadError) {
        const details = error.intrusion ? { phase: 'load', intrusion: error.intrusion } : { phase: 'load' };
        return this.#end(failure('TOOL_ERROR', error.message, { details }));
      }
      return this.#end(failure('INTERNAL', `The tool's modules could not be loaded: ${error?.message ?? error}`));
    }
    // Stopped (deadline, cancel) while its modules loaded: already answered and cleaned up.
    if (this.#ended) return;
    // V8 running out of memory while it compiles would stop this process's thread (or, for a large
    // graph, the isolate's) for good; code that could not fit the isolate's limit is refused before.
    if (graph.bytes * CODE_TO_HEAP > msg.limits.memory_mb * 1024 * 1024) {
      const mb = msg.limits.memory_mb;
      return this.#end(
        failure('TOOL_ERROR', `The tool's code (${graph.bytes} characters) is too large for its memory limit of ${mb} MB`, {
          details: { phase: 'load' },
        }),
      );
    }
    this.#acquiring = true;
    try {
      this.#lease = this.#persistent
        ? await this.#deps.persistent.acquire(msg.info.tool, msg.limits.memory_mb, graph)
        : await pool.acquire(msg.limits.memory_mb);
    } catch (error) {
      this.#acquiring = false;
      if (this.#ended) return this.#cleanup();
      return this.#end(failure('INTERNAL', `No sandbox could be prepared for the call: ${error?.message ?? error}`));
    }
    this.#acquiring = false;
    // Ended while waiting for an isolate (deadline, cancel): give it back untouched.
    if (this.#ended) return this.#cleanup();
    const { slot, context } = this.#lease;
    slot.call = this;
    this.#touched = true;
    if (this.#lease.kernel?.loaded) return this.#invoke();
    // A program is new each time, and a persistent context links its tool once: no warm context is worth linking for them.
    if (!this.#program && !this.#persistent) pool.hint(msg.limits.memory_mb, graph, generated, msg.limits.timeout_ms);
    if (context.ahead) {
      if (context.linked.graph === graph) return this.#startAhead();
      // Another tool's code ran in it: no other call may use it. A new one, made on this isolate now.
      await this.#replaceContext();
      if (this.#ended) return;
    }
    slot.serial = this.#lease.context.serial;
    let main;
    try {
      // No tool code has run in this context yet, so these steps run only the prelude and V8's linker.
      const { info, limits } = msg;
      const fresh = this.#lease.context;
      fresh.entry.applySync(
        undefined,
        [0, msg.input, info.tool, info.runId, info.traceId, limits.timeout_ms, limits.memory_mb, limits.output_bytes, this.#program],
        { arguments: { copy: true } },
      );
      if (fresh.linked && fresh.linked.graph !== graph) {
        release(fresh.linked);
        fresh.linked = null;
      }
      if (!fresh.linked) {
        const linked = await link(slot.isolate, fresh.context, graph, generated);
        if (this.#ended) {
          // Stopped while a large graph was compiled: the context and its isolate are gone already.
          release(linked);
          return;
        }
        fresh.linked = linked;
      }
      main = fresh.linked.main;
    } catch (error) {
      return this.#end(failure('TOOL_ERROR', `${error?.name ?? 'Error'}: ${error?.message ?? error}`, { details: { phase: 'link' } }));
    }
    // One isolate task evaluates the tool's modules and starts the tool (see GENERATED in loader.mjs).
    await this.#task(main.evaluate({ timeout: this.#remaining() }), 'evaluate');
    if (this.#ended) return;
    if (this.#state() === 0) this.#end(failure('TOOL_ERROR', 'The tool module did not finish loading: a top-level await never settled'));
  }

  /** A warm context whose modules were evaluated ahead for this tool: one isolate task starts it (prelude.js, kind 4). */
  async #startAhead() {
    const { slot, context } = this.#lease;
    slot.serial = context.serial;
    const { info, limits } = this.#msg;
    await this.#task(
      context.entry.apply(
        undefined,
        [4, this.#msg.input, info.tool, info.runId, info.traceId, limits.timeout_ms, limits.memory_mb, limits.output_bytes, false],
        { arguments: { copy: true } },
      ),
      'invoke',
    );
  }

  /** The leased context goes, unused, and a new one takes its place (made on the leased isolate). */
  async #replaceContext() {
    const old = this.#lease.context;
    release(old.linked);
    try {
      old.entry.release();
      old.context.release();
    } catch {}
    this.#lease.context = { context: null, entry: null, serial: 0, linked: null, ahead: false };
    try {
      this.#lease.context = await this.#deps.pool.context(this.#lease.slot);
    } catch (error) {
      if (!this.#ended) this.#end(failure('INTERNAL', `No sandbox could be prepared for the call: ${error?.message ?? error}`));
    }
  }

  /**
   * A later call of a persistent context, whose modules were evaluated by an earlier call: one isolate
   * task starts the tool with this call's own serial, input and `ctx` (prelude.js, kind 3).
   */
  async #invoke() {
    const { slot, context } = this.#lease;
    const serial = this.#deps.pool.nextSerial();
    slot.serial = serial;
    const { info, limits } = this.#msg;
    await this.#task(
      context.entry.apply(
        undefined,
        [3, serial, this.#msg.input, info.tool, info.runId, info.traceId, limits.timeout_ms, limits.memory_mb, limits.output_bytes],
        { arguments: { copy: true } },
      ),
      'invoke',
    );
  }

  /** Where the prelude says the call is: 0 the tool has not started, 1 it runs, 2 it has its outcome. */
  #state() {
    try {
      return this.#lease.context.entry.applySync(undefined, [2], { timeout: 1000 });
    } catch {
      return 2;
    }
  }

  #remaining() {
    return Math.max(1, this.#deadline - Date.now());
  }

  /** Tracks an isolated-vm task; a rejection ends the call unless it already has an outcome. */
  #task(promise, phase) {
    this.#tasks++;
    return promise.then(
      () => this.#taskDone(),
      (error) => {
        if (!this.#ended) this.#end(this.#classify(error, phase));
        this.#taskDone();
      },
    );
  }

  #taskDone() {
    this.#tasks--;
    if (this.#ended && this.#tasks === 0) this.#cleanup();
  }

  /** What a rejected isolated-vm task means for the call. */
  #classify(error, phase) {
    const message = typeof error?.message === 'string' ? error.message : '';
    if (message.includes('memory limit')) return this.#memoryFailure('the isolate reached its heap limit');
    if (message.includes('Script execution timed out')) {
      return failure('TIMEOUT', `${this.#msg.info.tool} did not finish within ${this.#msg.limits.timeout_ms} ms`, {
        details: { timeout_ms: this.#msg.limits.timeout_ms },
      });
    }
    if (message.includes('disposed')) return failure('INTERNAL', 'The sandbox isolate was lost while the tool ran');
    const thrown = error instanceof Error ? error : null;
    const text = thrown ? `${thrown.name}: ${thrown.message}` : `a non-Error value (${describeValue(error)})`;
    if (phase === 'evaluate' && this.#state() === 0) {
      return failure('TOOL_ERROR', `The tool module threw while loading: ${text}`, { stack: toolStack(thrown?.stack), details: { phase } });
    }
    return failure('TOOL_ERROR', `Unhandled promise rejection in the tool: ${text}`, { stack: toolStack(thrown?.stack), details: { phase } });
  }

  #memoryFailure(reason) {
    const mb = this.#msg.limits.memory_mb;
    return failure('MEMORY_LIMIT', `${this.#msg.info.tool} exceeded its memory limit of ${mb} MB (${reason})`, {
      details: { memory_mb: mb, reason },
    });
  }

  /** From the prelude (through an ignored callback): a log line, or a VFS request. */
  onSend(op, rid, a, b) {
    if (this.#ended) return;
    if (op === 'log') {
      if (this.#logBytes >= this.#deps.logCap) {
        this.#dropped++;
        return;
      }
      const text = sandboxFramesRemoved(String(b));
      this.#logBytes += text.length;
      const level = LOG_LEVELS.has(a) ? a : 'log';
      // A caller following the logs (an MCP client) hears each line now; otherwise they go with `done`.
      if (this.#msg.stream_logs === true) this.#deps.post({ t: 'log', id: this.id, level, message: text });
      else this.#logs.push({ level, message: text });
    } else if (op === 'dropped') {
      if (Number.isSafeInteger(a) && a > 0) this.#dropped += a;
    } else if (op === 'vfs' && Number.isSafeInteger(rid) && (VFS_OPS.has(a) || (a === 'tool' && this.#program)) && Array.isArray(b)) {
      if (this.#queue.length >= MAX_QUEUED) {
        this.#deliver(rid, false, { code: 'BUSY', message: `Too many ${a === 'tool' ? 'tool calls' : 'VFS operations'} are pending` });
        return;
      }
      const content = a === 'write' ? b[1] : undefined;
      if (ArrayBuffer.isView(content) && !(content instanceof Uint8Array)) {
        // Another typed array's bytes depend on the machine's byte order: the tool says which bytes it means.
        const kind = Object.prototype.toString.call(content).slice(8, -1);
        this.#deliver(rid, false, {
          code: 'INVALID_INPUT',
          message: `ctx.vfs.write: content is a ${kind}: pass a string, a Uint8Array or an ArrayBuffer (new Uint8Array(view.buffer, view.byteOffset, view.byteLength) writes its bytes as they are in memory)`,
        });
        return;
      }
      this.#queue.push({ rid, op: a, args: b, bytes: requestBytes(b) });
      this.#pump();
      if (a === 'tool') {
        this.#toolCalls.add(rid);
        this.#parkCheck();
      }
    }
  }

  #pump() {
    const gate = this.#deps.gate;
    while (this.#inFlight < MAX_IN_FLIGHT && this.#queue.length > 0 && !this.#ended) {
      if (!gate.admits(this.#queue[0].bytes)) {
        gate.wait(this.#resume);
        return;
      }
      const request = this.#queue.shift();
      gate.take(request.bytes);
      this.#flying.set(request.rid, request.bytes);
      this.#inFlight++;
      const message = { t: 'vfs', id: this.id, rid: request.rid, op: request.op, args: request.args };
      // The IPC channel carries JSON: large contents go as raw bytes on the bulk pipe just before the
      // message, smaller bytes as base64 in it, flagged.
      const content = request.op === 'write' ? request.args[1] : undefined;
      let bytes = null;
      if (content instanceof ArrayBuffer || ArrayBuffer.isView(content)) {
        bytes = content instanceof ArrayBuffer ? Buffer.from(content) : Buffer.from(content.buffer, content.byteOffset, content.byteLength);
      } else if (typeof content === 'string' && content.length >= BULK_MIN && this.#deps.postBulk && writesText(request.args[2])) {
        // Text the engine would encode as UTF-8 anyway (lone surrogates become U+FFFD either way).
        bytes = Buffer.from(content, 'utf8');
      }
      if (bytes !== null && bytes.length >= BULK_MIN && this.#deps.postBulk) {
        this.#deps.postBulk(bytes);
        message.args = [request.args[0], null, request.args[2]];
        message.blob = bytes.length;
      } else if (bytes !== null && typeof content !== 'string') {
        message.args = [request.args[0], bytes.toString('base64'), request.args[2]];
        message.binary = 1;
      }
      this.#deps.post(message);
    }
  }

  /** The host's answer to a VFS request. */
  onReply(msg) {
    this.#landed(msg.rid);
    this.#inFlight--;
    if (this.#ended) return;
    const value = msg.ok === true && msg.bytes === true ? new Uint8Array(Buffer.from(String(msg.value), 'base64')) : msg.value;
    this.#deliver(msg.rid, msg.ok === true, msg.ok === true ? value : msg.error);
    this.#pump();
    if (this.#toolCalls.delete(msg.rid)) this.#parkCheck();
  }

  /**
   * Whether the program waits on tools it called, told to the pool (pool.mjs park): those calls may
   * need isolates of this process themselves, so the program's does not count against the rotation
   * meanwhile. A VFS request needs no isolate; a call waiting on one counts until longCallMs.
   */
  #parkCheck() {
    const slot = this.#lease?.slot;
    if (!slot || this.#lease.kernel) return;
    this.#deps.pool.park(slot, this.#toolCalls.size > 0);
  }

  /** A request is answered (or its call is over): its room at the gate is given back. */
  #landed(rid) {
    const bytes = this.#flying.get(rid);
    if (bytes === undefined) return;
    this.#flying.delete(rid);
    this.#deps.gate.give(bytes);
  }

  #deliver(rid, ok, payload) {
    const entry = this.#lease?.context.entry;
    if (!entry || this.#ended) return;
    this.#task(entry.apply(undefined, [1, rid, ok, payload], { arguments: { copy: true }, timeout: this.#remaining() }), 'deliver');
  }

  /** From the prelude: the call's one outcome (see prelude.js `finish`). */
  onDone(kind, a, b, c) {
    if (this.#ended) return;
    const tool = this.#msg.info.tool;
    switch (kind) {
      case 0:
        return this.#end({ ok: true, data: a });
      case 1:
        if (a === '') return this.#end(failure('TOOL_ERROR', `The tool threw a non-Error value: ${b}`, { stack: toolStack(c) }));
        return this.#end(failure('TOOL_ERROR', `${a}: ${b}`, { stack: toolStack(c), details: { name: String(a) } }));
      case 2: {
        const code = a === 'OUTPUT_LIMIT' ? 'OUTPUT_LIMIT' : 'INVALID_OUTPUT';
        const message =
          code === 'OUTPUT_LIMIT' ? `The output of ${tool} is too large: ${b}` : `The output of ${tool} is not plain JSON at "${c}": ${b}`;
        return this.#end(failure(code, message, { details: { pointer: String(c), reason: String(b) } }));
      }
      case 3:
        this.#kill = 'memory';
        return this.#end(this.#memoryFailure(String(a)));
      case 5:
        // A ctx.vfs failure the tool did not catch: the engine decides which codes the call may end with.
        return this.#end(failure(String(a?.[0]), String(b), { stack: toolStack(c), details: { ...a?.[1], uncaught: true } }));
      default:
        return this.#end(failure('TOOL_ERROR', String(a)));
    }
  }

  /** Ends the call from outside: deadline, cancel, host-side denial, lost isolate. The isolate is disposed. */
  stop(code, message, details) {
    if (this.#ended) return;
    this.#kill = code;
    this.#end(failure(code, message, details ? { details } : {}));
  }

  /** The isolate died of a catastrophic V8 error (out of memory in a way V8 cannot recover from). */
  catastrophe() {
    this.#kill = 'catastrophe';
    this.#end(this.#memoryFailure('V8 could not allocate memory; the sandbox process is being replaced'));
    // Its isolated-vm task never settles (the thread is parked): nothing to wait for.
    this.#cleanup();
  }

  #end(outcome) {
    if (this.#ended) return;
    this.#ended = true;
    this.#ok = outcome.ok === true;
    clearTimeout(this.#timer);
    const message = { t: 'done', id: this.id, ...outcome, logs: this.#logs, dropped: this.#dropped };
    this.#deps.post(message);
    if (!this.#lease) {
      if (!this.#acquiring) this.#cleanup();
      return;
    }
    if (this.#kill !== null && this.#kill !== 'catastrophe') this.#dispose();
    if (this.#tasks === 0) this.#cleanup();
    else if (this.#kill === null) {
      // The tool returned, yet the isolate is still busy (work left running, a microtask flood): it gets
      // a moment to settle, then goes.
      this.#graceTimer = setTimeout(() => this.#dispose(), AFTER_RESULT_GRACE_MS);
    }
  }

  #dispose() {
    this.#kill ??= 'dispose';
    try {
      this.#lease?.slot.isolate.dispose();
    } catch {}
  }

  #cleanup() {
    if (this.#released) return;
    this.#released = true;
    // Answers still on their way will not be heard (the call is gone from the worker's table).
    this.#deps.gate.forget(this.#resume);
    for (const rid of [...this.#flying.keys()]) this.#landed(rid);
    this.#queue = [];
    clearTimeout(this.#graceTimer);
    clearTimeout(this.#timer);
    const lease = this.#lease;
    if (lease?.kernel) {
      if (lease.slot.call === this) lease.slot.call = null;
      // Kept only after a call that ended with its result and left nothing running; a call that ended
      // before its tool ran (its deadline passed while it waited its turn) leaves the context as it was.
      this.#deps.persistent.release(lease.kernel, this.#touched ? this.#ok && this.#kill === null : lease.kernel.loaded);
    } else if (lease) {
      if (lease.slot.call === this) lease.slot.call = null;
      if (this.#kill !== 'catastrophe') {
        release(lease.context.linked);
        try {
          lease.context.entry.release();
          lease.context.context.release();
        } catch {
          // Already gone with a disposed isolate.
        }
        this.#deps.pool.release(lease.slot, this.#kill !== null);
      }
    }
    this.#deps.onFinished(this);
  }
}

function describeValue(value) {
  try {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    return text === undefined ? String(value) : text.length > 200 ? `${text.slice(0, 200)}…` : text;
  } catch {
    return typeof value;
  }
}
