import { randomBytes } from 'node:crypto';
import { ModuleProblem } from './modules.mjs';

/**
 * One wasm call in the worker: the module (read and instrumented once, modules.mjs), an isolate with
 * it compiled (pool.mjs), its `_start` run by the WASI layer (wasi.js) with the input on stdin, and
 * one outcome from what it wrote and how it ended. File-system calls of the module block its isolate
 * while the engine serves them on the call's own VFS, as a JS tool's `ctx.vfs` requests are served.
 */

const PAGE = 65536;
/** Largest write sent inside the IPC message (as base64); larger ones go on the bulk pipe as raw bytes. */
const BULK_MIN = 64 * 1024;
/** Bytes of stderr kept for the error of a module that fails. */
const ERROR_TAIL = 2048;
/** `random_get` asks for at most this much per call (wasi-libc asks for 256 at most). */
const RANDOM_MAX = 1024 * 1024;

function failure(code, message, extra = {}) {
  return { ok: false, error: { code, message, ...extra } };
}

export class WasmCall {
  #msg;
  #deps;
  #timer;
  #deadline;
  #ended = false;
  #slot = null;
  #stopped = false;
  #rid = 0;
  #pending = new Map();
  #host = null;

  /** deps: { ivm, pool, modules, post, postBulk, logCap, maxFileBytes, hostStats, onFinished(call) } */
  constructor(msg, deps) {
    this.#msg = msg;
    this.#deps = deps;
    const { timeout_ms } = msg.limits;
    this.#deadline = Date.now() + timeout_ms;
    this.#timer = setTimeout(() => this.stop('TIMEOUT', `${msg.info.tool} did not finish within ${timeout_ms} ms`, { timeout_ms }), timeout_ms);
  }

  get id() {
    return this.#msg.id;
  }

