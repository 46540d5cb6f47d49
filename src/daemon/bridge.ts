/**
 * `arium mcp`: a bridge between an MCP client on standard input and output and the workspace's engine
 * daemon, whose `/mcp` (Streamable HTTP) it reaches over the daemon's Unix socket. It forwards JSON-RPC
 * messages both ways unchanged, with the SDK's two transports (no protocol of its own), so every MCP
 * client of a workspace shares one engine. What it adds is what a pipe cannot do for itself: it starts
 * the daemon when none runs, answers the requests a daemon that stopped took with it, and opens a new
 * session on a new daemon (with the client's own `initialize`) for the next request.
 *
 * A thin client: Node's built-ins, the daemon's paths, link and socket fetch, and the SDK's transports.
 */
import type { Readable, Writable } from 'node:stream';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { JSONRPCMessage, JSONRPCRequest, RequestId } from '@modelcontextprotocol/sdk/types.js';
import { clientCaller } from '../surfaces/mcp/caller.js';
import { CONNECTION_CLOSED, refusalText, stoppedAnswer } from './bridge-answers.js';
import { watchedFetch } from './bridge-fetch.js';
import { type DaemonLink, ensureDaemon } from './link.js';
import { socketFetch } from './socket-fetch.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface BridgeOptions {
  /** The workspace folder (absolute). */
  workspace: string;
  project: string;
  env?: Env;
  stdin?: Readable;
  stdout?: Writable;
  stderr?: Writable;
}

/** How long after a POST's stream ended its requests must have been answered (their bytes are read by then). */
const ENDED_GRACE_MS = 50;
/** How long messages after `initialized` wait for the session's GET stream at most. */
const LISTEN_WAIT_MS = 5000;
/** Connection errors that mean the request never reached a daemon: sending it again cannot run it twice. */
const NOT_DELIVERED = new Set(['ECONNREFUSED', 'ENOENT', 'ENOTSOCK']);

/** One MCP session on one daemon. A daemon that stops ends it; the next request opens another. */
interface Session {
  readonly http: StreamableHTTPClientTransport;
  /** Closes the response stream of a request the client cancelled (bridge-fetch.ts). */
  readonly drop: (id: RequestId) => void;
  /** The client's requests the daemon has not answered yet, by id: their method. */
  readonly inflight: Map<RequestId, string>;
  /** The daemon's requests (elicitation) the client has not answered yet. */
  readonly asked: Set<RequestId>;
  /** The bridge's own requests (a new session's handshake), by id. */
  readonly own: Map<RequestId, (message: JSONRPCMessage) => void>;
  /**
   * Settled once the standalone GET stream is answered: the daemon drops a notification that is not the
   * answer to a request (list_changed, resources/updated) while a session has no such stream, so
   * nothing after `initialized` goes out before it.
   */
  readonly listening: Promise<void>;
  lost: boolean;
}

export class McpBridge {
  readonly #options: Required<Pick<BridgeOptions, 'workspace' | 'project'>> & { env: Env };
  readonly #stdio: StdioServerTransport;
  readonly #stderr: Writable | undefined;
  #session: Session | null = null;
  #opening: Promise<Session> | null = null;
  /** The client's initialize request: sent again, as is, to each new daemon. */
  #initialize: JSONRPCRequest | null = null;
  /** Subscriptions and the log level the client set: a new session is given them again. */
  readonly #subscribed = new Set<string>();
  #logLevel: unknown;
  /** Whether a daemon has answered the client's initialize: a later session is then the bridge's to open. */
  #answered = false;
  #ownIds = 0;
  /** The daemon looked for (or started) while the client's initialize is on its way: for the first session only. */
  #early: Promise<DaemonLink> | null = null;
  #closed = false;

