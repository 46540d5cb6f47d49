import { link, release } from './link.mjs';
import { HOST_GLOBALS, SETUP_FILENAME } from './setup-script.mjs';

/**
 * Isolates and their warm contexts.
 *
 * - One call at a time per isolate: the memory limit, a timeout and a crash then belong to one call,
 *   and disposing an isolate stops exactly that call.
 * - Isolates are grouped by memory limit (isolated-vm fixes `memoryLimit` when an isolate is made).
 * - Every call gets a context no code has run in except the setup script (prelude.js): a clean global
 *   scope per call. Making one costs about 0.7 ms, so contexts are made ahead of time, on the isolate's
 *   own thread (the async API), while the isolate is idle; a call only takes one.
 */

const WARM_CONTEXTS = 2;
/** Idle isolates kept per memory class while it is in use, so a call rarely waits behind a refill. */
const IDLE_ISOLATES = 5;
/** A class unused this long keeps one idle isolate. */
const CLASS_IDLE_MS = 60_000;
/**
 * A tool with at least this much source (a bundle with its packages, usually) is evaluated in its warm
 * contexts ahead of its call. Below it evaluating at call time costs less than the extra isolated-vm
 * task ahead: back to back, a trivial tool evaluated ahead took 0.38-0.46 ms in the sandbox against
 * 0.33-0.38 ms at call time; a 26 KB bundle (semver) costs 0.3-0.6 ms to evaluate.
 */
const EVALUATE_AHEAD_CHARS = 16 * 1024;
/** An isolate is replaced after this many calls, so what V8 keeps per isolate cannot grow without bound. */
const CALLS_PER_ISOLATE = 5_000;
/** Defaults of the options below (JsRunner's rotation and longCallMs). */
const ROTATION = 8;
const LONG_CALL_MS = 1_000;

export class IsolatePool {
  #ivm;
  #source;
  #cachedData = null;
  #slots = new Set();
  #waiting = [];
  #lastUsed = new Map();
  /** Per memory class, the tool last called: warm contexts come with its modules already linked and evaluated. */
  #hints = new Map();
  /** Graphs whose evaluation ahead did not end ready (it threw, timed out, awaited forever): only linked ahead from then on. */
  #notAhead = new WeakSet();
  /** Warm contexts evaluated ahead, and those whose evaluation did not end ready. */
  #ahead = { evaluated: 0, refused: 0 };
  #serial = 0;
  /** Leased isolates whose call is a program waiting on the tools it called, or has run past longCallMs. */
  #parked = 0;
  #options;
  #trimTimer;
  #closed = false;

