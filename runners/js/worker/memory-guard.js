// In-isolate code: evaluates to `guardMemory(onExceeded, memoryMb)`, which the prelude calls once per
// context before any tool code runs. Like prelude.js it is one expression, wrapped by the worker in a
// strict-mode script.
//
// Why: isolated-vm's `memoryLimit` counts the V8 heap and ArrayBuffers, but not the memory V8 reserves
// for growing later, outside that count: WebAssembly memories (a module can grow one to 4 GB) and
// resizable ArrayBuffers and growable SharedArrayBuffers (`new ArrayBuffer(1, { maxByteLength })`,
// then `resize()`: measured, 32 MB isolates held 1 GB this way). This guard charges every such memory
// against the call's budget (`memory_mb`) at the moment it could come into existence, at its largest
// possible size, so that growing it later (from JS or from inside wasm) can never exceed the budget:
// - `new WebAssembly.Memory(d)`: charged `d.maximum` pages (a missing maximum becomes what is left);
// - a module's own memories: a module must declare a maximum for each, charged per instance;
// - each compiled module is charged 4x its size for its machine code (V8 keeps it outside the heap);
// - `new ArrayBuffer(n, { maxByteLength })` and the same for SharedArrayBuffer: charged maxByteLength;
// - each `Intl` object, whose ICU state lives outside the heap (measured: 28 KB per DateTimeFormat, so
//   a 32 MB isolate's heap held over 1 GB of them): charged an estimate by kind (INTL_BYTES). `Intl`
//   is guarded when a tool first reaches it (most never do): until then it is an accessor on the
//   global, and the installer uses only what was captured before any tool code ran.
// Exceeding the budget with wasm or Intl ends the call with MEMORY_LIMIT (the tool cannot catch it), like the
// heap limit; a resizable buffer over the budget is refused like a plain ArrayBuffer that cannot be
// allocated, with a RangeError the tool may catch (MEMORY_LIMIT if it does not). Charges are never
// given back within a call. Async compilation runs synchronously here: a background compile finishing
// after the call has ended would resume tool code inside the next call on this isolate.
(() => {
  const W = typeof WebAssembly === 'object' && WebAssembly !== null ? WebAssembly : null;
  const G = globalThis;
  const R = Reflect;
  const construct = R.construct;
  // Descriptors are written with `__proto__: null` (no inherited get/set can be planted), which TypeScript does not model.
  const defineProp = /** @type {(target: any, key: PropertyKey, descriptor: object) => any} */ (R.defineProperty);
  const deleteProp = R.deleteProperty;
  const getDesc = R.getOwnPropertyDescriptor;
  const getProto = R.getPrototypeOf;
  const apply = R.apply;
  const ownKeys = R.ownKeys;
  const hasOwn = Object.hasOwn;
  const OrigModule = W?.Module;
  const OrigInstance = W?.Instance;
  const OrigMemory = W?.Memory;
  const CompileError = W?.CompileError;
  const OrigIntl = typeof Intl === 'object' && Intl !== null ? Intl : null;
  const OrigArrayBuffer = ArrayBuffer;
  const OrigSharedArrayBuffer = typeof SharedArrayBuffer === 'function' ? SharedArrayBuffer : null;
  const mathTrunc = Math.trunc;
  const speciesSymbol = Symbol.species;
  const numberIsNaN = Number.isNaN;
  const CPromise = Promise;
  const CU8 = Uint8Array;
  const CTypeError = TypeError;
  const CRangeError = RangeError;
  const CWeakMap = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const isView = ArrayBuffer.isView;
  const TypedArrayProto = /** @type {Uint8Array} */ (getProto(Uint8Array.prototype));
  const viewBuffer = getDesc(TypedArrayProto, 'buffer').get;
  const viewOffset = getDesc(TypedArrayProto, 'byteOffset').get;
  const viewLength = getDesc(TypedArrayProto, 'byteLength').get;
  const dataViewProto = DataView.prototype;
  const dvBuffer = getDesc(dataViewProto, 'buffer').get;
  const dvOffset = getDesc(dataViewProto, 'byteOffset').get;
  const dvLength = getDesc(dataViewProto, 'byteLength').get;
  const abLength = getDesc(ArrayBuffer.prototype, 'byteLength').get;
  const sabLength = typeof SharedArrayBuffer === 'function' ? getDesc(SharedArrayBuffer.prototype, 'byteLength').get : null;
  const u8Set = TypedArrayProto.set;
  const mathFloor = Math.floor;
  const mathMin = Math.min;
  const PAGE = 65536;
  const MAX_PAGES = 65536;
  const CODE_FACTOR = 4;
  /**
   * What each kind of Intl object is charged: twice the ICU memory one held here (20,000 of a kind
   * kept alive in a 32 MB isolate, growth of the process's RSS: DateTimeFormat with a time zone 28 KB,
   * RelativeTimeFormat 8 KB, Segmenter and v8BreakIterator 7 KB, PluralRules and Collator 2 KB, others
   * 1–1.5 KB); kinds not named here get the default. `segment()` makes a break iterator too.
   */
  const INTL_BYTES = { __proto__: null, DateTimeFormat: 65536, RelativeTimeFormat: 16384, Segmenter: 16384, v8BreakIterator: 16384 };
  const INTL_DEFAULT_BYTES = 4096;
  const SEGMENTS_BYTES = 8192;
  const call = (fn, self, ...args) => apply(fn, self, args);
  // Not Math.max: tool code may have replaced it by the time this runs.
  // biome-ignore lint/complexity/useMathMinMax: see above
  const larger = (a, b) => (a < b ? b : a);
  const hidden = (value) => ({ __proto__: null, value, writable: true, enumerable: false, configurable: true });

  /** A private copy of the module bytes: what is checked is exactly what is compiled. */
  function copyBytes(source) {
    let buffer;
    let offset = 0;
    let length;
    if (isView(source)) {
      const dataView = getProto(source) === dataViewProto;
      buffer = call(dataView ? dvBuffer : viewBuffer, source);
      offset = call(dataView ? dvOffset : viewOffset, source);
      length = call(dataView ? dvLength : viewLength, source);
    } else {
      try {
        length = call(abLength, source);
      } catch {
        if (sabLength === null) throw new CTypeError('WebAssembly: expected an ArrayBuffer or a typed array of module bytes');
        length = call(sabLength, source);
      }
      buffer = source;
    }
    const bytes = new CU8(length);
    call(u8Set, bytes, new CU8(buffer, offset, length));
    return bytes;
  }

  /** Bytes of linear memory one instance of the module may ever own; refuses memories without a maximum. */
  function memoryNeed(bytes) {
    // The captured getter: a tool may have shadowed `length` on Uint8Array.prototype to hide a section.
    const size = call(viewLength, bytes);
    let at = 8;
    const byte = () => {
      if (at >= size) throw new CompileError('WebAssembly module is truncated');
      return bytes[at++];
    };
    const leb = () => {
      let result = 0;
      let scale = 1;
      for (let i = 0; i < 10; i++) {
        const b = byte();
        result += (b & 0x7f) * scale;
        if ((b & 0x80) === 0) return result;
        scale *= 128;
      }
      throw new CompileError('WebAssembly module has a malformed number');
    };
    if (size < 8 || bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) {
      throw new CompileError('WebAssembly module does not start with the wasm magic number');
    }
    let need = 0;
    while (at < size) {
      const id = byte();
      const length = leb();
      const end = at + length;
      if (end > size) throw new CompileError('WebAssembly module is truncated');
      if (id === 5) {
        const count = leb();
        for (let i = 0; i < count; i++) {
          const flags = leb();
          const initial = leb();
          if ((flags & 1) === 0) {
            throw new CompileError(
              'WebAssembly memories must declare a maximum size in this sandbox (memory without a maximum could grow past the memory limit)',
            );
          }
          const maximum = leb();
          need += larger(initial, maximum) * PAGE;
        }
      }
      at = end;
    }
    return need;
  }

  /** The spec's ToIndex: what the constructor would make of `value`, converted once (getters run once). */
  function toIndex(value, what) {
    const number = +value;
    const integer = numberIsNaN(number) ? 0 : mathTrunc(number);
    if (integer < 0 || integer > 9007199254740991) throw new CRangeError(`Invalid array buffer ${what}`);
    return integer === 0 ? 0 : integer;
  }

  /**
   * A constructor in place of ArrayBuffer or SharedArrayBuffer that charges a resizable buffer's
   * maximum before making it; everything else goes to the original unchanged (subclasses included).
   */
  function guardBuffer(Orig, name, reserve) {
    const species = getDesc(Orig, speciesSymbol);
    const wrapper = {
      // One declared parameter, as the original's length says; the options come after it.
      [name]: function (length, ...rest) {
        if (new.target === undefined) throw new CTypeError(`Constructor ${name} requires 'new'`);
        const options = rest.length > 0 ? rest[0] : undefined;
        if (options === null || (typeof options !== 'object' && typeof options !== 'function')) return construct(Orig, [length], new.target);
        // In the constructor's own order: the length, then the option.
        const size = toIndex(length, 'length');
        const requested = options.maxByteLength;
        if (requested === undefined) return construct(Orig, [size], new.target);
        const maximum = toIndex(requested, 'max length');
        if (size > maximum) throw new CRangeError(`Invalid array buffer length: ${size} is over the maxByteLength ${maximum}`);
        reserve(maximum, name);
        return construct(Orig, [size, { __proto__: null, maxByteLength: maximum }], new.target);
      },
    }[name];
    // The statics (ArrayBuffer.isView, Symbol.species), named rather than listed: this runs for every call.
    if (name === 'ArrayBuffer') defineProp(wrapper, 'isView', hidden(isView));
    defineProp(wrapper, speciesSymbol, { __proto__: null, get: species.get, set: undefined, enumerable: false, configurable: true });
    defineProp(wrapper, 'prototype', { __proto__: null, value: Orig.prototype, writable: false, enumerable: false, configurable: false });
    defineProp(Orig.prototype, 'constructor', hidden(wrapper));
    defineProp(G, name, hidden(wrapper));
  }

  /**
   * Makes `Intl` an accessor that installs the Intl guard the first time anything reads it. The
   * installer may run after tool code: it touches only values captured before any tool code ran and
   * objects no tool could reach before (Intl and what hangs off it), with no iteration protocol.
   */
  function guardIntlOnFirstUse(charge) {
    let guarded = false;
    // Fails closed: if the guard could not be installed in full, there is no Intl for this call.
    let intl = OrigIntl;
    const settle = (value) => defineProp(G, 'Intl', { __proto__: null, value, writable: true, enumerable: false, configurable: true });
    const install = () => {
      if (guarded) return;
      guarded = true;
      try {
        guardIntl(charge);
      } catch {
        intl = undefined;
      }
    };
    defineProp(G, 'Intl', {
      __proto__: null,
      get: () => {
        install();
        settle(intl);
        return intl;
      },
      set: (value) => {
        install();
        settle(value);
      },
      enumerable: false,
      configurable: true,
    });
  }

  /**
   * A property descriptor without a prototype: one from getOwnPropertyDescriptor inherits from
   * Object.prototype, where a tool may have put a `get` or a `value` that defineProperty would read.
   */
  function plainDescriptor(desc) {
    const out = { __proto__: null, enumerable: desc.enumerable, configurable: desc.configurable };
    if (hasOwn(desc, 'value')) {
      out.value = desc.value;
      out.writable = desc.writable;
    } else {
      out.get = desc.get;
      out.set = desc.set;
    }
    return out;
  }

  /** Puts a charging wrapper in place of every Intl constructor and of Intl.Segmenter#segment. */
  function guardIntl(charge) {
    const keys = ownKeys(OrigIntl);
    for (let i = 0; i < keys.length; i++) {
      const name = keys[i];
      if (typeof name !== 'string') continue;
      const desc = getDesc(OrigIntl, name);
      const Orig = desc === undefined ? undefined : desc.value;
      if (typeof Orig !== 'function') continue;
      const protoDesc = getDesc(Orig, 'prototype');
      if (protoDesc === undefined || typeof protoDesc.value !== 'object' || protoDesc.value === null) continue;
      const proto = protoDesc.value;
      const bytes = INTL_BYTES[name] ?? INTL_DEFAULT_BYTES;
      const what = `Intl.${name} (ICU memory outside the heap, estimated)`;
      const wrapper = {
        // Called without `new`, the constructors that allow it make an object too (the original decides).
        [name]: function (...args) {
          charge(bytes, what);
          return new.target === undefined ? apply(Orig, this, args) : construct(Orig, args, new.target);
        },
      }[name];
      const statics = ownKeys(Orig);
      for (let j = 0; j < statics.length; j++) {
        const key = statics[j];
        if (key !== 'prototype' && key !== 'name') defineProp(wrapper, key, plainDescriptor(getDesc(Orig, key)));
      }
      defineProp(wrapper, 'prototype', { __proto__: null, value: proto, writable: false, enumerable: false, configurable: false });
      defineProp(proto, 'constructor', hidden(wrapper));
      defineProp(OrigIntl, name, hidden(wrapper));
      if (name === 'Segmenter') {
        const segmentDesc = getDesc(proto, 'segment');
        const origSegment = segmentDesc === undefined ? undefined : segmentDesc.value;
        if (typeof origSegment === 'function') {
          defineProp(
            proto,
            'segment',
            hidden(
              {
                segment(input) {
                  charge(SEGMENTS_BYTES, 'Intl.Segmenter.prototype.segment (ICU memory outside the heap, estimated)');
                  return apply(origSegment, this, [input]);
                },
              }.segment,
            ),
          );
        }
      }
    }
  }

  return function guardMemory(onExceeded, memoryMb) {
    let left = memoryMb * 1024 * 1024;
    /** Takes `bytes` from the call's budget; false, with nothing taken, when fewer are left. */
    const take = (bytes) => {
      if (bytes > left) return false;
      left -= bytes;
      return true;
    };
    /** Takes what `what` needs, or ends the call with MEMORY_LIMIT (the tool cannot catch it). */
    const charge = (bytes, what) => {
      if (take(bytes)) return;
      onExceeded(`${what} needs ${bytes} bytes, ${left} are left of the memory limit`);
      throw new CRangeError(`${what} exceeds the memory limit of ${memoryMb} MB`);
    };
    // Refused like an allocation V8 cannot make: a RangeError the tool may catch, MEMORY_LIMIT if it does not.
    const reserve = (bytes, name) => {
      if (take(bytes)) return;
      throw new CRangeError(
        `Array buffer allocation failed: a resizable ${name} of up to ${bytes} bytes is more than the ${left} bytes left of the memory limit of ${memoryMb} MB`,
      );
    };
    guardBuffer(OrigArrayBuffer, 'ArrayBuffer', reserve);
    if (OrigSharedArrayBuffer !== null) guardBuffer(OrigSharedArrayBuffer, 'SharedArrayBuffer', reserve);
    if (OrigIntl !== null) guardIntlOnFirstUse(charge);
    if (W === null) return;
    const perInstance = new CWeakMap();

    /** @constructor */
    function Module(source) {
      if (new.target === undefined) throw new CTypeError("WebAssembly.Module must be called with 'new'");
      const bytes = copyBytes(source);
      const need = memoryNeed(bytes);
      charge(call(viewLength, bytes) * CODE_FACTOR, 'WebAssembly module code');
      const module = construct(OrigModule, [bytes]);
      call(weakSet, perInstance, module, need);
      return module;
    }

    /** @constructor */
    function Instance(module, imports) {
      if (new.target === undefined) throw new CTypeError("WebAssembly.Instance must be called with 'new'");
      const need = call(weakGet, perInstance, module);
      if (need === undefined) throw new CTypeError('WebAssembly.Instance: the first argument must be a WebAssembly.Module');
      charge(need, 'WebAssembly memory');
      return construct(OrigInstance, [module, imports]);
    }

    /** @constructor */
    function Memory(descriptor) {
      if (new.target === undefined) throw new CTypeError("WebAssembly.Memory must be called with 'new'");
      if (descriptor === null || typeof descriptor !== 'object') throw new CTypeError('WebAssembly.Memory: the descriptor must be an object');
      const initial = descriptor.initial;
      const given = descriptor.maximum;
      const shared = descriptor.shared === true;
      if (typeof initial !== 'number' || initial < 0 || initial > MAX_PAGES) throw new CTypeError('WebAssembly.Memory: invalid initial size');
      const maximum = given === undefined ? mathMin(MAX_PAGES, mathFloor(left / PAGE)) : given;
      if (typeof maximum !== 'number' || maximum < initial || maximum > MAX_PAGES) throw new CRangeError('WebAssembly.Memory: invalid maximum size');
      charge(larger(initial, maximum) * PAGE, 'WebAssembly memory');
      return construct(OrigMemory, [{ __proto__: null, initial, maximum, shared }]);
    }

    const settle = (work) =>
      new CPromise((resolve, reject) => {
        try {
          resolve(work());
        } catch (error) {
          reject(error);
        }
      });
    const compile = (source) => settle(() => new Module(source));
    const instantiate = (source, imports) =>
      settle(() => {
        if (call(weakGet, perInstance, source) !== undefined) return new Instance(source, imports);
        const module = new Module(source);
        return { module, instance: new Instance(module, imports) };
      });

    for (const [name, wrapper, original] of /** @type {Array<[string, any, any]>} */ ([
      ['Module', Module, OrigModule],
      ['Instance', Instance, OrigInstance],
      ['Memory', Memory, OrigMemory],
    ])) {
      defineProp(wrapper, 'prototype', { __proto__: null, value: original.prototype, writable: false, enumerable: false, configurable: false });
      // `Object.getPrototypeOf(x).constructor` must not hand back the unguarded constructor.
      defineProp(original.prototype, 'constructor', hidden(wrapper));
      defineProp(W, name, hidden(wrapper));
    }
    for (const name of ['exports', 'imports', 'customSections']) defineProp(Module, name, hidden(OrigModule[name]));
    defineProp(W, 'compile', hidden(compile));
    defineProp(W, 'instantiate', hidden(instantiate));
    deleteProp(W, 'compileStreaming');
    deleteProp(W, 'instantiateStreaming');
  };
})();
