import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { EventStore } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { isInitializeRequest, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { Engine } from '../../engine.js';
import { createMcpServer } from '../mcp/server.js';

/**
 * MCP over Streamable HTTP (`/mcp`): one SDK transport and one server per session, made by an
 * `initialize` request and named by the `Mcp-Session-Id` header after it. Streams are resumable: each
 * session keeps its last messages so a client that lost a stream replays them with `Last-Event-ID`.
 */
export class McpSessions {
  readonly #sessions = new Map<string, { transport: StreamableHTTPServerTransport; engine: Engine }>();

  get size(): number {
    return this.#sessions.size;
  }

  async handle(engine: Engine, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const id = req.headers['mcp-session-id'];
    if (typeof id === 'string') {
      const session = this.#sessions.get(id);
      // A session belongs to the project it was opened on: its id does not reach another's.
      if (!session || session.engine !== engine) return reply(res, 404, -32001, `No MCP session ${id.slice(0, 64)} here; initialize a new one`);
      await session.transport.handleRequest(req, res, body);
      return;
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return reply(res, 400, -32000, 'No Mcp-Session-Id header: the first request of a session is an initialize request (POST)');
    }
    const { server, detach } = createMcpServer(engine, {
      caller: 'mcp-http',
      // Over the gateway an approval can be answered by POST /v1/approvals/{run_id}: the call waits for it.
      pendingApprovals: 'wait',
      ...(engine.config.surfaces?.mcp ? { profile: engine.config.surfaces.mcp } : {}),
    });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new BoundedEventStore(1000),
      onsessioninitialized: (sessionId) => {
        this.#sessions.set(sessionId, { transport, engine });
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) this.#sessions.delete(transport.sessionId);
      detach();
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  async close(): Promise<void> {
    const all = [...this.#sessions.values()];
    this.#sessions.clear();
    await Promise.all(all.map((s) => s.transport.close().catch(() => {})));
  }
}

function reply(res: ServerResponse, status: number, code: number, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

/** The last `size` messages of a session's streams, for replay after a reconnect. */
class BoundedEventStore implements EventStore {
  readonly #events = new Map<string, { streamId: string; message: JSONRPCMessage }>();
  #seq = 0;

  constructor(readonly size: number) {}

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}_${++this.#seq}`;
    this.#events.set(id, { streamId, message });
    if (this.#events.size > this.size) this.#events.delete(this.#events.keys().next().value as string);
    return id;
  }

  async getStreamIdForEventId(eventId: string): Promise<string | undefined> {
    return this.#events.get(eventId)?.streamId;
  }

  async replayEventsAfter(lastEventId: string, { send }: { send: (eventId: string, message: JSONRPCMessage) => Promise<void> }): Promise<string> {
    const from = this.#events.get(lastEventId);
    if (!from) return '';
    let after = false;
    for (const [id, event] of this.#events) {
      if (id === lastEventId) {
        after = true;
        continue;
      }
      if (after && event.streamId === from.streamId) await send(id, event.message);
    }
    return from.streamId;
  }
}
