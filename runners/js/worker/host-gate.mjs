/**
 * Bounds the bytes the calls of one sandbox process have on their way to the engine at once: each
 * request is a copy there, and a tool limited to 128 MB that sent fifty 20 MB writes without awaiting
 * them took the engine process to 2 GB. Shared by every call of the process, so the bound holds however
 * many calls run: at most MAX_BYTES of requests in flight, or one larger request alone. A call whose
 * next request does not fit waits (its requests stay queued, in order) until answers make room. Each
 * call's own pending bytes are bounded in the isolate (prelude.js) before anything is copied out; the
 * engine paces large answers on its side (sandbox-process.ts).
 */
export const MAX_BYTES = 64 * 1024 * 1024;

export class HostGate {
  #bytes = 0;
  #peak = 0;
  #waiting = new Set();

  /** Whether a request carrying `bytes` can go now. */
  admits(bytes) {
    return this.#bytes === 0 || this.#bytes + bytes <= MAX_BYTES;
  }

  take(bytes) {
    this.#bytes += bytes;
    if (this.#bytes > this.#peak) this.#peak = this.#bytes;
  }

  /** A request's answer came (or its call ended): its room goes to the calls waiting for it. */
  give(bytes) {
    this.#bytes -= bytes;
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    for (const resume of waiting) resume();
  }

  /** `resume` is called once there may be room. */
  wait(resume) {
    this.#waiting.add(resume);
  }

  forget(resume) {
    this.#waiting.delete(resume);
  }

  /** What is in flight now and the most there has been (the runner's status shows them). */
  stats() {
    return { bytes_in_flight: this.#bytes, peak_bytes_in_flight: this.#peak };
  }
}

/** The bytes a request carries to the engine: its strings' lengths and its binary contents (its options, at most 64 KB each, are left out). */
export function requestBytes(args) {
  let bytes = 0;
  for (const arg of args) {
    if (typeof arg === 'string') bytes += arg.length;
    else if (arg instanceof ArrayBuffer || ArrayBuffer.isView(arg)) bytes += arg.byteLength;
  }
  return bytes;
}
