// In-isolate code: how the prelude reads values a tool made (its result, what it throws, what it
// logs) without trusting them. Evaluates to { show, describe, checkOutput, clip }; composed by
// setup-script.mjs with the other in-isolate files into one strict-mode script, before any tool code.
// Like the prelude, it uses only intrinsics captured here, before tool code can replace them.
(() => {
  const R = Reflect;
  const apply = R.apply;
  const ownKeys = R.ownKeys;
  const getDesc = R.getOwnPropertyDescriptor;
  const getProto = R.getPrototypeOf;
  const hasOwn = Object.hasOwn;
  const defineProp = R.defineProperty;
  const isArray = Array.isArray;
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const objectToString = Object.prototype.toString;
  const CSet = Set;
  const setAdd = Set.prototype.add;
  const setHas = Set.prototype.has;
  const setDelete = Set.prototype.delete;
  const strSlice = String.prototype.slice;
  const strCharCodeAt = String.prototype.charCodeAt;
  const symbolToString = Symbol.prototype.toString;
  const numberIsFinite = Number.isFinite;
  const jsonStringify = JSON.stringify;

  const call = (fn, self, ...args) => apply(fn, self, args);
  const data = (value) => ({ __proto__: null, value, writable: true, enumerable: true, configurable: true });
  const push = (list, value) => defineProp(list, list.length, data(value));
  const clip = (text, max) => (text.length > max ? `${call(strSlice, text, 0, max)}…` : text);

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
   * (never calling a getter). Returns null, or [code, reason, pointer].
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
    // A Proxy cannot be told from a plain object inside the isolate without running its traps (V8 has no
    // such test; its serializer refuses proxies when the output is copied out, whatever they answer
    // here). A trap, or anything else, that throws while the value is read ends the check here, at its
    // place: the output is not plain JSON.
    const walkObject = (value) => {
      const depth = path.length;
      try {
        return readObject(value);
      } catch {
        path.length = depth;
        return fail('INVALID_OUTPUT', 'reading this value threw: a Proxy or other exotic object is not plain JSON');
      }
    };
    const readObject = (value) => {
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

  return { show, describe, checkOutput, clip };
})();