  async start() {
    const { ivm, pool, modules } = this.#deps;
    const msg = this.#msg;
    const tool = msg.info.tool;
    let module;
    try {
      module = modules.get(msg.tool.entry);
    } catch (error) {
      if (error instanceof ModuleProblem)
        return this.#end(failure('TOOL_ERROR', `${tool} cannot be loaded: ${error.message}`, { details: { phase: 'load' } }));
      throw error;
    }
    const mb = msg.limits.memory_mb;
    const capPages = Math.floor((mb * 1024 * 1024) / PAGE);
    if (module.initialPages > capPages) {
      return this.#end(
        failure('MEMORY_LIMIT', `${tool} declares ${(module.initialPages * PAGE) / 1048576} MB of memory, more than its memory limit of ${mb} MB`, {
          details: { memory_mb: mb, reason: 'the module declares more memory than the limit' },
        }),
      );
    }
    this.#slot = await pool.acquire();
    if (this.#ended) return this.#release();
    const slot = this.#slot;
    if (!slot.compiled.has(module.hash)) {
      const problem = await slot.compile.apply(undefined, [module.hash, module.bytes.copyInto({ release: false })], {
        timeout: this.#remaining(),
      });
      if (this.#ended) return this.#release();
      if (problem) return this.#end(failure('TOOL_ERROR', `${tool} cannot be loaded: ${problem}`, { details: { phase: 'load' } }));
      slot.compiled.add(module.hash);
    }
    const input = new TextEncoder().encode(`${JSON.stringify(msg.input)}\n`);
    const cfg = {
      input,
      args: msg.setup.args,
      env: msg.setup.env,
      preopens: msg.setup.preopens,
      capPages,
      outputBytes: msg.limits.output_bytes,
      logBytes: this.#deps.logCap,
      maxFileBytes: this.#deps.maxFileBytes,
    };
    this.#host = new ivm.Reference((op, args) => this.#hostCall(op, args));
    let result;
    try {
      result = await slot.run.apply(undefined, [module.hash, new ivm.ExternalCopy(cfg).copyInto(), this.#host], {
        timeout: this.#remaining(),
        result: { copy: true },
      });
    } catch (error) {
      if (!this.#ended) this.#end(this.#classify(error));
      return this.#release();
    }
    if (!this.#ended) this.#end(this.#outcome(result));
    this.#release();
  }

  #remaining() {
    return Math.max(1, this.#deadline - Date.now());
  }

  /** What the isolate's `run` rejecting means: the isolate was disposed (deadline, memory) or timed out. */
  #classify(error) {
    const message = String(error?.message ?? error);
    const { tool } = this.#msg.info;
    if (message.includes('memory limit')) {
      return failure('MEMORY_LIMIT', `${tool} exceeded the memory of its WASI layer (the isolate reached its heap limit)`, {
        details: { memory_mb: this.#msg.limits.memory_mb, reason: 'the isolate reached its heap limit' },
      });
    }
    if (message.includes('timed out')) {
      const { timeout_ms } = this.#msg.limits;
      return failure('TIMEOUT', `${tool} did not finish within ${timeout_ms} ms`, { details: { timeout_ms } });
    }
    return failure('INTERNAL', `The wasm sandbox failed while running the tool: ${message}`);
  }

  #outcome(r) {
    const { tool } = this.#msg.info;
    const mb = this.#msg.limits.memory_mb;
    if (r.kind === 'ran') r.stderr = new TextDecoder().decode(r.stderr);
    const logs = r.kind === 'ran' ? this.#logs(r) : [];
    const withLogs = (outcome) => ({ ...outcome, logs, dropped: r.stderrDropped > 0 ? 1 : 0 });
    if (r.kind === 'ran') this.#deps.hostStats.record(r.hostCalls, r.hostMs);
    if (r.kind === 'link') return failure('TOOL_ERROR', `${tool} cannot be loaded: ${r.message}`, { details: { phase: 'load' } });
    if (r.kind !== 'ran') return failure('INTERNAL', 'The wasm module was not compiled in its isolate');
    const tail = r.stderr.length > ERROR_TAIL ? `…${r.stderr.slice(-ERROR_TAIL)}` : r.stderr;
    const said = tail.trim() === '' ? '' : `: ${tail.trim()}`;
    if (r.stop)
      return withLogs(failure(r.stop.code, `${r.stop.code === 'OUTPUT_LIMIT' ? `The output of ${tool} is too large: ` : ''}${r.stop.message}`));
    if (r.over > 0) {
      return withLogs(
        failure(
          'MEMORY_LIMIT',
          `${tool} exceeded its memory limit of ${mb} MB (it asked for ${r.over} more pages of 64 KiB with ${r.pages} in use)`,
          {
            details: { memory_mb: mb, reason: 'the module grew its memory past the limit' },
          },
        ),
      );
    }
    if (r.trap?.ours) return withLogs(failure('INTERNAL', `The WASI layer failed while running ${tool}: ${r.trap.message}`));
    if (r.trap) {
      const overflow = /call stack/i.test(r.trap.message);
      const what = overflow ? 'overflowed its stack (recursion too deep)' : `trapped (${r.trap.name}: ${r.trap.message})`;
      return withLogs(failure('TOOL_ERROR', `${tool} ${what}${said}`, { stack: wasmStack(r.trap.stack), details: { trap: r.trap.message } }));
    }
    if (r.exit !== 0) return withLogs(failure('TOOL_ERROR', `${tool} exited with code ${r.exit}${said}`, { details: { exit_code: r.exit } }));
    const text = new TextDecoder().decode(r.stdout).trim();
    if (text === '') {
      return withLogs(
        failure('INVALID_OUTPUT', `${tool} wrote nothing on stdout: a wasm tool writes its result there as one JSON value`, {
          details: { pointer: '', reason: 'empty stdout' },
        }),
      );
    }
    try {
      return withLogs({ ok: true, data: JSON.parse(text) });
    } catch (error) {
      const shown = text.length > 200 ? `${text.slice(0, 200)}…` : text;
      return withLogs(
        failure('INVALID_OUTPUT', `The output of ${tool} is not JSON (${error.message}); stdout began: ${shown}`, {
          details: { pointer: '', reason: 'stdout is not JSON' },
        }),
      );
    }
  }

  #logs(r) {
    if (r.stderr === '') return [];
    return r.stderr
      .replace(/\n$/, '')
      .split('\n')
      .map((message) => ({ level: 'log', message }));
  }

  /** A WASI call that needs the host: served here (random) or by the engine (the VFS). Resolves with a copy for the isolate. */
  #hostCall(op, args) {
    const { ivm } = this.#deps;
    const answer = (value) => new ivm.ExternalCopy(value).copyInto();
    if (this.#ended) return answer({ stop: { code: 'CANCELLED', message: 'The call was stopped' } });
    if (op === 'random') {
      const n = Number(args?.[0]);
      if (!Number.isSafeInteger(n) || n < 0 || n > RANDOM_MAX) return answer({ ok: false, error: { code: 'INVALID_INPUT' } });
      return answer({ ok: true, value: new Uint8Array(randomBytes(n)) });
    }
    const rid = ++this.#rid;
    const message = { t: 'vfs', id: this.id, rid, op, args };
    if (op === 'write' && args?.[1] instanceof Uint8Array) {
      const bytes = Buffer.from(args[1].buffer, args[1].byteOffset, args[1].byteLength);
      if (bytes.length >= BULK_MIN && this.#deps.postBulk) {
        this.#deps.postBulk(bytes);
        message.args = [args[0], null, args[2]];
        message.blob = bytes.length;
      } else {
        message.args = [args[0], bytes.toString('base64'), args[2]];
        message.binary = 1;
      }
    }
    return new Promise((resolve) => {
      this.#pending.set(rid, (reply) => {
        if (this.#ended) return resolve(answer({ stop: { code: 'CANCELLED', message: 'The call was stopped' } }));
        const value = reply.ok === true && reply.bytes === true ? new Uint8Array(Buffer.from(String(reply.value), 'base64')) : reply.value;
        resolve(answer(reply.ok === true ? { ok: true, value } : { ok: false, error: reply.error }));
      });
      this.#deps.post(message);
    });
  }

