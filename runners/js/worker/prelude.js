// In-isolate code: runs first in every fresh context, before any tool code, and evaluates to `install`.
// The worker (setup-script.mjs) wraps this file and wasm-guard.js into one strict-mode script, so this
// file is a single expression and has no directive of its own.
//
// Tool code shares this context and may replace any global or prototype once it runs, so everything
// here that runs after tool code uses only what it captured at the top: intrinsics are called through
// `apply`, internal state lives in closure variables or null-prototype objects, and values are
// written with `defineProperty` (an assignment could reach a setter a tool put on a prototype).
// Strict mode keeps `caller`/`arguments` and CallSite#getFunction/getThis from exposing these frames.
//
// Nothing defined here reaches tool code except the `ctx` object, `console` and the WebAssembly
// wrappers (see wasm-guard.js), all frozen strict functions. The two host callbacks given to
// `install` are plain functions made by isolated-vm; they copy their arguments and return nothing.
(() => {
  const R = Reflect;
  const apply = R.apply;
  const ownKeys = R.ownKeys;
  const getDesc = R.getOwnPropertyDescriptor;
  const getProto = R.getPrototypeOf;
  const hasOwn = Object.hasOwn;
  const defineProp = R.defineProperty;
  const freeze = Object.freeze;
  const isArray = Array.isArray;
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const objectToString = Object.prototype.toString;
  const CMap = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapDelete = Map.prototype.delete;
  const mapSize = getDesc(Map.prototype, 'size').get;
  const CSet = Set;
  const setAdd = Set.prototype.add;
  const setHas = Set.prototype.has;
  const setDelete = Set.prototype.delete;
  const CPromise = Promise;
  const CError = Error;
  const RangeErrorProto = RangeError.prototype;
  const strSlice = String.prototype.slice;
  const strCharCodeAt = String.prototype.charCodeAt;
  const symbolToString = Symbol.prototype.toString;
  const numberIsFinite = Number.isFinite;
  const jsonStringify = JSON.stringify;
  const G = globalThis;

  const call = (fn, self, ...args) => apply(fn, self, args);
  const data = (value) => ({ __proto__: null, value, writable: true, enumerable: true, configurable: true });
  const push = (list, value) => defineProp(list, list.length, data(value));
  const clip = (text, max) => (text.length > max ? `${call(strSlice, text, 0, max)}…` : text);

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

  /** A line of text for any value, never throwing (tool getters and toString run here, under the call's timeout). */
  function show(value, depth) {
    try {
      switch (typeof value) {
        case 'string':
          return depth === 0 ? value : jsonStringify(value);
        case 'symbol':
          return call(symbolToString, value);
        case 'bigint':
          return `${value}n`;
        case 'function':
          return '[Function]';
        case 'object':
          break;
        default:
          return `${value}`;
      }
      if (value === null) return 'null';
      // An error's stack is an own data property up to V8 12 and an own accessor from V8 13 (Node 24).
      const d = getDesc(value, 'stack');
      const stack = d === undefined ? undefined : hasOwn(d, 'value') ? d.value : d.get ? call(d.get, value) : undefined;
      if (typeof stack === 'string') return stack;
      if (depth > 2) return isArray(value) ? '[Array]' : '[Object]';
      const keys = ownKeys(value);
      const parts = [];
      for (let i = 0; i < keys.length && i < 50; i++) {
        const key = keys[i];
        if (typeof key !== 'string') continue;
        const d = getDesc(value, key);
        if (!d?.enumerable) continue;
        const shown = hasOwn(d, 'value') ? show(d.value, depth + 1) : '[Getter/Setter]';
        push(parts, isArray(value) ? shown : `${key}: ${shown}`);
      }
      let text = '';
      for (let i = 0; i < parts.length; i++) text += (i ? ', ' : '') + parts[i];
      if (keys.length > 50) text += ', …';
      return isArray(value) ? `[${text}]` : `{ ${text} }`;
    } catch {
      return '[unprintable]';
    }
  }

  /** A JSON pointer segment, escaped without String.prototype.replace (a tool may have replaced it). */
  function pointerOf(path) {
    let out = '';
    for (let i = 0; i < path.length; i++) {
      const segment = `${path[i]}`;
      let escaped = '';
      for (let j = 0; j < segment.length; j++) {
        const c = call(strCharCodeAt, segment, j);
        escaped += c === 126 ? '~0' : c === 47 ? '~1' : call(strSlice, segment, j, j + 1);
      }
      out += `/${escaped}`;
    }
    return out || '/';
  }

  /**
   * Checks that a tool's return value is plain JSON within `maxBytes`, reading only own data properties
   * (never calling a getter). Returns null, or [code, reason, pointer]. A Proxy passes its traps here but
   * is refused when the value is copied out (V8's serializer does not clone proxies).
   */
  function checkOutput(root, maxBytes) {
    const path = [];
    const ancestors = new CSet();
    let bytes = 0;
    const fail = (code, reason) => [code, reason, pointerOf(path)];
    const walk = (value) => {
      switch (typeof value) {
        case 'string':
          bytes += value.length + 2;
          break;
        case 'number':
          if (!numberIsFinite(value)) return fail('INVALID_OUTPUT', `${value} is not a JSON number`);
          bytes += 8;
          break;
        case 'boolean':
          bytes += 5;
          break;
        case 'undefined':
          return fail('INVALID_OUTPUT', 'undefined is not a JSON value');
        case 'bigint':
          return fail('INVALID_OUTPUT', 'a BigInt is not a JSON value (return it as a string)');
        case 'object':
          if (value === null) {
            bytes += 4;
            break;
          }
          return walkObject(value);
        default:
          return fail('INVALID_OUTPUT', `a ${typeof value} is not a JSON value`);
      }
      return bytes > maxBytes ? fail('OUTPUT_LIMIT', `the output is larger than ${maxBytes} bytes of JSON`) : null;
    };
    const walkObject = (value) => {
      if (call(setHas, ancestors, value)) return fail('INVALID_OUTPUT', 'the value contains a cycle');
      if (path.length >= 1000) return fail('OUTPUT_LIMIT', 'the output is nested deeper than 1000 levels');
      const proto = getProto(value);
      const array = isArray(value);
      if (array ? proto !== ArrayProto : proto !== ObjectProto && proto !== null) {
        let kind = 'object';
        try {
          kind = call(strSlice, call(objectToString, value), 8, -1);
        } catch {}
        return fail('INVALID_OUTPUT', `a ${kind} instance is not plain JSON`);
      }
      call(setAdd, ancestors, value);
      bytes += 2;
      const keys = ownKeys(value);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (typeof key === 'symbol') return fail('INVALID_OUTPUT', 'symbol keys are not JSON');
        const d = getDesc(value, key);
        if (!d?.enumerable) continue;
        push(path, key);
        // A descriptor from getOwnPropertyDescriptor has own fields; `in` would also see a tool's Object.prototype.value.
        if (!hasOwn(d, 'value')) return fail('INVALID_OUTPUT', 'accessor properties (getters and setters) are not plain JSON');
        bytes += array ? 1 : key.length + 4;
        const problem = walk(d.value);
        if (problem) return problem;
        path.length -= 1;
      }
      if (array) {
        for (let i = 0; i < value.length; i++) {
          if (!getDesc(value, i)) {
            push(path, i);
            return fail('INVALID_OUTPUT', 'arrays must not have holes');
          }
        }
      }
      call(setDelete, ancestors, value);
      return bytes > maxBytes ? fail('OUTPUT_LIMIT', `the output is larger than ${maxBytes} bytes of JSON`) : null;
    };
    return walk(root);
  }

  /** [name, message, stack] of anything thrown ('' name: not an Error); reads tool getters inside try, never throws. */
  function describe(thrown) {
    if (thrown === null || (typeof thrown !== 'object' && typeof thrown !== 'function')) {
      const text = typeof thrown === 'string' ? thrown : show(thrown, 1);
      return ['', clip(`${text}`, 8192), ''];
    }
    let name = '';
    let message = '';
    let stack = '';
    try {
      const n = thrown.name;
      if (typeof n === 'string') name = clip(n, 200);
    } catch {}
    try {
      const m = thrown.message;
      message = typeof m === 'string' ? m : show(thrown, 1);
    } catch {
      message = 'the thrown value could not be read';
    }
    try {
      const s = thrown.stack;
      if (typeof s === 'string') stack = s;
    } catch {}
    return [name, clip(message, 8192), clip(stack, 16384)];
  }

  /**
   * Connects this context to the worker. `hostSend` and `hostDone` are shared by every context of the
   * isolate (ignored-mode isolated-vm callbacks: they copy their arguments and return nothing); `serial`
   * tells the worker which context speaks, so a context whose call has ended is not heard.
   */
  return function install(hostSend, hostDone, memoryMb, logCap, serial, guardWasm) {
    // Fixed arity, no spread: spreading would use Array.prototype[Symbol.iterator], which tools can replace.
    const send = (op, rid, a, b) => hostSend(serial, op, rid, a, b);
    const done = (kind, a, b, c) => hostDone(serial, kind, a, b, c);
    const pending = new CMap();
    let nextRequest = 1;
    let started = false;
    let closed = false;
    let logBytes = 0;
    let logsDropped = 0;
    const MAX_PENDING = 256;

    const finish = (kind, a, b, c) => {
      if (closed) return;
      closed = true;
      if (logsDropped > 0) send('dropped', 0, logsDropped);
      try {
        done(kind, a, b, c);
      } catch (error) {
        // The value could not be copied out: a Proxy, or something V8 cannot clone.
        const [, message] = describe(error);
        done(2, 'INVALID_OUTPUT', `the output cannot be copied out of the sandbox (${message}); return plain JSON`, '/');
      }
    };

    const log = (level, args) => {
      if (closed) return;
      let text = '';
      for (let i = 0; i < args.length; i++) text += (i ? ' ' : '') + show(args[i], 0);
      if (logBytes >= logCap) {
        logsDropped++;
        return;
      }
      text = clip(text, logCap - logBytes);
      logBytes += text.length;
      send('log', 0, level, text);
    };

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
      return error;
    };

    /** One request to the host; the worker answers through `deliver`. */
    const request = (op, args) =>
      new CPromise((resolve, reject) => {
        if (closed) return reject(hostFailure({ code: 'CANCELLED', message: 'The call has ended; the VFS can no longer be used' }));
        if (call(mapSize, pending) >= MAX_PENDING) {
          return reject(hostFailure({ code: 'BUSY', message: `More than ${MAX_PENDING} VFS operations are pending; await some first` }));
        }
        const id = nextRequest++;
        try {
          send('vfs', id, op, args);
        } catch (error) {
          const [, message] = describe(error);
          return reject(hostFailure({ code: 'INVALID_INPUT', message: `ctx.vfs.${op}: the arguments cannot be sent to the host (${message})` }));
        }
        call(mapSet, pending, id, [resolve, reject]);
      });

    const vfs = freeze({
      read: (path, options) => request('read', [path, options]),
      write: (path, content, options) => request('write', [path, content, options]),
      list: (path, options) => request('list', [path, options]),
      stat: (path) => request('stat', [path]),
      exists: (path) => request('exists', [path]),
      delete: (path, options) => request('delete', [path, options]),
      mkdir: (path, options) => request('mkdir', [path, options]),
      move: (from, to, options) => request('move', [from, to, options]),
    });

    if (guardWasm) guardWasm((reason) => finish(3, reason, `${reason}: the tool exceeded its memory limit of ${memoryMb} MB`), memoryMb);

    const succeed = (value, outputBytes) => {
      const outcome = value === undefined ? null : value;
      const problem = checkOutput(outcome, outputBytes);
      if (problem) finish(2, problem[0], problem[1], problem[2]);
      else finish(0, outcome);
    };

    const fail = (thrown) => {
      const [name, message, stack] = describe(thrown);
      let rangeError = false;
      try {
        rangeError = thrown !== null && typeof thrown === 'object' && getProto(thrown) === RangeErrorProto;
      } catch {}
      // A wasm memory that cannot grow has reached its maximum, which the guard kept within the limit.
      const growFailed = call(strSlice, message, 0, 25) === 'WebAssembly.Memory.grow()';
      if (rangeError && (growFailed || call(setHas, ALLOCATION_FAILURES, message))) finish(3, message, message);
      else finish(1, name, message, stack);
    };

    async function run(fn, input, ctx, outputBytes) {
      let value;
      try {
        value = await apply(fn, undefined, [input, ctx]);
      } catch (thrown) {
        fail(thrown);
        return;
      }
      succeed(value, outputBytes);
    }

    let callInput;
    let callInfo = null;

    /** Called once, by the generated module that imports the tool, right after the tool's module evaluated. */
    function start(namespace) {
      if (started || callInfo === null) return;
      started = true;
      let fn;
      try {
        fn = namespace.default;
      } catch {}
      if (typeof fn !== 'function') {
        finish(4, 'The tool module must export a function as its default export: export default async function run(input, ctx) { … }');
        return;
      }
      const info = callInfo;
      const ctx = freeze({
        vfs,
        log: (...args) => log('info', args),
        tool: info.tool,
        runId: info.runId,
        traceId: info.traceId,
        limits: freeze(info.limits),
      });
      run(fn, callInput, ctx, info.outputBytes);
    }
    // The generated module "arium:start" takes this and deletes it before any tool code is evaluated
    // (it is imported first), so tool code never sees it.
    defineProp(G, '__ariumStart', { __proto__: null, value: start, writable: false, enumerable: false, configurable: true });

    function deliver(id, ok, payload) {
      const waiter = call(mapGet, pending, id);
      if (waiter === undefined) return;
      call(mapDelete, pending, id);
      if (closed) return;
      if (ok) waiter[0](payload);
      else waiter[1](hostFailure(payload));
    }

    /**
     * The worker's single entry into this context. 0: the call's input and facts, given before any tool
     * code runs. 1: the answer to a VFS request. 2: where the call is (0 not started, 1 running, 2 done).
     */
    return (kind, a, b, c) => {
      if (kind === 0) {
        if (callInfo === null) {
          callInput = a;
          callInfo = b;
        }
      } else if (kind === 1) {
        deliver(a, b, c);
      }
      return closed ? 2 : started ? 1 : 0;
    };
  };
})();
