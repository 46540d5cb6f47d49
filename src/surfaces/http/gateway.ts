import { timingSafeEqual } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import swagger from '@fastify/swagger';
import Fastify, { type ConnectionError, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { GatewayForwarding } from '../../daemon/forward.js';
import { answerForwarded, localHandler } from '../../daemon/forward-http.js';
import { createEngine, type Engine, EngineConfigError, type EngineOptions } from '../../engine.js';
import { ToolFailure } from '../../errors.js';
import type { SecurityEvent } from '../../events.js';
import { DEFAULT_GATEWAY_LIMITS, type GatewayLimits } from '../../limits.js';
import { ProjectLockedError } from '../../store/lock.js';
import { SurfaceAccess } from '../access.js';
import { errorEnvelope, type RunEnvelope } from './envelope.js';
import { EventLog } from './event-log.js';
import { type HeaderRefusal, hostRules, refusal } from './host-guard.js';
import { builtInspector, isInspectorAsset, registerInspector } from './inspector.js';
import { jsonBreak } from './json-body.js';
import { type McpSessionStats, McpSessions } from './mcp-http.js';
import { failureStatus } from './replies.js';
import { bearer, decoded, digest, header, hostChecked, hostPassed, overSocket } from './request.js';
import { approvalRoutes } from './routes/approvals.js';
import { cliRoutes } from './routes/cli.js';
import type { RouteContext, Served } from './routes/context.js';
import { eventRoutes } from './routes/events.js';
import { mcpRoutes } from './routes/mcp.js';
import { skillRoutes } from './routes/skills.js';
import { toolRoutes } from './routes/tools.js';
import { vfsRoutes } from './routes/vfs.js';

/**
 * `arium serve`: the HTTP gateway (Fastify, with JSON-Schema validation of every request). One server
 * serves the workspace's projects: the default one at `/v1/…` and `/mcp`, any project at
 * `/p/<project>/v1/…` and `/p/<project>/mcp`, each engine opened on first use. Runs go through
 * `engine.call`, so results, errors, permissions and events are those of every other surface.
 * This file builds the server: request guards, error answers, opening projects; each family of routes is
 * a module of routes/, the SSE event log is event-log.ts, the inspector inspector.ts, MCP sessions mcp-http.ts.
 */

export interface GatewayOptions {
  workspace: string;
  /** The project served at `/v1` and `/mcp`. */
  project: string;
  /** When set, every request but `/healthz` needs it (`Authorization: Bearer <key>` or `X-API-Key`). */
  apiKey?: string;
  /** Largest request body, bytes (default: the engine's 1 MiB input cap and room for the envelope). */
  bodyLimit?: number;
  /** How many recent events each project keeps for `Last-Event-ID` resumption (default 1,000). */
  eventBuffer?: number;
  /** More engine options for every project opened (tests: `persist: false`). */
  engineOptions?: Omit<EngineOptions, 'workspace' | 'project'>;
  /**
   * Serve the inspector page at `/` and keep each project's change log for it (default true); its
   * API routes (`/v1/fs/*`, `/v1/runs/…/diff`, `/v1/project`) are served either way.
   */
  inspector?: boolean;
  /** Where the built inspector is (default: `dist/inspector` of this installation). */
  inspectorDir?: string;
  /**
   * Host names clients may reach the gateway by, besides loopback names (`localhost`, `*.localhost`) and
   * IP addresses: every request's `Host` is checked, against DNS rebinding (host-guard.ts). `arium serve
   * --allow-host`; the name `--host` binds is added by `arium serve`.
   */
  allowedHosts?: string[];
  /** Origins (`http://host:port`) besides the gateway's own whose pages may send it requests. `arium serve --allow-origin`. */
  allowedOrigins?: string[];
  /** Request timeouts and MCP session bounds; each field defaults to `DEFAULT_GATEWAY_LIMITS` (limits.ts). */
  limits?: Partial<GatewayLimits>;
  /** Set by the engine daemon: what `/healthz` answers over its socket (never over TCP, where it would tell a pid to the network). */
  daemon?: () => DaemonHealth;
}

/** The engine daemon as `/healthz` describes it over the socket (src/daemon/server.ts). */
export interface DaemonHealth {
  pid: number;
  /** The package's version. */
  version: string;
  /** `DAEMON_PROTOCOL` (src/daemon/paths.ts): clients of another protocol refuse it. */
  protocol: number;
  workspace: string;
  /** Its loopback HTTP address, or null when it serves the socket only. */
  http: string | null;
}

export interface Gateway {
  readonly app: FastifyInstance;
  /** Engines opened so far, by project. */
  engines(): Map<string, Engine>;
  /** The live engine of a project, opened on first use as a request for it would open it. */
  project(name: string): Promise<Engine>;
  /** How many forwarded CLI commands (`POST /v1/cli`) are running. */
  cliCommands(): number;
  /** The MCP sessions open at `/mcp` (every project's), their subscriptions, and the work of notifying them. */
  mcpSessions(): McpSessionStats;
  close(): Promise<void>;
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const limits = gatewayLimits(options.limits);
  const rules = hostRules(options.allowedHosts, options.allowedOrigins);
  const app = Fastify({
    bodyLimit: options.bodyLimit ?? 1024 * 1024 + 64 * 1024,
    // Validation errors list every problem, as the engine's own do.
    ajv: { customOptions: { allErrors: true, coerceTypes: false, removeAdditional: false } },
    logger: false,
    forceCloseConnections: true,
    // A request must arrive whole in time: a client that trickles its headers or body holds a socket and
    // a request for as long as it likes otherwise (Fastify turns Node's request timeout off by default).
    requestTimeout: limits.request_timeout_ms,
    http: {
      headersTimeout: limits.headers_timeout_ms,
      requestTimeout: limits.request_timeout_ms,
      // Node looks for late requests every 30 s by default: a timeout of seconds would be one of 30.
      connectionsCheckingInterval: Math.max(50, Math.min(5000, Math.floor(limits.headers_timeout_ms / 4))),
    },
    clientErrorHandler: clientErrorAnswer(limits),
  });
  const served = new Map<string, Promise<Served>>();
  /** The projects of `served` that are open, for requests to take without waiting on a promise. */
  const ready = new Map<string, Served>();
  const opened = new Map<string, Engine>();
  const mcp = new McpSessions(limits);
  const inspector = options.inspector !== false;
  let closing = false;
  // A project kept in NATS with store.forward: requests for it that another gateway holds go there.
  const forwarding = new GatewayForwarding(options.workspace, options.engineOptions?.env ?? process.env, localHandler(app, options.apiKey));
  // The engine lost the project to another gateway's: requests go back to being forwarded.
  const drop = (project: string) => {
    const entry = served.get(project);
    served.delete(project);
    ready.delete(project);
    opened.delete(project);
    entry
      ?.then(({ engine, events }) => {
        events.detach();
        return engine.close();
      })
      .catch(() => {});
  };

  const open = (project: string): Promise<Served> => {
    let entry = served.get(project);
    if (!entry) {
      entry = (async () => {
        const engine = await createEngine({
          watch: true,
          ...(inspector ? { changeLog: true } : {}),
          ...options.engineOptions,
          workspace: options.workspace,
          project,
        });
        if (closing) {
          await engine.close();
          throw new ToolFailure('transport', 'UNAVAILABLE', 'The gateway is shutting down');
        }
        try {
          await (await forwarding.link(project))?.serve(engine, () => drop(project));
        } catch (error) {
          await engine.close();
          throw error;
        }
        opened.set(project, engine);
        const profile = engine.config.surfaces?.http;
        const access = new SurfaceAccess(engine, profile, 'http');
        const entry: Served = {
          engine,
          events: new EventLog(engine, options.eventBuffer ?? 1000),
          visible: access.offered,
          listed: access.listed,
          grants: profile?.grants,
          access,
        };
        ready.set(project, entry);
        return entry;
      })();
      served.set(project, entry);
      // A project that failed to open is tried again by the next request (it may have been made since).
      entry.catch(() => served.delete(project));
    }
    return entry;
  };

  app.decorateRequest('served', null);
  // JSON only: a body of another type is 415, not a string the schema then refuses.
  app.removeContentTypeParser('text/plain');
  // JSON.parse, for its error position (Fastify's parser does not say where a body broke). Keys named
  // __proto__ become own data properties here, and the engine copies input without prototypes anyway.
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    const text = body as string;
    // A search for any non-space character, not a trimmed copy of every body.
    if (!/\S/.test(text)) {
      done(Object.assign(new Error('empty body'), { code: 'FST_ERR_CTP_EMPTY_JSON_BODY', statusCode: 400 }), undefined);
      return;
    }
    try {
      done(null, JSON.parse(text));
    } catch (error) {
      done(Object.assign(new SyntaxError((error as Error).message), { statusCode: 400, body: text }), undefined);
    }
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Arium gateway',
        version: '1',
        description: 'Run the tools of an Arium project over HTTP. Every error has the run envelope shape.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' }, apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' } } },
    },
  });

  /**
   * A refused request is a SecurityEvent of the project its path names when that one is open, else of
   * every open engine, else of the default project's (opened for it, as a first request would open it).
   */
  let openedToReport = false;
  const reportRefused = (request: FastifyRequest, refused: HeaderRefusal) => {
    const path = request.url.split('?')[0] as string;
    const event: SecurityEvent = {
      type: 'SecurityEvent',
      at: new Date().toISOString(),
      run_id: null,
      trace_id: null,
      tool: /\/v1\/tools\/([^/:]+)/.exec(path)?.[1]?.slice(0, 128) ?? '',
      action: 'request_refused',
      permission: null,
      operation: `${request.method} ${path.length > 200 ? `${path.slice(0, 200)}…` : path}`,
      reason: refused.reason,
      request: { header: refused.header, value: refused.value, address: request.ip },
    };
    const named = /^\/p\/([^/]+)/.exec(path)?.[1];
    const engine = opened.get(named === undefined ? options.project : decoded(named));
    const engines = engine ? [engine] : [...opened.values()];
    for (const each of engines) each.events.publish(event);
    // Once: a default project that cannot be opened is not tried again for every refused request.
    if (engines.length === 0 && !closing && !openedToReport) {
      openedToReport = true;
      open(options.project).then(
        ({ engine }) => engine.events.publish(event),
        () => {},
      );
    }
  };

  // First of all: a request by a name or from a page this gateway does not answer is refused before
  // anything else looks at it (also /healthz, which names the open projects, and the inspector's files).
  app.addHook('onRequest', (request, reply, done) => {
    const host = request.headers.host;
    const origin = header(request.headers.origin) ?? undefined;
    // The answer depends on these two headers alone: a keep-alive connection that sends the pair it sent
    // last, and was let through with, is let through again without parsing them anew.
    if (hostChecked(request, host, origin)) return done();
    const refused = refusal(rules, host, origin);
    if (!refused) {
      hostPassed(request, host, origin);
      return done();
    }
    reportRefused(request, refused);
    reply
      .code(403)
      .send(errorEnvelope('DENIED', refused.message, { stage: 'permission', details: { header: refused.header, value: refused.value } }));
  });

  const expected = options.apiKey ? digest(options.apiKey) : null;
  // Registered only on a gateway that has a key: with none, a request has nothing to check here.
  if (expected !== null) {
    app.addHook('onRequest', (request, reply, done) => {
      if (request.url === '/healthz' || (inspector && isInspectorAsset(request.method, request.url))) return done();
      // The socket is the local user's own (0600 in a 0700 folder): the key guards the TCP port only.
      if (overSocket(request)) return done();
      const given = bearer(request.headers.authorization) ?? header(request.headers['x-api-key']);
      // Compared as digests of equal length, in constant time; the key itself is never logged or echoed.
      if (given !== null && timingSafeEqual(digest(given), expected)) return done();
      reply.header('www-authenticate', 'Bearer');
      reply
        .code(401)
        .send(errorEnvelope('DENIED', 'This gateway needs an API key: Authorization: Bearer <key> or X-API-Key', { stage: 'permission' }));
    });
  }

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const traceId = header(request.headers['x-trace-id']);
    if (error.validation) {
      return reply.code(400).send(
        errorEnvelope('INVALID_INPUT', `The request does not match the gateway's schema: ${error.message}`, {
          traceId,
          details: { problems: error.validation.map((v) => ({ pointer: v.instancePath || '/', message: v.message ?? 'invalid' })) },
        }),
      );
    }
    switch (error.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return reply.code(413).send(
          errorEnvelope('INPUT_TOO_LARGE', `The request body is over ${app.initialConfig.bodyLimit} bytes`, {
            traceId,
            details: { limit: app.initialConfig.bodyLimit },
          }),
        );
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return reply.code(415).send(errorEnvelope('INVALID_INPUT', 'Send the body as application/json', { traceId }));
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return reply.code(400).send(errorEnvelope('INVALID_INPUT', 'The body is empty; send a JSON object such as {"input": {}}', { traceId }));
    }
    if (error instanceof SyntaxError || error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error.statusCode === 400) {
      const body: unknown = (error as { body?: unknown }).body;
      const at = typeof body === 'string' ? jsonBreak(body, error.message) : null;
      return reply
        .code(400)
        .send(
          errorEnvelope(
            'INVALID_INPUT',
            `The body is not valid JSON: ${error.message}${at ? ` (${at.problem} at character ${at.position}, line ${at.line} column ${at.column})` : ''}`,
            { traceId, ...(at ? { details: { ...at } } : {}) },
          ),
        );
    }
    if (error instanceof ToolFailure)
      return reply
        .code(failureStatus(error))
        .send(errorEnvelope(error.code, error.message, { stage: error.stage, traceId, ...(error.details ? { details: error.details } : {}) }));
    return reply.code(500).send(errorEnvelope('INTERNAL', 'The gateway failed to answer this request', { stage: 'transport', traceId }));
  });

  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(errorEnvelope('NOT_FOUND', `No route ${request.method} ${request.url.split('?')[0]}; see /v1/openapi.json`)),
  );

  app.get('/healthz', { schema: { hide: true } }, async (request) => ({
    ok: true,
    projects: [...opened.keys()],
    ...(options.daemon && overSocket(request) ? { daemon: options.daemon() } : {}),
  }));

  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  if (inspector) await registerInspector(app, options.inspectorDir ?? builtInspector());

  const context: RouteContext = { options, inspector, mcp, keyed: expected !== null };
  const project = async (name: string) => (await open(name)).engine;
  const cli = cliRoutes(app, { workspace: options.workspace, engine: project });
  const routes = async (scope: FastifyInstance, fixed: string | null) => {
    // Under /p/:project a route that declares its own path parameters must declare `project` too, or
    // the OpenAPI document lists a path template with a parameter it does not define (invalid 3.1).
    if (fixed === null) scope.addHook('onRoute', (route) => withProjectParam(route.schema));
    // Which engine a request is for: the default project, or the one named in the path. A project open
    // here is given to its requests at once (no promise to wait on per request); any other is opened, or
    // forwarded to the gateway that holds it.
    const find = async (project: string, request: FastifyRequest, reply: FastifyReply): Promise<boolean> => {
      const path = fixed === null ? request.url.replace(/^\/p\/[^/?]*/, '') : request.url;
      if (!served.has(project) && (await answerForwarded(forwarding, project, path, request, reply, false))) return true;
      try {
        (request as FastifyRequest & { served: Served }).served = await open(project);
        return false;
      } catch (error) {
        // Another gateway's engine took the project first: it answers.
        if (error instanceof ProjectLockedError && (await answerForwarded(forwarding, project, path, request, reply, true))) return true;
        throw openFailure(project, error);
      }
    };
    scope.addHook('preHandler', (request, reply, done) => {
      const project = fixed ?? (request.params as { project?: string }).project ?? '';
      const entry = ready.get(project);
      if (entry !== undefined) {
        (request as FastifyRequest & { served: Served }).served = entry;
        return done();
      }
      // An answer a forwarded request got is already sent: the route's handler must not run.
      find(project, request, reply).then(
        (answered) => {
          if (!answered) done();
        },
        (error: unknown) => done(error as FastifyError),
      );
    });
    toolRoutes(scope);
    skillRoutes(scope);
    vfsRoutes(scope, context);
    approvalRoutes(scope);
    eventRoutes(scope);
    mcpRoutes(scope, context);
  };

  await app.register((scope) => routes(scope, options.project));
  await app.register((scope) => routes(scope, null), { prefix: '/p/:project' });

  return {
    app,
    engines: () => new Map(opened),
    project,
    cliCommands: () => cli.running(),
    mcpSessions: () => mcp.stats(),
    close: async () => {
      closing = true;
      await forwarding.close();
      await mcp.close();
      await app.close();
      const all = await Promise.allSettled([...served.values()]);
      for (const entry of all) if (entry.status === 'fulfilled') entry.value.events.detach();
      await Promise.all([...opened.values()].map((engine) => engine.close()));
    },
  };
}