  onReply(msg) {
    const resolve = this.#pending.get(msg.rid);
    this.#pending.delete(msg.rid);
    resolve?.(msg);
  }

  /** Ends the call from outside (deadline, cancel, a refused VFS request): its isolate is disposed. */
  stop(code, message, details) {
    if (this.#ended) return;
    this.#stopped = true;
    this.#end(failure(code, message, details ? { details } : {}));
    try {
      this.#slot?.isolate.dispose();
    } catch {}
    // A VFS request waiting for its answer unblocks the (disposed) isolate's thread.
    for (const resolve of this.#pending.values()) resolve({ ok: false, error: { code: 'CANCELLED' } });
    this.#pending.clear();
    if (!this.#slot) this.#deps.onFinished(this);
  }

  #end(outcome) {
    if (this.#ended) return;
    this.#ended = true;
    clearTimeout(this.#timer);
    const { logs = [], dropped = 0, ...rest } = outcome;
    this.#deps.post({ t: 'done', id: this.id, ...rest, logs, dropped });
  }

  #release() {
    this.#host?.release();
    this.#host = null;
    if (this.#slot) {
      this.#deps.pool.release(this.#slot, this.#stopped);
      this.#slot = null;
    }
    this.#deps.onFinished(this);
  }
}

/** The wasm frames of a trap's stack (function indices and offsets), without the WASI layer's. */
function wasmStack(stack) {
  if (typeof stack !== 'string') return undefined;
  const frames = stack.split('\n').filter((line) => line.includes('wasm://') || line.includes('wasm-function'));
  const text = frames.slice(0, 64).join('\n');
  return text === '' ? undefined : text;
}
