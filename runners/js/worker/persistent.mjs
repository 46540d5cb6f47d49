import { release } from './link.mjs';

/**
 * Persistent contexts: for a tool whose definition says `"context": "persistent"`, one context per tool
 * id (and memory limit) in this sandbox process, on an isolate of its own, kept from one call to the next.
 * What the tool's modules hold at their top level survives between its calls, as in a notebook kernel;
 * its modules, and the packages bundled with them, are evaluated once per context.
 *
 * - One call at a time per context: calls queue here in order (the memory limit, a timeout and a reset
 *   then belong to one call, and a call never sees another's half-done work).
 * - Each call gets a `ctx` of its own (prelude.js `newCall`), and a serial the worker hears it by.
 * - The context is reset (its isolate disposed; the next call starts a fresh one) after any call that
 *   did not end with a result (a tool error, a timeout, a memory fault, a cancel), after a call that
 *   leaves the heap more than half full (MEMORY_PRESSURE), when the tool's files change, when the tool
 *   is forgotten (reloaded or removed), and when MAX_CONTEXTS others are more recent.
 */

/** Persistent contexts one sandbox process keeps; the least recently used idle one goes first. */
export const MAX_CONTEXTS = 16;
/** A context whose isolate's heap is fuller than this share of its memory limit after a call is reset. */
const MEMORY_PRESSURE = 0.5;

export class PersistentContexts {
  #pool;
  /** key (tool id and memory limit) -> { key, tool, memoryMb, slot, context, graph, loaded, busy, queue, used } */
  #kernels = new Map();

  constructor(pool) {
    this.#pool = pool;
  }

  stats() {
    let busy = 0;
    for (const kernel of this.#kernels.values()) if (kernel.busy) busy++;
    return { contexts: this.#kernels.size, busy };
  }

  /**
   * Waits for the tool's context to be free, then leases it: { slot, context, kernel }. `kernel.loaded`
   * says whether the tool's modules already ran in it (then the call only invokes the tool). A context
   * made for other versions of the tool's files is reset first.
   */
  async acquire(tool, memoryMb, graph) {
    const key = `${memoryMb}:${tool}`;
    let kernel = this.#kernels.get(key);
    if (!kernel) {
      this.#makeRoom();
      kernel = { key, tool, memoryMb, slot: null, context: null, graph: null, loaded: false, busy: false, queue: [], used: 0 };
      this.#kernels.set(key, kernel);
    }
    if (kernel.busy) await new Promise((resolve) => kernel.queue.push(resolve));
    kernel.busy = true;
    kernel.used = Date.now();
    try {
      if (kernel.slot?.dead || (kernel.graph !== null && kernel.graph !== graph)) this.#reset(kernel);
      if (kernel.slot === null) {
        kernel.slot = this.#pool.dedicated(memoryMb);
        kernel.slot.leased = true;
      }
      if (kernel.context === null) {
        kernel.context = await this.#pool.context(kernel.slot);
        kernel.graph = graph;
      }
    } catch (error) {
      this.#reset(kernel);
      this.release(kernel, false);
      throw error;
    }
    return { slot: kernel.slot, context: kernel.context, kernel };
  }

  /** The call is over: `keep` false resets the context. The next call waiting, if any, goes. */
  release(kernel, keep) {
    if (!keep || kernel.slot === null || kernel.slot.dead || this.#pressed(kernel)) this.#reset(kernel);
    else kernel.loaded = true;
    kernel.used = Date.now();
    const next = kernel.queue.shift();
    if (next) next();
    else {
      kernel.busy = false;
      if (this.#kernels.get(kernel.key) !== kernel) this.#reset(kernel);
    }
  }

  /** The tool (by id) changed or went away: its contexts go (a busy one when its call is over). */
  forget(tool) {
    for (const kernel of [...this.#kernels.values()]) {
      if (kernel.tool !== tool) continue;
      this.#kernels.delete(kernel.key);
      if (!kernel.busy) this.#reset(kernel);
    }
  }

  close() {
    for (const kernel of this.#kernels.values()) this.#reset(kernel);
    this.#kernels.clear();
  }

  #pressed(kernel) {
    try {
      const heap = kernel.slot.isolate.getHeapStatisticsSync();
      return heap.used_heap_size + heap.externally_allocated_size > kernel.memoryMb * 1024 * 1024 * MEMORY_PRESSURE;
    } catch {
      return true;
    }
  }

  /** At MAX_CONTEXTS, the least recently used idle context goes; when every one is busy, the count may pass it until they are done. */
  #makeRoom() {
    if (this.#kernels.size < MAX_CONTEXTS) return;
    let oldest = null;
    for (const kernel of this.#kernels.values()) if (!kernel.busy && (oldest === null || kernel.used < oldest.used)) oldest = kernel;
    if (oldest === null) return;
    this.#kernels.delete(oldest.key);
    this.#reset(oldest);
  }

  /** Disposes the context's isolate: whatever the tool's modules held is gone. */
  #reset(kernel) {
    const { slot, context } = kernel;
    kernel.slot = null;
    kernel.context = null;
    kernel.graph = null;
    kernel.loaded = false;
    if (slot === null || slot.dead) return;
    slot.dead = true;
    if (context) {
      release(context.linked);
      try {
        context.entry.release();
        context.context.release();
      } catch {}
    }
    try {
      slot.isolate.dispose();
    } catch {}
  }
}