/** Why a project could not be opened, as the error a request for it gets. */
function openFailure(project: string, error: unknown): unknown {
  if (error instanceof EngineConfigError && error.field === 'project') {
    return new ToolFailure('validation', 'NOT_FOUND', `No project "${project}" in this workspace`, { details: { project } });
  }
  if (error instanceof ProjectLockedError) {
    return new ToolFailure('transport', 'UNAVAILABLE', `Project "${project}" is held by another engine: ${error.message}`);
  }
  if (error instanceof EngineConfigError) {
    return new ToolFailure('validation', 'MISCONFIGURED', `Project "${project}" cannot be opened: ${error.message}`, {
      details: { field: error.field ?? null },
    });
  }
  return error;
}

function gatewayLimits(given: Partial<GatewayLimits> = {}): Readonly<GatewayLimits> {
  const limits = { ...DEFAULT_GATEWAY_LIMITS, ...given };
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isSafeInteger(value) || value < 1) throw new TypeError(`Gateway limit ${name} must be a positive integer (got ${String(value)})`);
  }
  if (limits.headers_timeout_ms > limits.request_timeout_ms) {
    throw new TypeError(
      `Gateway limit headers_timeout_ms (${limits.headers_timeout_ms}) must not exceed request_timeout_ms (${limits.request_timeout_ms}): the headers are part of the request`,
    );
  }
  return Object.freeze(limits);
}

