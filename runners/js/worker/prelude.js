// Over 500 lines: the in-isolate code must be one script built from captured intrinsics; splitting it
// would add module boundaries tool code could observe or replace.
// In-isolate code: runs first in every fresh context, before any tool code. This file is a function of
// the helpers in values.js that returns `install`; the worker (setup-script.mjs) composes it with
// values.js and memory-guard.js into one strict-mode script, so it has no directive of its own.
//
// Tool code shares this context and may replace any global or prototype once it runs, so everything
// here that runs after tool code uses only what it captured at the top: intrinsics are called through
// `apply`, internal state lives in closure variables or null-prototype objects, and values are
// written with `defineProperty` (an assignment could reach a setter a tool put on a prototype).
// Strict mode keeps `caller`/`arguments` and CallSite#getFunction/getThis from exposing these frames.
//
// Nothing defined here reaches tool code except the `ctx` object, `console`, and the WebAssembly,
// ArrayBuffer and SharedArrayBuffer wrappers (see memory-guard.js), all strict functions. The two
// host callbacks given to `install` are plain functions made by isolated-vm; they copy their
// arguments and return nothing.
(values) => {
  const { show, describe, checkOutput, clip } = values;
  const R = Reflect;
  const apply = R.apply;
  const getDesc = R.getOwnPropertyDescriptor;
  const getProto = R.getPrototypeOf;
  const hasOwn = Object.hasOwn;
  // Descriptors are written with `__proto__: null` (no inherited get/set can be planted), which TypeScript does not model.
  const defineProp = /** @type {(target: any, key: PropertyKey, descriptor: object) => any} */ (R.defineProperty);
  const freeze = Object.freeze;
  const CMap = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapDelete = Map.prototype.delete;
  const mapSize = getDesc(Map.prototype, 'size').get;
  const CSet = Set;
  const setHas = Set.prototype.has;
  const CWeakMap = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const CPromise = Promise;
  const promiseThen = Promise.prototype.then;
  const CError = Error;
  const CProxy = Proxy;
  const CTypeError = TypeError;
  const RangeErrorProto = RangeError.prototype;
  const strSlice = String.prototype.slice;
  const jsonStringify = JSON.stringify;
  const jsonParse = JSON.parse;
  const isView = ArrayBuffer.isView;
  const viewLength = getDesc(getProto(Uint8Array.prototype), 'byteLength').get;
  const dataViewProto = DataView.prototype;
  const dvLength = getDesc(dataViewProto, 'byteLength').get;
  const abLength = getDesc(ArrayBuffer.prototype, 'byteLength').get;
  const sabLength = typeof SharedArrayBuffer === 'function' ? getDesc(SharedArrayBuffer.prototype, 'byteLength').get : null;
  const G = globalThis;

  const call = (fn, self, ...args) => apply(fn, self, args);
  const data = (value) => ({ __proto__: null, value, writable: true, enumerable: true, configurable: true });

  /** V8's own messages when an allocation is refused: the tool ran into its memory limit. */
  const ALLOCATION_FAILURES = new CSet([
    'Array buffer allocation failed',
    'Invalid string length',
    'Invalid typed array length',
    'Invalid array length',
  ]);

  // Deferred work that could run after the call has ended, inside the next call on this isolate.
  // `Atomics.waitAsync` schedules a timer; FinalizationRegistry callbacks run whenever GC decides.
  if (typeof Atomics === 'object') R.deleteProperty(Atomics, 'waitAsync');
  R.deleteProperty(G, 'FinalizationRegistry');

  // The symbol registry is the isolate's: shared by every context on it and never collected, so what
  // one call registered would stay, and fill the heap, for the calls after it on that isolate. Each
  // context gets a registry of its own (made on first use). Its symbols are ordinary ones, so unlike
  // registered symbols they may be WeakMap keys; nothing else tells them apart.
  let symbols = null;
  const CSymbol = Symbol;
  const symbolDescription = getDesc(CSymbol.prototype, 'description').get;
  const builtin = (value) => ({ __proto__: null, value, writable: true, enumerable: false, configurable: true });
  R.defineProperty(
    CSymbol,
    'for',
    builtin(
      {
        for(key) {
          const text = `${key}`;
          if (symbols === null) symbols = new CMap();
          let symbol = call(mapGet, symbols, text);
          if (symbol === undefined) {
            symbol = CSymbol(text);
            call(mapSet, symbols, text, symbol);
          }
          return symbol;
        },
      }.for,
    ),
  );
  R.defineProperty(
    CSymbol,
    'keyFor',
    builtin(
      {
        keyFor(symbol) {
          if (typeof symbol !== 'symbol') throw new CTypeError('Symbol.keyFor: the argument is not a symbol');
          if (symbols === null) return undefined;
          const key = call(symbolDescription, symbol);
          return key !== undefined && call(mapGet, symbols, key) === symbol ? key : undefined;
        },
      }.keyFor,
    ),
  );

  /**
   * Connects this context to the worker. `hostSend` and `hostDone` are shared by every context of the
   * isolate (ignored-mode isolated-vm callbacks: they copy their arguments and return nothing); `serial`
   * tells the worker which call speaks, so a call that has ended is not heard.
   *
   * A context runs one call, or, for a tool with a persistent context, one call after another. Each
   * call has a state of its own (`newCall`), and its `ctx` and everything reachable from it close over
   * that state only: a `ctx` a tool kept in a global from an earlier call finds its call closed, and is
   * refused, whatever call runs now.
   */
  return function install(hostSend, hostDone, memoryMb, logCap, firstSerial, guardMemory) {
    const newCall = (serial) => ({
      __proto__: null,
      serial,
      pending: new CMap(),
      nextRequest: 1,
      started: false,
      closed: false,
      logBytes: 0,
      logsDropped: 0,
      pendingBytes: 0,
      input: undefined,
      info: null,
      /** Log lines written before the call's facts came (modules evaluated ahead): sent when the call starts. */
      early: null,
      earlyCount: 0,
    });
    /** The call running now: where `console` writes and `deliver` answers go. */
    let current = newCall(firstSerial);
    // Fixed arity, no spread: spreading would use Array.prototype[Symbol.iterator], which tools can replace.
    const send = (state, op, rid, a, b) => hostSend(state.serial, op, rid, a, b);
    const done = (state, kind, a, b, c) => hostDone(state.serial, kind, a, b, c);
    const MAX_PENDING = 256;
    // What one call's pending VFS requests may carry to the host at once (strings' lengths and binary
    // contents; one larger request is taken when nothing else is pending), and how large any other
    // argument (options) may be as JSON. Checked here, before anything is copied out of the isolate:
    // each request is a copy in the sandbox process and another in the engine.
    const MAX_PENDING_BYTES = 64 * 1024 * 1024;
    const MAX_OPTION_BYTES = 64 * 1024;

    const finish = (state, kind, a, b, c) => {
      if (state.closed) return;
      state.closed = true;
      if (state.logsDropped > 0) send(state, 'dropped', 0, state.logsDropped);
      try {
        done(state, kind, a, b, c);
      } catch (error) {
        // The value could not be copied out: a Proxy, or something V8 cannot clone.
        const [, message] = describe(error);
        done(state, 2, 'INVALID_OUTPUT', `the output cannot be copied out of the sandbox (${message}); return plain JSON`, '/');
      }
    };

    const logTo = (state, level, args) => {
      if (state.closed) return;
      let text = '';
      for (let i = 0; i < args.length; i++) text += (i ? ' ' : '') + show(args[i], 0);
      if (state.logBytes >= logCap) {
        state.logsDropped++;
        return;
      }
      text = clip(text, logCap - state.logBytes);
      state.logBytes += text.length;
      if (state.info === null) {
        if (state.early === null) state.early = new CMap();
        call(mapSet, state.early, state.earlyCount++, [level, text]);
      } else {
        send(state, 'log', 0, level, text);
      }
    };
    // `console` belongs to the context, so it writes to the call running now.
    const log = (level, args) => logTo(current, level, args);

    const consoleObject = {};
    const levels = { __proto__: null, log: 'log', info: 'info', warn: 'warn', error: 'error', debug: 'log', trace: 'log' };
    for (const method of ['log', 'info', 'warn', 'error', 'debug', 'trace']) {
      const level = levels[method];
      defineProp(
        consoleObject,
        method,
        data((...args) => log(level, args)),
      );
    }
    defineProp(G, 'console', { __proto__: null, value: freeze(consoleObject), writable: true, enumerable: false, configurable: true });

    /**
     * The engine's code and details of each error `hostFailure` made, kept apart from the error itself
     * (whose fields a tool may change): an error of these the tool lets escape ends the call with them.
     */
    const hostCodes = new CWeakMap();

    /** The Error a tool sees when a host operation fails: `code` is one of the engine's error codes. */
    const hostFailure = (payload) => {
      const own = (key) => (payload !== null && typeof payload === 'object' && hasOwn(payload, key) ? payload[key] : undefined);
      const message = own('message');
      const code = own('code');
      const error = new CError(typeof message === 'string' ? message : 'The host operation failed');
      defineProp(error, 'name', { __proto__: null, value: 'VfsError', writable: true, enumerable: false, configurable: true });
      defineProp(error, 'code', data(typeof code === 'string' ? code : 'INTERNAL'));
      const details = own('details');
      if (details !== undefined) defineProp(error, 'details', data(details));
      call(weakSet, hostCodes, error, { __proto__: null, code: typeof code === 'string' ? code : 'INTERNAL', details });
      return error;
    };

    /** Bytes of an ArrayBuffer, SharedArrayBuffer, typed array or DataView, by the captured getters; -1 for anything else. */
    const binaryBytes = (value) => {
      if (isView(value)) return getProto(value) === dataViewProto ? call(dvLength, value) : call(viewLength, value);
      try {
        return call(abLength, value);
      } catch {}
      if (sabLength !== null) {
        try {
          return call(sabLength, value);
        } catch {}
      }
      return -1;
    };

    /**
     * A request's arguments as they go to the host, and the bytes they carry; or why they cannot go.
     * Strings and binary contents go as they are. Anything else (options) goes as a plain copy made
     * here through JSON, at most MAX_OPTION_BYTES of it: its getters run once, so what was measured is
     * what is sent. A value JSON cannot copy goes as it is, and the copy to the host refuses it.
     */
    const prepare = (op, args) => {
      let bytes = 0;
      for (let i = 0; i < args.length; i++) {
        const arg = args[i];
        if (typeof arg === 'string') {
          bytes += arg.length;
          continue;
        }
        if (arg === null || (typeof arg !== 'object' && typeof arg !== 'function')) continue;
        const binary = binaryBytes(arg);
        if (binary >= 0) {
          bytes += binary;
          continue;
        }
        let text;
        try {
          text = jsonStringify(arg);
        } catch {
          continue;
        }
        if (typeof text !== 'string') continue;
        if (text.length > MAX_OPTION_BYTES)
          return `ctx.vfs.${op}: argument ${i + 1} is ${text.length} bytes of JSON; at most ${MAX_OPTION_BYTES} are taken`;
        const copy = jsonParse(text);
        // An object whose toJSON gives a string or a number (a Date) would arrive as that value.
        if (copy === null || typeof copy !== 'object') {
          return `ctx.vfs.${op}: argument ${i + 1} is an object that JSON turns into ${copy === null ? 'null' : `a ${typeof copy}`}; pass that value itself`;
        }
        bytes += text.length;
        defineProp(args, i, data(copy));
      }
      return bytes;
    };

    /**
     * The Error is made in a reaction to the failed request, not where the failure is known: a reaction
     * of a promise the tool awaits carries the tool's frames ("at async run (tool.js:3:9)") in its stack.
     */
    const rethrow = (payload) => {
      throw hostFailure(payload);
    };

    /** One request of the call `state` to the host; the worker answers through `deliver`. A failure rejects with the host's payload. */
    const ask = (state, op, args) =>
      new CPromise((resolve, reject) => {
        if (state.closed) return reject({ code: 'CANCELLED', message: 'The call has ended; the VFS can no longer be used' });
        const pending = state.pending;
        if (call(mapSize, pending) >= MAX_PENDING) {
          const what = op === 'tool' ? 'tool calls' : 'VFS operations';
          return reject({ code: 'BUSY', message: `More than ${MAX_PENDING} ${what} are pending; await some first` });
        }
        const bytes = prepare(op, args);
        if (typeof bytes === 'string') return reject({ code: 'INVALID_INPUT', message: bytes });
        if (state.pendingBytes > 0 && state.pendingBytes + bytes > MAX_PENDING_BYTES) {
          const mb = MAX_PENDING_BYTES / (1024 * 1024);
          return reject({ code: 'BUSY', message: `More than ${mb} MB of VFS data is pending; await some operations first` });
        }
        const id = state.nextRequest++;
        try {
          send(state, 'vfs', id, op, args);
        } catch (error) {
          const [, message] = describe(error);
          return reject({ code: 'INVALID_INPUT', message: `ctx.vfs.${op}: the arguments cannot be sent to the host (${message})` });
        }
        state.pendingBytes += bytes;
        call(mapSet, pending, id, [resolve, reject, bytes]);
      });

    /** The `ctx.vfs` of one call: its functions reach that call's state and no other. */
    const vfsOf = (state) => {
      const request = (op, args) => call(promiseThen, ask(state, op, args), undefined, rethrow);
      return freeze({
        read: (path, options) => request('read', [path, options]),
        write: (path, content, options) => request('write', [path, content, options]),
        list: (path, options) => request('list', [path, options]),
        stat: (path) => request('stat', [path]),
        exists: (path) => request('exists', [path]),
        delete: (path, options) => request('delete', [path, options]),
        mkdir: (path, options) => request('mkdir', [path, options]),
        move: (from, to, options) => request('move', [from, to, options]),
      });
    };

    /**
     * The Error a program sees when a tool it called fails: the failed call's `code`, `stage`,
     * `retryable`, `tool` and `details`, as the engine reported them. Not one of `hostCodes`: a program
     * that lets it escape fails as its own error (TOOL_ERROR), with this message.
     */
    const toolFailure = (payload) => {
      const own = (key) => (payload !== null && typeof payload === 'object' && hasOwn(payload, key) ? payload[key] : undefined);
      const message = own('message');
      const error = new CError(typeof message === 'string' ? message : 'The tool call failed');
      defineProp(error, 'name', { __proto__: null, value: 'ToolError', writable: true, enumerable: false, configurable: true });
      const code = own('code');
      defineProp(error, 'code', data(typeof code === 'string' ? code : 'INTERNAL'));
      // One by one, not a loop over an array: a program may have replaced Array.prototype[Symbol.iterator].
      const copy = (key) => {
        const value = own(key);
        if (value !== undefined) defineProp(error, key, data(value));
      };
      copy('stage');
      copy('retryable');
      copy('tool');
      copy('details');
      return error;
    };
    const rethrowTool = (payload) => {
      throw toolFailure(payload);
    };
    const refuse = (code, message) => new CPromise((_, reject) => reject(toolFailure({ code, message })));

    /** One tool call of a program: its path ("fs\u0000read") and input go to the host as text. */
    const callTool = (state, path, input) => {
      let text;
      try {
        text = input === undefined ? '{}' : jsonStringify(input);
      } catch (error) {
        const [, message] = describe(error);
        return refuse('INVALID_INPUT', `The input cannot be made JSON (${message}); pass plain JSON`);
      }
      if (typeof text !== 'string') return refuse('INVALID_INPUT', 'The input must be a JSON value (an object for most tools)');
      return call(promiseThen, ask(state, 'tool', [path, text]), undefined, rethrowTool);
    };

    /**
     * `tools` and every property path below it (`tools.fs.read`): a function whose call calls the tool
     * the path names. The host maps the path to a tool id and answers whether it exists. It is read
     * only, and `then` is absent so that `await tools.fs` is not taken for a promise.
     */
    const refused = () => false;
    // The traps' object has no prototype: a program's changes to Object.prototype add no trap to it.
    const node = (state, path) =>
      new CProxy(
        () => {},
        /** @type {ProxyHandler<() => void>} */ ({
          __proto__: null,
          get: (_, key) => (typeof key !== 'string' || key === 'then' ? undefined : node(state, path === '' ? key : `${path}\u0000${key}`)),
          apply: (_, __, args) => callTool(state, path, args.length > 0 ? args[0] : undefined),
          set: refused,
          defineProperty: refused,
          deleteProperty: refused,
          setPrototypeOf: refused,
          preventExtensions: refused,
          construct: () => {
            throw new CTypeError('A tool is called as a function: await tools.fs.read({ path })');
          },
        }),
      );

    guardMemory((reason) => finish(current, 3, reason, `${reason}: the tool exceeded its memory limit of ${memoryMb} MB`), memoryMb);

    const succeed = (state, value, outputBytes) => {
      const outcome = value === undefined ? null : value;
      const problem = checkOutput(outcome, outputBytes);
      if (problem) finish(state, 2, problem[0], problem[1], problem[2]);
      else finish(state, 0, outcome);
    };

    const fail = (state, thrown) => {
      const [name, message, stack] = describe(thrown);
      let rangeError = false;
      try {
        rangeError = thrown !== null && typeof thrown === 'object' && getProto(thrown) === RangeErrorProto;
      } catch {}
      // A wasm memory that cannot grow has reached its maximum, which the guard kept within the limit;
      // the guard refuses a resizable buffer over the budget with V8's words and the reason after them.
      const growFailed = call(strSlice, message, 0, 25) === 'WebAssembly.Memory.grow()';
      const bufferRefused = call(strSlice, message, 0, 31) === 'Array buffer allocation failed:';
      // Only an object can be a WeakMap key; looking one up runs none of its code (no Proxy trap).
      const host = thrown !== null && (typeof thrown === 'object' || typeof thrown === 'function') ? call(weakGet, hostCodes, thrown) : undefined;
      if (rangeError && (growFailed || bufferRefused || call(setHas, ALLOCATION_FAILURES, message))) finish(state, 3, message, message);
      else if (host !== undefined) finish(state, 5, [host.code, host.details], message, stack);
      else finish(state, 1, name, message, stack);
    };

    async function run(state, fn, args, outputBytes) {
      let value;
      try {
        value = await apply(fn, undefined, args);
      } catch (thrown) {
        fail(state, thrown);
        return;
      }
      succeed(state, value, outputBytes);
    }

    /** The tool's default export, kept for the calls after the first in a persistent context. */
    let toolFn = null;
    /** The tool's namespace, when its modules were evaluated before the call came (pool.mjs, "ahead"). */
    let aheadNamespace = null;

    /** Runs the tool for the call `state`, with a `ctx` that is that call's alone. */
    const invoke = (state, fn) => {
      state.started = true;
      const info = state.info;
      // A code-mode program is a function of `tools` alone: it gets no ctx, so no VFS of its own.
      if (info.program) {
        run(state, fn, [node(state, '')], info.outputBytes);
        return;
      }
      const ctx = freeze({
        vfs: vfsOf(state),
        log: (...args) => logTo(state, 'info', args),
        tool: info.tool,
        runId: info.runId,
        traceId: info.traceId,
        limits: freeze({ timeout_ms: info.timeoutMs, memory_mb: info.memoryMb, output_bytes: info.outputBytes }),
      });
      run(state, fn, [state.input, ctx], info.outputBytes);
    };

    /** Called once, by the generated module that imports the tool, right after the tool's module evaluated. */
    function start(namespace) {
      const state = current;
      if (state.started || toolFn !== null || aheadNamespace !== null) return;
      if (state.info === null) {
        // Evaluated ahead of its call: the tool starts when the call's facts come (kind 4).
        aheadNamespace = namespace;
        return;
      }
      let fn;
      try {
        fn = namespace.default;
      } catch {}
      if (typeof fn !== 'function') {
        state.started = true;
        finish(state, 4, 'The tool module must export a function as its default export: export default async function run(input, ctx) { … }');
        return;
      }
      toolFn = fn;
      invoke(state, fn);
    }
    // The generated module "arium:start" takes this and deletes it before any tool code is evaluated
    // (it is imported first), so tool code never sees it.
    defineProp(G, '__ariumStart', { __proto__: null, value: start, writable: false, enumerable: false, configurable: true });

    function deliver(id, ok, payload) {
      const state = current;
      const waiter = call(mapGet, state.pending, id);
      if (waiter === undefined) return;
      call(mapDelete, state.pending, id);
      state.pendingBytes -= waiter[2];
      if (state.closed) return;
      if (ok) waiter[0](payload);
      else waiter[1](payload);
    }

    /**
     * The worker's single entry into this context. 0: the call's input and facts (tool, runId, traceId,
     * timeout_ms, memory_mb, output_bytes, whether it runs a code-mode program), given before any tool
     * code runs; the facts come as primitives and their objects are made here, on the isolate's thread when the tool starts, as
     * copying objects into a fresh context costs the worker's thread more. 1: the answer to a VFS
     * request. 2: where the call is (0 not started, 1 running, 2 done). 3: the next call of a persistent
     * context, once the call before it is over: its serial, then the input and facts as for 0; the
     * tool's function runs at once, with a new call state and a new `ctx`. 4: the call of a context whose
     * modules were evaluated ahead: its input and facts as for 0; the lines logged while they were
     * evaluated go out, then the tool starts. 5: whether this context is ready for 4 (1) or not (0).
     */
    const facts = (state, a, b, c, d, e, f, g, h) => {
      state.input = a;
      state.info = { __proto__: null, tool: b, runId: c, traceId: d, timeoutMs: e, memoryMb: f, outputBytes: g, program: h === true };
    };
    return (kind, a, b, c, d, e, f, g, h) => {
      if (kind === 0) {
        if (current.info === null) facts(current, a, b, c, d, e, f, g, h);
      } else if (kind === 1) {
        deliver(a, b, c);
      } else if (kind === 3 && toolFn !== null && current.closed) {
        current = newCall(a);
        facts(current, b, c, d, e, f, g, h, false);
        invoke(current, toolFn);
      } else if (kind === 4 && aheadNamespace !== null && current.info === null && !current.closed) {
        const state = current;
        facts(state, a, b, c, d, e, f, g, h);
        for (let i = 0; i < state.earlyCount; i++) {
          const line = call(mapGet, state.early, i);
          send(state, 'log', 0, line[0], line[1]);
        }
        const namespace = aheadNamespace;
        aheadNamespace = null;
        start(namespace);
      } else if (kind === 5) {
        return aheadNamespace !== null && current.info === null && !current.closed ? 1 : 0;
      }
      return current.closed ? 2 : current.started ? 1 : 0;
    };
  };
};
