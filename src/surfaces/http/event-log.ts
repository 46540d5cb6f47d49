import type { ServerResponse } from 'node:http';
import type { Engine } from '../../engine.js';
import type { EngineEvent } from '../../events.js';

/**
 * The recent events of one project, numbered, for server-sent event streams: a client that
 * reconnects with `Last-Event-ID` gets what it missed while it is still in the buffer, and an event
 * `gap` saying how many it lost when it is not.
 */
/** An event of the log; `frame` is its server-sent event text, made when a stream first sends it. */
interface Entry {
  readonly id: number;
  readonly event: EngineEvent;
  frame?: string;
}

/** What a stream holds unsent before it lets its reader go (a reader that does not keep up). */
const STREAM_BACKLOG_BYTES = 8 * 1024 * 1024;

export class EventLog {
  readonly #buffer: Entry[] = [];
  readonly #streams = new Set<(entry: Entry) => void>();
  readonly #listener: (event: EngineEvent) => void;
  #next = 1;

  constructor(
    readonly engine: Engine,
    readonly size: number,
  ) {
    this.#listener = (event) => {
      const entry: Entry = { id: this.#next++, event };
      this.#buffer.push(entry);
      if (this.#buffer.length > size) this.#buffer.shift();
      for (const stream of this.#streams) stream(entry);
    };
    engine.events.on('event', this.#listener);
  }

  detach(): void {
    this.engine.events.off('event', this.#listener);
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
      // Made once per event, whatever the number of streams sending it.
      entry.frame ??= `id: ${entry.id}\nevent: ${entry.event.type}\ndata: ${JSON.stringify(entry.event)}\n\n`;
      pending += entry.frame;
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    };
    if (lastId !== null) {
      const oldest = this.#buffer[0]?.id ?? this.#next;
      if (lastId + 1 < oldest)
        res.write(`event: gap\ndata: ${JSON.stringify({ after: lastId, resumed_at: oldest, missed: oldest - lastId - 1 })}\n\n`);
      for (const entry of this.#buffer) if (entry.id > lastId) send(entry);
    }
    this.#streams.add(send);
    const heartbeat = setInterval(() => res.write(': keep-alive\n\n'), 15_000);
    res.on('close', () => {
      clearInterval(heartbeat);
      this.#streams.delete(send);
    });
  }
}
