/**
 * A daemon's event stream (`GET …/v1/events`, server-sent events) delivered to an `EventBus`: the same
 * event objects, on the same channels, as the engine's own bus. Open while the bus has listeners; a
 * stream that breaks is opened again with `Last-Event-ID`, so what the daemon still buffers is not lost.
 */
import type { EngineEvent, EngineEventMap, EventBus } from '../events.js';

/** Waits between attempts to open the stream again: doubled after each failure, up to the last. */
const RETRY_MS = [50, 100, 200, 400, 800, 1600, 2000] as const;

/** The channels of the bus: a listener on any of them keeps the stream open. */
const CHANNELS: ReadonlyArray<keyof EngineEventMap> = ['invocation', 'result', 'error', 'security', 'registry', 'approval', 'event'];

/** Opens the stream: resumes after `lastId` (null: from now on). */
export type OpenStream = (lastId: number | null, signal: AbortSignal) => Promise<Response>;

export class EventStream {
  readonly #bus: EventBus;
  readonly #open: OpenStream;
  #lastId: number | null = null;
  #stop: AbortController | null = null;
  #running: Promise<void> | null = null;
  #ready: Promise<void> = Promise.resolve();
  #missed = 0;

  constructor(bus: EventBus, open: OpenStream) {
    this.#bus = bus;
    this.#open = open;
    // `newListener` and `removeListener` are EventEmitter's own events, outside the engine's event map.
    const emitter = bus as unknown as NodeJS.EventEmitter;
    emitter.on('newListener', (name: string) => {
      if ((CHANNELS as readonly string[]).includes(name)) this.#start();
    });
    emitter.on('removeListener', () => {
      if (!this.#listened()) this.stop();
    });
  }

  /** Events the daemon no longer held when the stream came back (it says so with a `gap`). */
  get missed(): number {
    return this.#missed;
  }

  /** Settles once the stream is open (or its first attempt failed): events from then on are delivered. */
  get ready(): Promise<void> {
    return this.#ready;
  }

  /**
   * Another daemon (a restarted one) numbers its events from 1, and every event it has is one this
   * stream has not delivered: resume from its first, not after an id of the old one.
   */
  fromFirst(): void {
    this.#lastId = 0;
  }

  stop(): Promise<void> {
    this.#stop?.abort();
    this.#stop = null;
    return this.#running ?? Promise.resolve();
  }

  #listened(): boolean {
    return CHANNELS.some((name) => this.#bus.listenerCount(name) > 0);
  }

  #start(): void {
    if (this.#stop) return;
    const stop = new AbortController();
    this.#stop = stop;
    let opened: () => void = () => {};
    this.#ready = new Promise((resolve) => {
      opened = resolve;
    });
    const previous = this.#running ?? Promise.resolve();
    this.#running = previous.then(() => this.#run(stop.signal, opened)).finally(opened);
  }

  async #run(signal: AbortSignal, opened: () => void): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      try {
        const response = await this.#open(this.#lastId, signal);
        if (!response.ok || !response.body) throw new Error(`the daemon answered ${response.status}`);
        failures = 0;
        opened();
        await this.#read(response.body, signal);
      } catch {
        // Broken, refused, or the daemon is gone: opened again below while someone listens.
        opened();
      }
      if (signal.aborted) return;
      const wait = RETRY_MS[Math.min(failures++, RETRY_MS.length - 1)] as number;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, wait);
        signal.addEventListener('abort', done);
      });
    }
  }

  async #read(body: ReadableStream<Uint8Array>, signal: AbortSignal): Promise<void> {
    const decoder = new TextDecoder();
    let pending = '';
    let fields: { id?: string; event?: string; data: string[] } = { data: [] };
    const reader = body.getReader();
    const cancel = () => void reader.cancel().catch(() => {});
    signal.addEventListener('abort', cancel, { once: true });
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        pending += decoder.decode(value, { stream: true });
        let end = pending.indexOf('\n');
        while (end >= 0) {
          const line = pending.slice(0, end).replace(/\r$/, '');
          pending = pending.slice(end + 1);
          end = pending.indexOf('\n');
          if (line === '') {
            this.#dispatch(fields);
            fields = { data: [] };
            continue;
          }
          if (line.startsWith(':')) continue;
          const colon = line.indexOf(':');
          const name = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (name === 'id') fields.id = value;
          else if (name === 'event') fields.event = value;
          else if (name === 'data') fields.data.push(value);
        }
      }
    } finally {
      signal.removeEventListener('abort', cancel);
    }
  }

  #dispatch(fields: { id?: string; event?: string; data: string[] }): void {
    if (fields.data.length === 0) return;
    const data = JSON.parse(fields.data.join('\n')) as unknown;
    if (fields.event === 'gap') {
      this.#missed += Number((data as { missed?: unknown }).missed) || 0;
      return;
    }
    if (fields.id !== undefined) this.#lastId = Number(fields.id);
    this.#bus.publish(data as EngineEvent);
  }
}
