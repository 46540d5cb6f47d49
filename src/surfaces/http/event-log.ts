import type { ServerResponse } from 'node:http';
import type { Engine } from '../../engine.js';
import type { EngineEvent } from '../../events.js';

/** An event of the log and its number (the SSE `id:`). */
interface Entry {
  readonly id: number;
  readonly event: EngineEvent;
}

/** What a stream holds unsent before it lets its reader go (a reader that does not keep up). */
const STREAM_BACKLOG_BYTES = 8 * 1024 * 1024;

/**
 * The recent events of one project, numbered, for server-sent event streams: a client that
 * reconnects with `Last-Event-ID` gets what it missed while it is still in the buffer, and an event
 * `gap` saying how many it lost when it is not. The buffer is a ring of `size` slots: keeping an event
 * costs one slot written, not an array shifted.
 */
export class EventLog {
  readonly #ring: Array<Entry | undefined>;
  readonly #streams = new Set<(entry: Entry) => void>();
  readonly #listener: (event: EngineEvent) => void;
  #next = 1;
  /** The last entry framed and its frame: each stream is handed an event in turn, and frames it once for all. */
  #framed: Entry | null = null;
  #frame = '';

  constructor(
    readonly engine: Engine,
    readonly size: number,
  ) {
    this.#ring = new Array(size);
    this.#listener = (event) => {
      const entry: Entry = { id: this.#next++, event };
      if (size > 0) this.#ring[entry.id % size] = entry;
      if (this.#streams.size > 0) for (const stream of this.#streams) stream(entry);
    };
    engine.events.on('event', this.#listener);
  }

  detach(): void {
    this.engine.events.off('event', this.#listener);
  }

  /** The id of the oldest event still kept (the next one's when none is). */
  #oldest(): number {
    return Math.max(1, this.#next - this.size);
  }

  #frameOf(entry: Entry): string {
    if (this.#framed !== entry) {
      this.#framed = entry;
      this.#frame = `id: ${entry.id}\nevent: ${entry.event.type}\ndata: ${JSON.stringify(entry.event)}\n\n`;
    }
    return this.#frame;
  }

  /** Streams the events `shown` keeps; the ids stay the log's, so a gap is still told as one. */
  stream(res: ServerResponse, lastId: number | null, shown: (event: EngineEvent) => boolean): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    res.write(': arium events\n\n');
    // The frames of one turn of the event loop go out as one write: under load the calls of many
    // connections end in the same turn, and a write (a syscall, and a chunk of its own) per event cost
    // the gateway more than the calls did. Frames keep the log's order; none is dropped.
    let pending = '';
    let scheduled = false;
    const flush = () => {
      scheduled = false;
      const text = pending;
      pending = '';
      if (text === '' || res.writableEnded || res.destroyed) return;
      const ok = res.write(text);
      // A reader that does not keep up is let go rather than buffered without end: it reconnects with Last-Event-ID.
      if (!ok && res.writableLength > STREAM_BACKLOG_BYTES) res.end();
    };
    const send = (entry: Entry) => {
      if (!shown(entry.event)) return;
      pending += this.#frameOf(entry);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    };
    if (lastId !== null) {
      const oldest = this.#oldest();
      if (lastId + 1 < oldest)
        res.write(`event: gap\ndata: ${JSON.stringify({ after: lastId, resumed_at: oldest, missed: oldest - lastId - 1 })}\n\n`);
      for (let id = Math.max(oldest, Math.floor(lastId) + 1); id < this.#next; id++) send(this.#ring[id % this.size] as Entry);
    }
    this.#streams.add(send);
    const heartbeat = setInterval(() => res.write(': keep-alive\n\n'), 15_000);
    res.on('close', () => {
      clearInterval(heartbeat);
      this.#streams.delete(send);
    });
  }
}
