/**
 * `fetch` over a Unix socket: what the MCP SDK's HTTP client transport, `connect()` and the CLI's
 * thin path use to reach a daemon. Node's own fetch cannot be given a socket path without undici's
 * Agent; this is node:http's `socketPath` behind the Fetch API's types. Built-ins only: thin clients load it.
 */
import { request } from 'node:http';
import { Readable } from 'node:stream';

export type SocketFetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** The host name requests name: a loopback name, which the daemon's Host check accepts. */
export const SOCKET_HOST = 'localhost';

async function bodyBytes(body: RequestInit['body']): Promise<Buffer | undefined> {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string') return Buffer.from(body);
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  return Buffer.from(await new Response(body).arrayBuffer());
}

/**
 * A fetch whose every request goes to `socket`, whatever host its URL names (the path and query are
 * kept). The response body streams (an SSE stream stays open); aborting `init.signal` closes the request.
 */
export function socketFetch(socket: string, extraHeaders: Readonly<Record<string, string>> = {}): SocketFetch {
  return async (input, init = {}) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url, `http://${SOCKET_HOST}`);
    const headers: Record<string, string> = { ...extraHeaders };
    new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined)).forEach((value, name) => {
      headers[name] = value;
    });
    headers.host = SOCKET_HOST;
    const body = await bodyBytes(init.body ?? undefined);
    if (body) headers['content-length'] = String(body.length);
    const signal = init.signal ?? undefined;
    signal?.throwIfAborted();
    return await new Promise<Response>((resolve, reject) => {
      const req = request(
        { socketPath: socket, method: init.method ?? 'GET', path: `${url.pathname}${url.search}`, headers, ...(signal ? { signal } : {}) },
        (res) => {
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(res.headers)) {
            if (value === undefined) continue;
            for (const each of Array.isArray(value) ? value : [value]) responseHeaders.append(name, each);
          }
          const status = res.statusCode ?? 502;
          const noBody = status === 204 || status === 304 || init.method === 'HEAD';
          if (noBody) res.resume();
          resolve(
            new Response(noBody ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), {
              status,
              statusText: res.statusMessage ?? '',
              headers: responseHeaders,
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  };
}
