import { readFileSync } from 'node:fs';

/**
 * Isolates that run wasm calls, one call at a time each. Each has one context holding the WASI layer
 * (wasi.js) and the modules compiled in it: wasm code cannot reach the context's globals (it sees only
 * the imports it is given), so the context is kept across calls and a warm call only instantiates.
 * An isolate whose call was stopped (deadline, cancel, memory) is disposed, never reused.
 */

/**
 * Heap of the isolate's JavaScript side (the WASI layer, stdout, open files); the module's linear
 * memory is outside it (V8 does not count it) and capped per call by instrument.mjs.
 */
const HEAP_MB = 512;
/** An isolate is replaced after this many calls, so what V8 keeps per isolate cannot grow without bound. */
const CALLS_PER_ISOLATE = 5_000;
/** The longest a compile ahead of a call may take (V8's baseline compiler does megabytes in milliseconds). */
const PRECOMPILE_MS = 60_000;
const SOURCE = readFileSync(new URL('./wasi.js', import.meta.url), 'utf8');

export class WasmPool {
  #ivm;
  #max;
  #idle = [];
  #size = 0;
  #waiting = [];

  constructor(ivm, max) {
    this.#ivm = ivm;
    this.#max = max;
  }

  stats() {
    return { isolates: this.#size, idle: this.#idle.length, waiting: this.#waiting.length };
  }

  /** An isolate for one call: { isolate, compile, run, forget, compiled: Set<hash>, calls }. */
  async acquire() {
    const slot = this.#idle.pop();
    if (slot) return slot;
    if (this.#size < this.#max) {
      this.#size++;
      try {
        return await this.#create();
      } catch (error) {
        this.#size--;
        throw error;
      }
    }
    return new Promise((resolve, reject) => this.#waiting.push({ resolve, reject }));
  }

  /** Gives an isolate back; `spent` disposes it (its call was stopped mid-run, or it served enough calls). */
  release(slot, spent) {
    slot.calls++;
    if (spent || slot.calls >= CALLS_PER_ISOLATE || slot.isolate.isDisposed) {
      try {
        if (!slot.isolate.isDisposed) slot.isolate.dispose();
      } catch {}
      this.#size--;
      const next = this.#waiting.shift();
      if (next) {
        this.#size++;
        this.#create().then(next.resolve, (error) => {
          this.#size--;
          next.reject(error);
        });
      }
      return;
    }
    const next = this.#waiting.shift();
    if (next) next.resolve(slot);
    else this.#idle.push(slot);
  }

  /**
   * Compiles a module in an isolate ahead of its first call, when one is idle or can be made: a tool's
   * module compiles when its file loads or changes, and its first call only instantiates it there.
   */
  async precompile(hash, bytes) {
    if (this.#idle.length === 0 && this.#size >= this.#max) return;
    const slot = await this.acquire();
    let spent = false;
    try {
      if (!slot.compiled.has(hash)) {
        const problem = await slot.compile.apply(undefined, [hash, bytes.copyInto({ release: false })], { timeout: PRECOMPILE_MS });
        if (!problem) slot.compiled.add(hash);
      }
    } catch {
      // A compile stopped by its deadline: the call compiles it again and reports what happens.
      spent = true;
    } finally {
      this.release(slot, spent);
    }
  }

  /** Drops a module from the idle isolates that compiled it (its file changed or its tool went away). */
  forget(hash) {
    for (const slot of this.#idle) {
      if (slot.compiled.delete(hash)) slot.forget.applyIgnored(undefined, [hash]);
    }
  }

  async #create() {
    const isolate = new this.#ivm.Isolate({ memoryLimit: HEAP_MB });
    const context = await isolate.createContext();
    await (await isolate.compileScript(SOURCE, { filename: 'arium:wasi' })).run(context);
    const api = await context.global.get('__arium', { reference: true });
    const get = (name) => api.get(name, { reference: true });
    return { isolate, compile: await get('compile'), run: await get('run'), forget: await get('forget'), compiled: new Set(), calls: 0 };
  }
}
