/**
 * The fetch the MCP bridge gives the SDK's HTTP transport: the socket fetch, watched. The transport
 * reports a broken stream only as an error event naming no request, and a stream the daemon ends
 * without answering not at all; the bridge must know both to answer the requests a stopped daemon took
 * with it. Built-ins only (a thin client's module).
 */
import type { SocketFetch } from './socket-fetch.js';

type RequestId = string | number;

export interface FetchWatcher {
  /** A response's body broke off (the daemon died under it), or a GET could not reach the daemon. */
  broken(error: unknown): void;
  /** The standalone GET stream was answered: the daemon can now send the session notifications. */
  listening(): void;
  /** A response's body ended: the standalone GET stream, or a POST's carrying the requests `ids`. */
  ended(method: string, ids: RequestId[]): void;
}

/** The ids of the requests in a POST's JSON-RPC body (a message or a batch). */
function requestIds(body: unknown): RequestId[] {
  if (typeof body !== 'string') return [];
  try {
    const sent = JSON.parse(body) as unknown;
    return (Array.isArray(sent) ? sent : [sent]).flatMap((m: { method?: unknown; id?: RequestId }) =>
      typeof m?.method === 'string' && m.id !== undefined ? [m.id] : [],
    );
  } catch {
    return [];
  }
}

export interface WatchedFetch {
  fetch: SocketFetch;
  /**
   * Closes the response stream of request `id`. The daemon answers nothing to a request the client
   * cancelled, so its stream would stay open (a connection, and a stream the daemon's session keeps)
   * for as long as the session lasts.
   */
  drop(id: RequestId): void;
}

export function watchedFetch(base: SocketFetch, watcher: FetchWatcher): WatchedFetch {
  const streams = new Map<RequestId, AbortController>();
  const fetch: SocketFetch = async (input, init) => {
    const method = init?.method ?? 'GET';
    const ids = method === 'POST' ? requestIds(init?.body) : [];
    const own = new AbortController();
    const signal = init?.signal ? AbortSignal.any([init.signal, own.signal]) : own.signal;
    for (const id of ids) streams.set(id, own);
    const forget = () => {
      for (const id of ids) if (streams.get(id) === own) streams.delete(id);
    };
    // The transport aborts its own requests when it closes, the bridge a cancelled one's: no news either way.
    const mine = () => signal.aborted;
    let response: Response;
    try {
      response = await base(input, { ...init, signal });
    } catch (error) {
      forget();
      // A POST's failure is its sender's to judge (was it delivered?); a GET's is a lost daemon.
      if (!mine() && method === 'GET') watcher.broken(error);
      throw error;
    }
    if (method === 'GET') watcher.listening();
    if (!response.body) {
      forget();
      return response;
    }
    const reader = response.body.getReader();
    // The reader (the SDK's transport) may drop the stream once it has what it wanted: that is no break.
    let dropped = false;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          forget();
          if (dropped) return;
          if (!mine()) watcher.broken(error);
          controller.error(error);
          return;
        }
        if (dropped) return;
        if (!chunk.done) return controller.enqueue(chunk.value);
        forget();
        controller.close();
        if (!mine() && response.ok) watcher.ended(method, ids);
      },
      cancel: (reason) => {
        forget();
        dropped = true;
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  return { fetch, drop: (id) => streams.get(id)?.abort() };
}