  constructor(options: BridgeOptions) {
    this.#options = { workspace: options.workspace, project: options.project, env: options.env ?? process.env };
    this.#stdio = new StdioServerTransport(options.stdin, options.stdout);
    this.#stderr = options.stderr;
    this.#stdio.onmessage = (message) => void this.#fromClient(message);
    this.#stdio.onerror = (error) => this.#say(`unreadable message from the client: ${error.message}`);
  }

  async start(): Promise<void> {
    this.#early = ensureDaemon(this.#options.workspace, { env: this.#options.env });
    // Its failure is the first request's to report.
    this.#early.catch(() => {});
    await this.#stdio.start();
  }

  /** Ends the daemon session (the daemon goes on serving others) and stops reading. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const session = this.#session;
    this.#session = null;
    if (session && !session.lost) {
      session.lost = true;
      await session.http.terminateSession().catch(() => {});
      await session.http.close().catch(() => {});
    }
    await this.#stdio.close().catch(() => {});
  }

  #say(text: string): void {
    this.#stderr?.write(`arium mcp: ${text}\n`);
  }

  async #toClient(message: JSONRPCMessage): Promise<void> {
    if (!this.#closed) await this.#stdio.send(message).catch(() => {});
  }

  async #fromClient(message: JSONRPCMessage): Promise<void> {
    if ('method' in message && message.method === 'initialize' && 'id' in message) this.#initialize = message;
    if (!('method' in message)) {
      // An answer to the daemon's request: only the session that asked can take it.
      const session = this.#session;
      if (!session?.asked.delete(message.id as RequestId)) return;
      await session.http.send(message).catch(() => {});
      return;
    }
    this.#remember(message);
    await this.#forward(message, true);
  }

  /** What a new session must be told again: the resources subscribed to, the log level. */
  #remember(message: JSONRPCMessage & { method: string }): void {
    const params = (message as { params?: Record<string, unknown> }).params;
    if (message.method === 'resources/subscribe' && typeof params?.uri === 'string') this.#subscribed.add(params.uri);
    if (message.method === 'resources/unsubscribe' && typeof params?.uri === 'string') this.#subscribed.delete(params.uri);
    if (message.method === 'logging/setLevel') this.#logLevel = params?.level;
  }

  async #forward(message: JSONRPCMessage & { method: string }, mayRetry: boolean): Promise<void> {
    const id = 'id' in message ? (message.id as RequestId) : undefined;
    // A notification (a cancellation of a request already answered UNAVAILABLE) starts no daemon: only a request does.
    const idle = (this.#session === null || this.#session.lost) && this.#opening === null;
    if (id === undefined && idle && message.method !== 'notifications/initialized') return;
    let session: Session;
    try {
      session = await this.#open();
    } catch (error) {
      this.#say((error as Error).message);
      if (id !== undefined) await this.#toClient({ jsonrpc: '2.0', id, error: { code: CONNECTION_CLOSED, message: (error as Error).message } });
      return;
    }
    if (message.method !== 'initialize' && message.method !== 'notifications/initialized') await this.#listening(session);
    if (id !== undefined) session.inflight.set(id, message.method);
    // A request the client gives up on is not answered: nothing is left to settle for it.
    const cancelled =
      message.method === 'notifications/cancelled' ? (message as { params?: { requestId?: RequestId } }).params?.requestId : undefined;
    if (cancelled !== undefined) session.inflight.delete(cancelled);
    try {
      await session.http.send(message);
      // The daemon has the cancellation: the request's stream, which will carry nothing more, can go.
      if (cancelled !== undefined) session.drop(cancelled);
    } catch (error) {
      if (session.lost) return; // Settled with the others in flight.
      // Cancelled by the client, and its POST dropped by the bridge before an answer came: no one waits for it.
      if (id !== undefined && !session.inflight.has(id)) return;
      const code = (error as NodeJS.ErrnoException).code;
      const status = typeof code === 'number' ? code : null;
      if (id !== undefined) session.inflight.delete(id);
      const notDelivered = typeof code === 'string' && NOT_DELIVERED.has(code);
      // No daemon took it (none listens, or its session is gone): it is sent once more, to a new one.
      if (notDelivered || (status === 404 && message.method !== 'initialize')) {
        this.#lose(session, 'the engine daemon is gone');
        if (mayRetry) return await this.#forward(message, false);
      } else if (status === null) {
        // Broken while being sent: whether the daemon took it is unknown, as for any request in flight.
        if (id !== undefined) session.inflight.set(id, message.method);
        this.#lose(session, `the connection to the engine daemon broke (${(error as Error).message})`);
        return;
      } else if (message.method === 'initialize') {
        // A session that did not start is of no use to the next request.
        this.#lose(session, 'the daemon refused the session');
      }
      const text = status === null ? (error as Error).message : refusalText(error as Error);
      if (message.method === 'initialize') this.#say(text);
      if (id !== undefined) await this.#toClient({ jsonrpc: '2.0', id, error: { code: CONNECTION_CLOSED, message: text } });
    }
  }

  #fromDaemon(session: Session, message: JSONRPCMessage): void {
    if (!('method' in message)) {
      const id = message.id as RequestId;
      const own = session.own.get(id);
      if (own) {
        own(message);
        return;
      }
      if (session !== this.#session) return;
      session.inflight.delete(id);
      // The protocol version the session speaks goes on every later request, as the SDK's Client does.
      if (id === this.#initialize?.id && 'result' in message) {
        session.http.setProtocolVersion(String(message.result.protocolVersion));
        this.#answered = true;
      }
    } else if (session !== this.#session) {
      return;
    } else if ('id' in message) {
      session.asked.add(message.id);
    }
    void this.#toClient(message);
  }

  /** Waits for the session's GET stream; a daemon that never answers it does not hold the client up for good. */
  async #listening(session: Session): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([session.listening, new Promise((resolve) => (timer = setTimeout(resolve, LISTEN_WAIT_MS)))]);
    clearTimeout(timer);
  }

  /** The session, opening one (and the daemon, when it is not running) when there is none. */
  #open(): Promise<Session> {
    if (this.#session && !this.#session.lost) return Promise.resolve(this.#session);
    this.#opening ??= this.#connect().finally(() => {
      this.#opening = null;
    });
    return this.#opening;
  }

  async #connect(): Promise<Session> {
    const { workspace, project, env } = this.#options;
    // A later session's daemon is looked for again: the early one may be the daemon that stopped.
    const early = this.#early;
    this.#early = null;
    const link = await (early ?? ensureDaemon(workspace, { env }));
    const name = clientCaller('mcp', (this.#initialize?.params as { clientInfo?: { name?: unknown } } | undefined)?.clientInfo?.name);
    let listening = () => {};
    // The watcher's callbacks run once requests go out, after `session` is made.
    const { fetch, drop } = watchedFetch(socketFetch(link.socket, { 'x-arium-client': name }), {
      broken: (error) => {
        listening();
        this.#lose(session, `the engine daemon stopped (${(error as Error).message})`);
      },
      listening: () => listening(),
      ended: (method, ids) => this.#ended(session, method, ids),
    });
    const http = new StreamableHTTPClientTransport(new URL(`http://localhost/p/${encodeURIComponent(project)}/mcp`), {
      fetch,
      // The bridge reopens a session itself, on a daemon that may be new; the SDK's retries would knock on a dead one.
      reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 },
    });
    const session: Session = {
      http,
      drop,
      inflight: new Map(),
      asked: new Set(),
      own: new Map(),
      listening: new Promise<void>((resolve) => {
        listening = resolve;
      }),
      lost: false,
    };
    http.onmessage = (message) => this.#fromDaemon(session, message);
    http.onerror = () => {};
    await http.start();
    // The client's own initialize opens the first session as it passes through; a later one is the bridge's to open.
    if (this.#answered) {
      try {
        await this.#handshake(session);
      } catch (error) {
        this.#lose(session, (error as Error).message);
        throw error;
      }
    }
    this.#session = session;
    this.#say(`bridging to the engine daemon of ${workspace} (pid ${link.pid}), project "${project}"`);
    return session;
  }

  /** Opens a session on a new daemon as the client opened the first: its initialize, then what it had set. */
  async #handshake(session: Session): Promise<void> {
    const ask = async (method: string, params: unknown): Promise<JSONRPCMessage> => {
      const id = `arium-bridge-${++this.#ownIds}`;
      const answer = new Promise<JSONRPCMessage>((resolve) => session.own.set(id, resolve));
      try {
        await session.http.send({ jsonrpc: '2.0', id, method, params: params as Record<string, unknown> });
        return await answer;
      } finally {
        session.own.delete(id);
      }
    };
    const init = this.#initialize as JSONRPCRequest;
    const answer = await ask('initialize', init.params);
    if (!('result' in answer))
      throw new Error(`a new engine daemon refused the session: ${JSON.stringify('error' in answer ? answer.error : answer)}`);
    session.http.setProtocolVersion(String(answer.result.protocolVersion));
    await session.http.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    await this.#listening(session);
    if (this.#logLevel !== undefined) await ask('logging/setLevel', { level: this.#logLevel });
    for (const uri of this.#subscribed) await ask('resources/subscribe', { uri });
    this.#say('reconnected to a new engine daemon');
  }

  /**
   * A stream the daemon ended. The GET one ends only with the session (the daemon is stopping); a
   * POST's ends once it has carried its requests' answers, so one still unanswered once the stream's
   * last bytes have been read went with a session the daemon closed.
   */
  #ended(session: Session, method: string, ids: RequestId[]): void {
    const why = 'the engine daemon closed the session (it is stopping)';
    if (method === 'GET') {
      this.#lose(session, why);
    } else if (ids.length > 0) {
      // The transport reads what the stream carried after it ended here: a turn of the event loop later.
      setTimeout(() => {
        if (ids.some((id) => session.inflight.has(id))) this.#lose(session, why);
      }, ENDED_GRACE_MS);
    }
  }

  /** The daemon of `session` is gone: every request it took is settled, and its questions withdrawn. */
  #lose(session: Session, why: string): void {
    if (session.lost) return;
    session.lost = true;
    if (this.#session === session) this.#session = null;
    if (session.inflight.size > 0 || session.asked.size > 0) this.#say(`${why}; ${session.inflight.size} request(s) in flight answered UNAVAILABLE`);
    for (const [id, method] of session.inflight) void this.#toClient(stoppedAnswer(id, method));
    for (const id of session.asked) {
      void this.#toClient({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'the engine stopped' } });
    }
    for (const [id, settle] of session.own) settle({ jsonrpc: '2.0', id, error: { code: CONNECTION_CLOSED, message: why } });
    session.inflight.clear();
    session.asked.clear();
    // Stops its other streams and the SDK's reconnection attempts; the session died with the daemon.
    void session.http.close().catch(() => {});
  }
}

/** Signals a client sends a server it stops, after closing its input (the SDK's client: SIGTERM, 2 s later). */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/**
 * Runs the bridge until the client closes standard input or stops the process. Either way the daemon's
 * session is ended (DELETE) rather than left for the daemon's idle sweep: the daemon counts the
 * sessions held over its socket against one bound (mcp_sessions_per_key).
 */
export async function runBridge(options: BridgeOptions): Promise<number> {
  const stdin = options.stdin ?? process.stdin;
  const bridge = new McpBridge({ ...options, stdin });
  await bridge.start();
  let stop = () => {};
  await new Promise<void>((resolve) => {
    stop = resolve;
    stdin.once('end', resolve);
    stdin.once('close', resolve);
    for (const signal of STOP_SIGNALS) process.once(signal, resolve);
  });
  for (const signal of STOP_SIGNALS) process.off(signal, stop);
  await bridge.close();
  return 0;
}
