/** Server-sent events over fetch(): EventSource cannot send the Authorization header. */

export interface SseMessage {
  id: string | null;
  event: string;
  data: string;
}

/**
 * Incremental parser of the text/event-stream format: feed it decoded chunks, get the complete
 * messages. Comments (`: …`) are skipped; `retry` is ignored (the client has its own back-off).
 */
export class SseParser {
  #buffer = '';
  #id: string | null = null;
  #event = '';
  #data: string[] = [];

  push(chunk: string): SseMessage[] {
    this.#buffer += chunk;
    const out: SseMessage[] = [];
    const breaks = /\r\n|\r|\n/g;
    let start = 0;
    for (let match = breaks.exec(this.#buffer); match; match = breaks.exec(this.#buffer)) {
      // A lone CR at the end may be the first half of a CRLF still on its way.
      if (match[0] === '\r' && match.index === this.#buffer.length - 1) break;
      this.#line(this.#buffer.slice(start, match.index), out);
      start = match.index + match[0].length;
    }
    this.#buffer = this.#buffer.slice(start);
    return out;
  }

  #line(line: string, out: SseMessage[]): void {
    if (line === '') {
      if (this.#data.length > 0) out.push({ id: this.#id, event: this.#event || 'message', data: this.#data.join('\n') });
      this.#event = '';
      this.#data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.#data.push(value);
    else if (field === 'event') this.#event = value;
    else if (field === 'id' && !value.includes('\0')) this.#id = value;
  }
}

/** `reconnecting` is a connection attempt after one was lost; `closed` is the pause before it. */
export type StreamStatus = 'connecting' | 'reconnecting' | 'open' | 'closed' | 'unauthorized';

export interface StreamHandlers {
  onMessage(message: SseMessage): void;
  onStatus(status: StreamStatus): void;
}

/**
 * Follows `url` until `stop()`: on a drop it reconnects after a growing pause, sending the last id it
 * saw as Last-Event-ID so the gateway replays what was missed (or sends `gap`). The first connection
 * asks for `?last_event_id=0`: the events the gateway still buffers.
 */
export function followEvents(url: string, headers: () => Record<string, string>, handlers: StreamHandlers): { stop(): void } {
  let stopped = false;
  let lastId: string | null = null;
  let controller: AbortController | null = null;
  let delay = 500;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let dropped = false;

  const connect = async () => {
    if (stopped) return;
    handlers.onStatus(dropped ? 'reconnecting' : 'connecting');
    controller = new AbortController();
    try {
      const first = lastId === null;
      const response = await fetch(first ? `${url}?last_event_id=0` : url, {
        headers: { accept: 'text/event-stream', ...headers(), ...(first ? {} : { 'last-event-id': lastId as string }) },
        signal: controller.signal,
        cache: 'no-store',
      });
      if (response.status === 401) {
        handlers.onStatus('unauthorized');
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      handlers.onStatus('open');
      delay = 500;
      const parser = new SseParser();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const message of parser.push(value)) {
          if (message.id !== null) lastId = message.id;
          handlers.onMessage(message);
        }
      }
    } catch {
      // A network error or an abort: reconnect below unless stopped.
    }
    if (stopped) return;
    dropped = true;
    handlers.onStatus('closed');
    timer = setTimeout(connect, delay);
    delay = Math.min(delay * 2, 10_000);
  };

  void connect();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      controller?.abort();
    },
  };
}