/**
 * The answer to a connection Node gives up on before the gateway sees a request: too slow (408), headers
 * too large (431) or not HTTP (400), in the gateway's envelope, then the connection is closed.
 */
function clientErrorAnswer(limits: Readonly<GatewayLimits>): (error: ConnectionError, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, envelope] =
      error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [
            408,
            errorEnvelope(
              'TIMEOUT',
              `The request did not arrive in time: headers must arrive within ${limits.headers_timeout_ms} ms and the whole request within ${limits.request_timeout_ms} ms (headers_timeout_ms, request_timeout_ms)`,
              { stage: 'transport' },
            ),
          ]
        : error.code === 'HPE_HEADER_OVERFLOW'
          ? [431, errorEnvelope('INVALID_INPUT', 'The request headers are too large', { stage: 'transport' })]
          : [400, errorEnvelope('INVALID_INPUT', `The request is not valid HTTP (${error.code})`, { stage: 'transport' })];
    if (socket.writable && socket.bytesWritten === 0) {
      const body = JSON.stringify(envelope);
      socket.write(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy(error);
  };
}

const PROJECT_PARAM = { type: 'string', description: 'A project of the workspace (a folder name)' } as const;

function withProjectParam(schema: { params?: unknown } | undefined): void {
  const params = schema?.params as { type?: string; properties?: Record<string, unknown>; required?: string[] } | undefined;
  if (!schema || !params || params.type !== 'object') return;
  schema.params = {
    ...params,
    properties: { project: PROJECT_PARAM, ...params.properties },
    required: [...new Set(['project', ...(params.required ?? [])])],
  };
}

export type { RunEnvelope };
