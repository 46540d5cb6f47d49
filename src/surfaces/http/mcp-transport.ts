import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport, type StreamableHTTPServerTransportOptions } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { isJsonContentType } from '@modelcontextprotocol/sdk/shared/mediaType.js';
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import { type JSONRPCMessage, type MessageExtraInfo, type RequestId, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';

/** A request answered by this transport itself: its response, and whether it became a stream. */
interface Direct {
  readonly res: ServerResponse;
  /** The client's `Accept` names `text/event-stream`: messages before the answer may open a stream. */
  readonly canStream: boolean;
  streaming: boolean;
  keepAlive?: NodeJS.Timeout;
}

/** How often an open stream that has nothing to say sends a comment, as the SDK's streams do. */
const KEEP_ALIVE_MS = 15_000;

/**
 * One MCP session's Streamable HTTP transport: a request that needs no stream is answered as one JSON
 * body; everything else goes to the SDK's transport, which answers as server-sent events.
 *
 * The SDK answers each POST as an SSE stream (or, in its JSON mode, every POST as JSON and nothing tied
 * to a request ever reaches the client), through a web `Request`, a `ReadableStream` and SSE frames per
 * call: answered here as JSON, the gateway's calls/s double (bench/mcp-http.ts). The spec lets the
 * server choose per request (`application/json` or `text/event-stream`, the client must take both), so
 * here the choice is made as late as it can be: a `tools/call` (any request) is held as a plain response, and answered as JSON
 * when its answer is the first thing the server sends about it. Should the server send a request or a
 * notification tied to it first (an elicitation for an approval), the response becomes an SSE stream
 * then, and the answer ends it. A request that asks for progress (`_meta.progressToken`) goes to the SDK
 * at once: its stream is resumable (`Last-Event-ID`). The spec has clients accept both types and the
 * SDK refuses others (406); here a client whose `Accept` lacks `text/event-stream` gets every answer as
 * JSON (what is tied to a request then goes to its GET stream), and one that takes only
 * `text/event-stream` (a proxy in front of some clients sends that) gets every answer as a stream.
 */
export class SessionTransport implements Transport {
  readonly #sdk: StreamableHTTPServerTransport;
  /** Requests answered here, until their answer is sent. */
  readonly #direct = new Map<RequestId, Direct>();
  #closed = false;
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T, extra?: MessageExtraInfo) => void;

  constructor(options: StreamableHTTPServerTransportOptions) {
    this.#sdk = new StreamableHTTPServerTransport(options);
    this.#sdk.onmessage = (message, extra) => this.#deliver(message, extra);
    this.#sdk.onerror = (error) => this.onerror?.(error);
    this.#sdk.onclose = () => {
      this.#closed = true;
      for (const direct of this.#direct.values()) unanswered(direct);
      this.#direct.clear();
      this.onclose?.();
    };
  }

  get sessionId(): string | undefined {
    return this.#sdk.sessionId;
  }

  start(): Promise<void> {
    return this.#sdk.start();
  }

  close(): Promise<void> {
    return this.#sdk.close();
  }

  /**
   * A request to `/mcp` on this session (or the `initialize` that makes it): answered here when it can
   * be, else by the SDK.
   */
  async handleRequest(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    if (this.#answersHere(req, res, body)) return;
    const { json, stream } = accepts(req);
    // The SDK takes only clients that accept both (else 406): one that accepts one of them is answered so.
    if (req.method === 'POST' && isRequest(body) && body.method === 'initialize' && json !== stream) return this.#initializeFor(req, res, body, json);
    await this.#sdk.handleRequest(req, res, body);
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const answer = 'result' in message || 'error' in message;
    const id = answer ? message.id : options?.relatedRequestId;
    const direct = id === undefined ? undefined : this.#direct.get(id);
    if (direct === undefined || id === undefined) return this.#sdk.send(message, options);
    const { res } = direct;
    if (answer) {
      this.#direct.delete(id);
      if (direct.keepAlive) clearInterval(direct.keepAlive);
      // The client went away first: nothing can take the answer, as over a stream it lost.
      if (res.destroyed) return;
      if (direct.streaming) {
        res.end(event(message));
      } else {
        const json = JSON.stringify(message);
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(json),
          ...(this.sessionId ? { 'mcp-session-id': this.sessionId } : {}),
        });
        res.end(json);
      }
      return;
    }
    // Something tied to the request comes before its answer: a client that takes a stream gets it on
    // this response, now a stream; another on its GET stream, where the SDK sends what is tied to none.
    if (!direct.canStream) return this.#sdk.send(message);
    if (res.destroyed) return;
    if (!direct.streaming) this.#openStream(direct);
    res.write(event(message));
  }

  /** Makes a held response an SSE stream: its messages, then its answer, go out as events. */
  #openStream(direct: Direct): void {
    const { res } = direct;
    direct.streaming = true;
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
      ...(this.sessionId ? { 'mcp-session-id': this.sessionId } : {}),
    });
    direct.keepAlive = setInterval(() => res.write(': keepalive\n\n'), KEEP_ALIVE_MS);
    direct.keepAlive.unref();
    res.once('close', () => clearInterval(direct.keepAlive));
  }

  #deliver(message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    this.onmessage?.(message, extra);
    if ('method' in message && message.method === 'notifications/cancelled') this.#cancelled(message.params?.requestId);
  }

  /**
   * A request the client cancelled is given no answer (MCP's cancellation says so): its response ends
   * as accepted with nothing to say, which the SDK's client takes as the end of the request, rather
   * than staying open for an answer that never comes.
   */
  #cancelled(id: unknown): void {
    if (typeof id !== 'string' && typeof id !== 'number') return;
    const direct = this.#direct.get(id);
    if (direct === undefined) return;
    this.#direct.delete(id);
    if (direct.keepAlive) clearInterval(direct.keepAlive);
    if (direct.res.destroyed || direct.res.writableEnded) return;
    if (direct.streaming) direct.res.end();
    else {
      direct.res.writeHead(202);
      direct.res.end();
    }
  }

  /**
   * Takes a POST of one JSON-RPC message in JSON, in a protocol version the SDK knows: a request (but
   * one asking for progress from a client that takes both types); or a notification or a response (the
   * answer to an elicitation), which has no answer but 202. Anything else (batches, `initialize`, bad
   * headers, which the SDK answers with its own errors) is left to the SDK.
   */
  #answersHere(req: IncomingMessage, res: ServerResponse, body: unknown): boolean {
    if (this.#closed || req.method !== 'POST' || !isJsonContentType(req.headers['content-type'])) return false;
    const version = req.headers['mcp-protocol-version'];
    if (version !== undefined && (typeof version !== 'string' || !SUPPORTED_PROTOCOL_VERSIONS.includes(version))) return false;
    if (isNotificationOrResponse(body)) {
      res.writeHead(202);
      res.end();
      this.#deliver(body as JSONRPCMessage, { requestInfo: { headers: req.headers } });
      return true;
    }
    const { json, stream } = accepts(req);
    if (!isRequest(body) || body.method === 'initialize' || !(json || stream)) return false;
    // Progress goes to the SDK's stream, which a client can resume, when the client takes both.
    if (json && stream && body.params?._meta?.progressToken !== undefined) return false;
    if (this.#direct.has(body.id)) {
      // Two requests in flight under one id could not be told apart by their answers.
      const refusal = JSON.stringify({
        jsonrpc: '2.0',
        id: body.id,
        error: { code: -32600, message: `Request id ${JSON.stringify(body.id)} is already in flight in this session; give each request its own id` },
      });
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(refusal);
      return true;
    }
    const direct: Direct = { res, canStream: stream, streaming: false };
    this.#direct.set(body.id, direct);
    // A client that takes no JSON gets a stream from the start, its answer the last event.
    if (!json) this.#openStream(direct);
    this.#deliver(body as JSONRPCMessage, { requestInfo: { headers: req.headers } });
    return true;
  }

  /**
   * `initialize` from a client that accepts JSON or a stream but not both: the SDK answers it (it makes
   * the session) on a stream, as it insists, and that is sent on as it is, or its one message as JSON.
   */
  async #initializeFor(req: IncomingMessage, res: ServerResponse, body: unknown, json: boolean): Promise<void> {
    // The Node transport hands requests to its web-standard one; only that takes a request built here.
    const web = (this.#sdk as unknown as { _webStandardTransport?: WebStandardStreamableHTTPServerTransport })._webStandardTransport;
    if (web === undefined) return this.#sdk.handleRequest(req, res, body);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === 'string') headers.set(name, value);
    }
    headers.set('accept', 'application/json, text/event-stream');
    const answer = await web.handleRequest(new Request(`http://localhost${req.url ?? '/mcp'}`, { method: 'POST', headers }), { parsedBody: body });
    const text = await answer.text();
    const session = answer.headers.get('mcp-session-id');
    const sse = (answer.headers.get('content-type') ?? '').startsWith('text/event-stream');
    const type = sse && !json ? 'text/event-stream' : 'application/json';
    // An SSE answer holds its message in a `data:` line; the empty one before it only primes resumption.
    // (A refusal is JSON whatever the client takes, as the SDK sends it.)
    const out =
      sse && json
        ? (text
            .split('\n')
            .filter((line) => line.startsWith('data:') && line.slice(5).trim() !== '')
            .map((line) => line.slice(5).trim())[0] ?? '')
        : text;
    res.writeHead(answer.status, { 'content-type': type, ...(session ? { 'mcp-session-id': session } : {}) });
    res.end(out);
  }
}

