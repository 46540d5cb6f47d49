import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from 'node:worker_threads';

/** The NATS side refused or failed a request; `code` is JetStream's error code when it gave one. */
export class NatsStoreError extends Error {
  override readonly name: string = 'NatsStoreError';
  constructor(
    message: string,
    /** JetStream's error code, when it gave one. */
    readonly apiCode: number | null = null,
  ) {
    super(message);
  }
}

/** This engine lost its hold on the project: another engine took it over, and this one's writes are refused. */
export class StoreFencedError extends NatsStoreError {
  override readonly name = 'StoreFencedError';
}

/** The worker's script: plain JavaScript beside this file in the sources, three levels up from dist/src/store/jetstream/. */
function workerPath(): string {
  const candidates = [new URL('./worker.mjs', import.meta.url), new URL('../../../../src/store/jetstream/worker.mjs', import.meta.url)];
  for (const url of candidates) {
    const path = fileURLToPath(url);
    if (existsSync(path)) return path;
  }
  throw new NatsStoreError('The JetStream store worker (src/store/jetstream/worker.mjs) is missing from the installation');
}

interface Reply {
  id: number;
  ok?: unknown;
  error?: { name: string; message: string; code: number | null };
}

/**
 * Synchronous requests to the NATS client in a worker thread. The state port is synchronous (a commit
 * returns once its record is durable, as the file journal's fdatasync does), the client is not: a
 * request is posted, and this thread sleeps on a shared word until the worker answers, then takes the
 * answer off the port without going back to the event loop.
 */
export class NatsBridge {
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #signal = new Int32Array(new SharedArrayBuffer(4));
  #next = 1;
  #closed = false;

  constructor() {
    const { port1, port2 } = new MessageChannel();
    this.#port = port1;
    this.#worker = new Worker(workerPath(), { workerData: { port: port2, signal: this.#signal.buffer }, transferList: [port2] });
    // Neither the worker nor its port keeps the process alive: the engine's close ends them.
    this.#worker.unref();
    this.#port.unref();
  }

  /** Runs `op` in the worker and returns its answer; throws what it threw, or after `timeoutMs` without one. */
  call<T>(op: string, args: unknown, timeoutMs: number): T {
    if (this.#closed) throw new NatsStoreError('The JetStream store is closed');
    const id = this.#next++;
    this.#port.postMessage({ id, op, args });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      // Read before looking at the port: the worker posts its answer, then changes this word.
      const seen = Atomics.load(this.#signal, 0);
      const got = receiveMessageOnPort(this.#port) as { message: Reply } | undefined;
      if (got) {
        // An answer to a request that timed out earlier: its caller has given up on it.
        if (got.message.id !== id) continue;
        const { error, ok } = got.message;
        if (!error) return ok as T;
        if (error.name === 'StoreFencedError') throw new StoreFencedError(error.message);
        throw new NatsStoreError(error.message, error.code);
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new NatsStoreError(`NATS did not answer within ${timeoutMs} ms (${op}); the outcome is unknown until it answers`);
      }
      Atomics.wait(this.#signal, 0, seen, left);
    }
  }

  /** Ends the worker (its connection with it). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#port.close();
    void this.#worker.terminate();
  }
}