  /** options: { maxIsolates, rotation?, longCallMs?, logCap, onCatastrophe(slot, message) } */
  constructor(ivm, source, options) {
    this.#ivm = ivm;
    this.#source = source;
    this.#options = {
      ...options,
      rotation: Math.min(options.rotation ?? ROTATION, options.maxIsolates),
      longCallMs: options.longCallMs ?? LONG_CALL_MS,
    };
    this.#trimTimer = setInterval(() => this.#trim(), 5_000);
    this.#trimTimer.unref();
  }

  get size() {
    return this.#slots.size;
  }

  stats() {
    let leased = 0;
    let warm = 0;
    for (const slot of this.#slots) {
      if (slot.leased) leased++;
      warm += slot.warm.length;
    }
    return {
      isolates: this.#slots.size,
      rotation: this.#options.rotation,
      leased,
      parked: this.#parked,
      warm_contexts: warm,
      waiting: this.#waiting.length,
      evaluated_ahead: { ...this.#ahead },
    };
  }

  /** Makes sure isolates of this class are ready (called when a tool is prepared and after calls). */
  warm(memoryMb) {
    this.#lastUsed.set(memoryMb, Date.now());
    let idle = 0;
    for (const slot of this.#slots) if (slot.memoryMb === memoryMb && !slot.leased && !slot.dead) idle++;
    while (idle < IDLE_ISOLATES && this.#slots.size < this.#limit()) {
      let slot;
      try {
        slot = this.#create(memoryMb);
      } catch {
        // Out of resources for another isolate now: calls make one when they need it, and say why if they cannot.
        return;
      }
      this.#refill(slot);
      idle++;
    }
  }

  /** Leases an isolate of the class with a fresh context: resolves with { slot, context }. */
  async acquire(memoryMb) {
    this.#lastUsed.set(memoryMb, Date.now());
    let slot = this.#pick(memoryMb);
    if (slot) slot.leased = true;
    else slot = await new Promise((resolve) => this.#waiting.push({ memoryMb, resolve }));
    slot.calls++;
    slot.longTimer = setTimeout(() => this.park(slot, true), this.#options.longCallMs);
    const context = slot.warm.pop() ?? (await this.#newContext(slot));
    return { slot, context };
  }

  /**
   * The tool to link into the next warm contexts of its memory class (see link.mjs), and to evaluate
   * there within `timeoutMs` (its top-level code, packages included, runs before its call comes).
   */
  hint(memoryMb, graph, generated, timeoutMs) {
    this.#hints.set(memoryMb, { graph, generated, timeoutMs });
  }

  /** Takes an isolate back after a call; `dispose` when the call ended abnormally or the isolate is suspect. */
  release(slot, dispose) {
    clearTimeout(slot.longTimer);
    this.park(slot, false);
    slot.leased = false;
    if (slot.dead) return;
    if (dispose || slot.calls >= CALLS_PER_ISOLATE) this.#drop(slot);
    if (this.#waiting.length > 0) {
      const next = this.#serveWaiter((memoryMb) => (!slot.dead && slot.memoryMb === memoryMb ? slot : this.#pick(memoryMb)));
      if (!slot.dead && next !== slot) this.#refill(slot);
      return;
    }
    if (!slot.dead) this.#refill(slot);
    this.warm(slot.memoryMb);
  }

  /**
   * An isolate of its own for a persistent context (persistent.mjs), outside the pool: never leased
   * to other calls, never trimmed; its owner disposes it. It hears the host as pooled isolates do.
   */
  dedicated(memoryMb) {
    return this.#create(memoryMb, false);
  }

  /** A context with the setup script run in it, on `slot`'s isolate, linking nothing ahead. */
  context(slot) {
    return this.#newContext(slot, false);
  }

  /** The serial of a call that runs in a context made earlier (a persistent one): new for each call. */
  nextSerial() {
    return ++this.#serial;
  }

  /** An isolate lost to a catastrophic V8 error: never touched again (its thread is parked forever). */
  abandon(slot) {
    clearTimeout(slot.longTimer);
    this.park(slot, false);
    slot.dead = true;
    this.#slots.delete(slot);
  }

  close() {
    this.#closed = true;
    clearInterval(this.#trimTimer);
    for (const slot of this.#slots) this.#drop(slot);
  }

  /**
   * A leased isolate's call is a program waiting on the tools it called, or has run past longCallMs
   * (`on`), or no longer is. Meanwhile it does not count against the rotation: a call waiting for an
   * isolate may have one more made, so a program never waits on a call that waits for its isolate.
   */
  park(slot, on) {
    if (on === slot.parked || (on && (!slot.leased || slot.dead))) return;
    slot.parked = on;
    this.#parked += on ? 1 : -1;
    if (on) this.#serveWaiter((memoryMb) => this.#pick(memoryMb));
  }

  /** Gives the first waiting call the isolate `choose` finds for its memory class: that isolate, or null when there is none. */
  #serveWaiter(choose) {
    const waiter = this.#waiting[0];
    const next = waiter ? choose(waiter.memoryMb) : null;
    if (!next) return null;
    this.#waiting.shift();
    // Leased now, not when the waiter resumes: another acquire could pick it in between.
    next.leased = true;
    waiter.resolve(next);
    return next;
  }

  /**
   * Isolates there may be now: the rotation, plus one per parked call, up to maxIsolates. A few
   * isolates serving call after call cost less CPU per call than many taking turns (each has its own
   * heap, code and thread to keep warm): with 32 callers, the sandbox's CPU per call fell by about a
   * fifth with 8 against 16 (BENCHMARKS.md, the scale bench).
   */
  #limit() {
    return Math.min(this.#options.maxIsolates, this.#options.rotation + this.#parked);
  }

  /** An idle isolate of the class: one with a warm context and no refill running first. */
  #pick(memoryMb) {
    let best = null;
    let score = -1;
    for (const slot of this.#slots) {
      if (slot.leased || slot.dead || slot.memoryMb !== memoryMb) continue;
      const s = (slot.warm.length > 0 ? 2 : 0) + (slot.refilling ? 0 : 1);
      if (s > score) {
        best = slot;
        score = s;
      }
    }
    if (best) return best;
    if (this.#slots.size >= this.#limit()) this.#evictIdle();
    if (this.#slots.size < this.#limit()) return this.#create(memoryMb);
    return null;
  }

  /** At the isolate limit, an idle isolate of another class makes room. */
  #evictIdle() {
    for (const slot of this.#slots) {
      if (!slot.leased && !slot.dead) {
        this.#drop(slot);
        return;
      }
    }
  }

  #create(memoryMb, pooled = true) {
    const slot = {
      isolate: null,
      script: null,
      memoryMb,
      warm: [],
      leased: false,
      refilling: false,
      dead: false,
      calls: 0,
      serial: 0,
      call: null,
      parked: false,
      longTimer: null,
    };
    slot.isolate = new this.#ivm.Isolate({
      memoryLimit: memoryMb,
      onCatastrophicError: (message) => this.#options.onCatastrophe(slot, message),
    });
    const options = { filename: SETUP_FILENAME };
    if (this.#cachedData) options.cachedData = this.#cachedData;
    else options.produceCachedData = true;
    slot.script = slot.isolate.compileScriptSync(this.#source, options);
    if (!this.#cachedData && slot.script.cachedData) this.#cachedData = slot.script.cachedData;
    // One pair of host callbacks per isolate: each context says which one it is, and only the context
    // of the call running now (slot.serial) is heard.
    const ivm = this.#ivm;
    const heard = (serial) => (serial === slot.serial ? slot.call : null);
    slot.send = new ivm.Callback((serial, op, rid, a, b) => heard(serial)?.onSend(op, rid, a, b), { ignored: true });
    slot.done = new ivm.Callback((serial, kind, a, b, c) => heard(serial)?.onDone(kind, a, b, c), { ignored: true });
    if (pooled) this.#slots.add(slot);
    return slot;
  }

  #drop(slot) {
    slot.dead = true;
    this.#slots.delete(slot);
    for (const context of slot.warm) {
      release(context.linked);
      try {
        context.entry.release();
        context.context.release();
      } catch {}
    }
    slot.warm = [];
    try {
      slot.isolate.dispose();
    } catch {}
  }

  /**
   * A context with the setup script run in it, and the hinted tool's modules linked when there is one.
   * `serial` is what the context's prelude says when it calls the host; a call listens to one serial.
   */
  async #newContext(slot, linkHint = true, refill = false) {
    // Two async steps (making a context and running the prelude are the heavy parts, done on the
    // isolate's thread); the short steps run synchronously between them, all together, while the
    // isolate is idle: each async isolated-vm call costs this process's thread tens of µs (it captures
    // a stack trace), and the first synchronous call after one costs more than those that follow it.
    const context = await slot.isolate.createContext();
    // A refill's isolate leased meanwhile may be running its call's code now, and a synchronous step
    // waits for the isolate: this thread, which relays every call of the process, would stop until
    // that code yields. The refill stops; the call's isolate is refilled when it is back.
    if (refill && (slot.leased || slot.dead)) {
      try {
        context.release();
      } catch {}
      return null;
    }
    const serial = ++this.#serial;
    const global = context.global;
    global.setSync(HOST_GLOBALS.send, slot.send);
    global.setSync(HOST_GLOBALS.done, slot.done);
    // A string, not an object: copying an object into an isolate also makes isolated-vm check its heap.
    global.setSync(HOST_GLOBALS.config, `${slot.memoryMb},${this.#options.logCap},${serial}`);
    // No global.release(): the context owns that handle and releases it with itself.
    let linked = null;
    const hint = this.#hints.get(slot.memoryMb);
    if (hint && linkHint && !slot.leased) {
      // Linking runs no code in the context (see link.mjs), so it may come before the prelude.
      try {
        linked = await link(slot.isolate, context, hint.graph, hint.generated);
      } catch {
        // Linked at call time instead, where the error is reported.
      }
    }
    let entry;
    try {
      entry = await slot.script.run(context, { reference: true });
    } catch (error) {
      release(linked);
      throw error;
    }
    const made = { context, entry, serial, linked, ahead: false };
    if (linked && linked.graph.bytes >= EVALUATE_AHEAD_CHARS && !this.#notAhead.has(linked.graph) && !(refill && slot.leased)) {
      await this.#evaluateAhead(made, hint.timeoutMs, refill ? slot : null);
    }
    return made;
  }

  /**
   * Evaluates the tool's modules in a warm context before its call: the call then only starts the tool
   * (prelude.js, kind 4), and a package's top-level code is off the call's path. The context is still
   * used by one call only. What did not end ready (an error, the timeout, a top-level await still
   * pending, a memory fault) is not worth repeating for this graph: the context and its isolate go,
   * and the call that comes evaluates the tool itself and reports what happened.
   */
  async #evaluateAhead(made, timeoutMs, refilled) {
    const graph = made.linked.graph;
    let evaluated = false;
    try {
      await made.linked.main.evaluate({ timeout: timeoutMs });
      evaluated = true;
    } catch {}
    // Asking the prelude is a synchronous step: not while the refilled isolate may run a call's code.
    if (evaluated && refilled?.leased) {
      release(made.linked);
      try {
        made.entry.release();
        made.context.release();
      } catch {}
      throw new Error('the isolate was leased while the tool was evaluated ahead');
    }
    try {
      if (evaluated) made.ahead = made.entry.applySync(undefined, [5], { timeout: 1000 }) === 1;
    } catch {}
    if (made.ahead) {
      this.#ahead.evaluated++;
      return;
    }
    this.#ahead.refused++;
    this.#notAhead.add(graph);
    release(made.linked);
    try {
      made.entry.release();
      made.context.release();
    } catch {}
    throw new Error('the tool did not evaluate ahead of its call');
  }

  /** Brings an idle isolate back to WARM_CONTEXTS, one context at a time, stopping when a call leases it. */
  async #refill(slot) {
    if (slot.refilling) return;
    slot.refilling = true;
    try {
      while (!slot.dead && !slot.leased && !this.#closed && slot.warm.length < WARM_CONTEXTS) {
        const context = await this.#newContext(slot, true, true);
        if (context === null) break;
        if (slot.dead) {
          release(context.linked);
          try {
            context.entry.release();
            context.context.release();
          } catch {}
        } else {
          slot.warm.push(context);
        }
      }
    } catch {
      // The isolate was disposed meanwhile (or hit its limit while empty): it is replaced on demand.
      if (!slot.dead && !slot.leased) this.#drop(slot);
    } finally {
      slot.refilling = false;
    }
  }

  /** Drops idle isolates beyond what each class needs. */
  #trim() {
    const now = Date.now();
    const kept = new Map();
    for (const slot of this.#slots) {
      if (slot.leased || slot.dead) continue;
      // Made for calls behind parked ones, which have ended: back to the rotation.
      if (this.#slots.size > this.#limit()) {
        this.#drop(slot);
        continue;
      }
      const recent = now - (this.#lastUsed.get(slot.memoryMb) ?? 0) < CLASS_IDLE_MS;
      const count = kept.get(slot.memoryMb) ?? 0;
      if (count >= (recent ? IDLE_ISOLATES : 1)) this.#drop(slot);
      else kept.set(slot.memoryMb, count + 1);
    }
  }
}