/**
 * What the client's `Accept` takes: JSON (`application/json`, or any type: `*\/*`, `application/*`, no
 * header at all, as RFC 9110 reads them) and an SSE stream (`text/event-stream`).
 */
function accepts(req: IncomingMessage): { json: boolean; stream: boolean } {
  const accept = req.headers.accept;
  if (accept === undefined) return { json: true, stream: false };
  return {
    json: accept.includes('application/json') || accept.includes('*/*') || accept.includes('application/*'),
    stream: accept.includes('text/event-stream'),
  };
}

function isNotificationOrResponse(body: unknown): boolean {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return false;
  const message = body as Record<string, unknown>;
  if (message.jsonrpc !== '2.0') return false;
  if (typeof message.method === 'string') return !('id' in message) && (message.params === undefined || isObject(message.params));
  const id = message.id;
  return (
    (typeof id === 'string' || Number.isInteger(id)) &&
    (('result' in message && isObject(message.result)) || ('error' in message && isObject(message.error)))
  );
}

function isObject(value: unknown): boolean {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

interface RequestShape {
  jsonrpc: '2.0';
  id: RequestId;
  method: string;
  params?: { _meta?: { progressToken?: unknown } };
}

/** The shape of a JSON-RPC request; its params are checked by the handler of its method, as the SDK does. */
function isRequest(body: unknown): body is RequestShape {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return false;
  const { jsonrpc, id, method, params } = body as Record<string, unknown>;
  if (jsonrpc !== '2.0' || typeof method !== 'string') return false;
  if (typeof id !== 'string' && !Number.isInteger(id)) return false;
  if (params === undefined) return true;
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return false;
  const meta = (params as { _meta?: unknown })._meta;
  return meta === undefined || (meta !== null && typeof meta === 'object');
}

function event(message: JSONRPCMessage): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}

/**
 * A request still open when its session closed: its stream ends, or its connection is cut, with no
 * answer, as an SSE stream of the SDK ends. The call may have run: a JSON-RPC error would tell the
 * client it did not, and a 404 that the session is gone, which a client answers by sending it again.
 */
function unanswered(direct: Direct): void {
  if (direct.keepAlive) clearInterval(direct.keepAlive);
  if (direct.res.destroyed || direct.res.writableEnded) return;
  if (direct.streaming) direct.res.end();
  else direct.res.destroy();
}
