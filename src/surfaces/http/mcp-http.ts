import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EventStore } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { isInitializeRequest, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { Engine } from '../../engine.js';
import type { GatewayLimits } from '../../limits.js';
import { type AriumMcpServer, createMcpServer } from '../mcp/server.js';
import { errorEnvelope, type RunEnvelope } from './envelope.js';
import { SessionTransport } from './mcp-transport.js';

/** What `/mcp` holds: open sessions, their subscriptions, and the subscriptions changes have looked at. */
export interface McpSessionStats {
  sessions: number;
  subscriptions: number;
  /** Subscriptions looked at by every change so far, in sessions open or closed: the work of notifying them. */
  subscriptions_examined: number;
  /** JSON bytes the sessions keep for replay to clients that reconnect (`mcp_replay_bytes` each at most). */
  replay_bytes: number;
}

interface Session {
  readonly transport: SessionTransport;
  readonly engine: Engine;
  readonly mcp: AriumMcpServer;
  readonly replay: BoundedEventStore;
  /** Requests and streams of the session open now; a session with none is idle. */
  open: number;
  /** When the last of them closed. */
  since: number;
}

/**
 * MCP over Streamable HTTP (`/mcp`): one SDK transport and one server per session, made by an
 * `initialize` request and named by the `Mcp-Session-Id` header after it. A request that needs no stream
 * is answered as JSON (mcp-transport.ts). Streams are resumable: each
 * session keeps its last messages so a client that lost a stream replays them with `Last-Event-ID`.
 * Sessions are bounded (limits.ts, `GatewayLimits`): so many in all and per key, and one left idle is
 * closed, since a client that goes away without `DELETE` leaves its server behind (about 50 KB each, measured).
 */
export class McpSessions {
  readonly #sessions = new Map<string, Session>();
  /** Sessions held or being opened, by key: a slot is taken before `initialize` is answered. */
  readonly #held = new Map<string, number>();
  #total = 0;
  /** Subscriptions examined by sessions now closed, so the count never goes back. */
  #examinedBefore = 0;
  readonly #sweeper: NodeJS.Timeout;

  constructor(readonly limits: Readonly<GatewayLimits>) {
    this.#sweeper = setInterval(() => this.#sweep(), Math.max(10, Math.min(60_000, limits.mcp_session_idle_ms / 2)));
    this.#sweeper.unref();
  }

  get size(): number {
    return this.#sessions.size;
  }

  stats(): McpSessionStats {
    let subscriptions = 0;
    let examined = this.#examinedBefore;
    let replay = 0;
    for (const session of this.#sessions.values()) {
      subscriptions += session.mcp.subscriptions.size;
      examined += session.mcp.subscriptions.examined;
      replay += session.replay.bytes;
    }
    return { sessions: this.#sessions.size, subscriptions, subscriptions_examined: examined, replay_bytes: replay };
  }

  /**
   * `keyOf` names who asks (the API key's digest, or the client's address): sessions are counted by it.
   * Only an `initialize` needs it; a session's other requests skip the digest.
   */
  async handle(engine: Engine, keyOf: () => string, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const id = req.headers['mcp-session-id'];
    if (typeof id === 'string') {
      const session = this.#sessions.get(id);
      // A session belongs to the project it was opened on: its id does not reach another's.
      if (!session || session.engine !== engine) return reply(res, 404, -32001, `No MCP session ${id.slice(0, 64)} here; initialize a new one`);
      this.#busy(session, res);
      await session.transport.handleRequest(req, res, body);
      return;
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return reply(res, 400, -32000, 'No Mcp-Session-Id header: the first request of a session is an initialize request (POST)');
    }
    const key = keyOf();
    const refused = this.#refusal(key);
    if (refused) return refuse(res, refused.status, refused.envelope);
    const release = this.#take(key);
    // Each session's server listens to its engine, as many as `mcp_sessions` allows: not the leak
    // Node warns of past 10 listeners.
    if (engine.events.getMaxListeners() < this.limits.mcp_sessions + 10) engine.events.setMaxListeners(this.limits.mcp_sessions + 10);
    const mcp = createMcpServer(engine, {
      // Over the daemon's socket (no remote address) a session is the stdio bridge's: `mcp:<client>`, as an
      // in-process `arium mcp` names it; over TCP, `mcp-http:<client>`.
      caller: req.socket.remoteAddress === undefined ? 'mcp' : 'mcp-http',
      // Over the gateway an approval can be answered by POST /v1/approvals/{run_id}: the call waits for it.
      pendingApprovals: 'wait',
      maxSubscriptions: this.limits.mcp_subscriptions,
      ...(engine.config.surfaces?.mcp ? { profile: engine.config.surfaces.mcp } : {}),
    });
    const replay = new BoundedEventStore(1000, this.limits.mcp_replay_bytes);
    let session: Session | undefined;
    const transport: SessionTransport = new SessionTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: replay,
      onsessioninitialized: (sessionId) => {
        session = { transport, engine, mcp, replay, open: 0, since: Date.now() };
        this.#sessions.set(sessionId, session);
        this.#busy(session, res);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId && this.#sessions.get(transport.sessionId)?.transport === transport) {
        this.#sessions.delete(transport.sessionId);
        this.#examinedBefore += mcp.subscriptions.examined;
      }
      mcp.detach();
      release();
    };
    try {
      await mcp.server.connect(transport);
      await transport.handleRequest(req, res, body);
    } finally {
      // An initialize that failed or was refused made no session: nothing may keep its server or its slot.
      if (session === undefined) await transport.close();
    }
  }

  async close(): Promise<void> {
    clearInterval(this.#sweeper);
    const all = [...this.#sessions.values()];
    this.#sessions.clear();
    await Promise.all(all.map((s) => s.transport.close().catch(() => {})));
  }

  #refusal(key: string): { status: number; envelope: RunEnvelope } | null {
    const { mcp_sessions: total, mcp_sessions_per_key: perKey, mcp_session_idle_ms: idle } = this.limits;
    const after = `Close sessions you no longer use (DELETE /mcp with their Mcp-Session-Id); an idle one closes by itself after ${idle} ms`;
    if ((this.#held.get(key) ?? 0) >= perKey) {
      return {
        status: 429,
        envelope: errorEnvelope(
          'BUSY',
          `This client (its API key, or its address on a gateway without one) already holds ${perKey} MCP sessions, the most one key may (mcp_sessions_per_key). ${after}.`,
          {
            stage: 'transport',
            details: { limit: perKey, limit_name: 'mcp_sessions_per_key' },
          },
        ),
      };
    }
    if (this.#total >= total) {
      return {
        status: 503,
        envelope: errorEnvelope('UNAVAILABLE', `The gateway holds ${total} MCP sessions, the most it may (mcp_sessions). ${after}.`, {
          stage: 'transport',
          details: { limit: total, limit_name: 'mcp_sessions' },
        }),
      };
    }
    return null;
  }

  /** Takes a slot for `key`; the function returned gives it back, once. */
  #take(key: string): () => void {
    this.#total++;
    this.#held.set(key, (this.#held.get(key) ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.#total--;
      const left = (this.#held.get(key) ?? 1) - 1;
      if (left === 0) this.#held.delete(key);
      else this.#held.set(key, left);
    };
  }

  /** Counts a request or stream as open on `session` until its response closes. */
  #busy(session: Session, res: ServerResponse): void {
    session.open++;
    res.once('close', () => {
      session.open--;
      session.since = Date.now();
    });
  }

  #sweep(): void {
    const before = Date.now() - this.limits.mcp_session_idle_ms;
    for (const session of this.#sessions.values()) {
      if (session.open === 0 && session.since <= before) void session.transport.close().catch(() => {});
    }
  }
}

function reply(res: ServerResponse, status: number, code: number, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

function refuse(res: ServerResponse, status: number, envelope: RunEnvelope): void {
  res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '1' });
  res.end(JSON.stringify(envelope));
}

/**
 * The last messages of a session's streams, for replay after a reconnect: at most `count`, and at most
 * `bytes` of JSON (the newest is kept whatever its size). A count alone let one session keep a thousand
 * tool results of up to the output cap each.
 */
class BoundedEventStore implements EventStore {
  readonly #events = new Map<string, { streamId: string; message: JSONRPCMessage; bytes: number }>();
  #seq = 0;
  #bytes = 0;

  constructor(
    readonly count: number,
    readonly budget: number,
  ) {}

  /** JSON bytes held now. */
  get bytes(): number {
    return this.#bytes;
  }

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}_${++this.#seq}`;
    const bytes = Buffer.byteLength(JSON.stringify(message));
    this.#events.set(id, { streamId, message, bytes });
    this.#bytes += bytes;
    while (this.#events.size > 1 && (this.#events.size > this.count || this.#bytes > this.budget)) {
      const [oldest, event] = this.#events.entries().next().value as [string, { bytes: number }];
      this.#events.delete(oldest);
      this.#bytes -= event.bytes;
    }
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
