import { createHash, timingSafeEqual } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import swagger from '@fastify/swagger';
import Fastify, { type ConnectionError, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { createEngine, type Engine, EngineConfigError, type EngineOptions } from '../../engine.js';
import { ToolFailure } from '../../errors.js';
import type { EngineEvent, SecurityEvent } from '../../events.js';
import { DEFAULT_GATEWAY_LIMITS, type GatewayLimits } from '../../limits.js';
import { ProjectLockedError } from '../../store/lock.js';
import type { ToolInfo } from '../../tool.js';
import { asText } from '../../vfs/text-diff.js';
import { SurfaceAccess } from '../access.js';
import { ENVELOPE_SCHEMA, errorEnvelope, type RunEnvelope, runEnvelope, statusOf } from './envelope.js';
import { type HeaderRefusal, hostRules, refusal } from './host-guard.js';
import { builtInspector, isInspectorAsset, registerInspector } from './inspector.js';
import { jsonBreak } from './json-body.js';
import { type McpSessionStats, McpSessions } from './mcp-http.js';

/**
 * `arium serve`: the HTTP gateway (Fastify, with JSON-Schema validation of every request). One server
 * serves the workspace's projects: the default one at `/v1/…` and `/mcp`, any project at
 * `/p/<project>/v1/…` and `/p/<project>/mcp`, each engine opened on first use. Runs go through
 * `engine.call`, so results, errors, permissions and events are those of every other surface.
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
}

export interface Gateway {
  readonly app: FastifyInstance;
  /** Engines opened so far, by project. */
  engines(): Map<string, Engine>;
  /** The MCP sessions open at `/mcp` (every project's), their subscriptions, and the work of notifying them. */
  mcpSessions(): McpSessionStats;
  close(): Promise<void>;
}

interface Served {
  engine: Engine;
  events: EventLog;
  /** The project's `surfaces.http` profile, compiled once: which tools it offers, its grants. */
  visible: (id: string) => boolean;
  grants: readonly string[] | undefined;
  /** What the routes besides the runs may read, show and answer: the same grants. */
  access: SurfaceAccess;
}

const RUN_BODY_SCHEMA = {
  type: 'object',
  required: ['input'],
  additionalProperties: false,
  properties: {
    input: { type: 'object', description: 'The tool input; it is checked against the tool’s own schema' },
    trace_id: { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$', description: 'Correlates calls of one agent step (also X-Trace-Id)' },
    timeout_ms: { type: 'integer', minimum: 1, description: 'Shortens the tool’s timeout for this run' },
  },
} as const;

const APPROVAL_BODY_SCHEMA = {
  type: 'object',
  required: ['decision', 'by'],
  additionalProperties: false,
  properties: {
    decision: { enum: ['approve', 'deny'] },
    by: { type: 'string', minLength: 1, maxLength: 200, description: 'Who answers, for the events and the audit log' },
    reason: { type: 'string', maxLength: 2000, description: 'Why (shown in the denied call’s error)' },
  },
} as const;

/** `stat=true` in a query string: the gateway's validator does not coerce types, so the flag is a word. */
const STAT_QUERY = { type: 'string', enum: ['true', 'false'], description: 'true: file list and counts only, no patches' } as const;

/** One file of a diff by its exact path (`path` is a glob, which has no escapes for `*` and `?`). */
const FILE_QUERY = { type: 'string', minLength: 1, description: 'Only this file: its exact path' } as const;

const ERROR_RESPONSES = Object.fromEntries(
  [400, 401, 403, 404, 409, 413, 415, 429, 500, 503].map((status) => [status, { description: 'An error, in the run envelope', ...ENVELOPE_SCHEMA }]),
);

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
  const opened = new Map<string, Engine>();
  const mcp = new McpSessions(limits);
  const inspector = options.inspector !== false;
  let closing = false;

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
        opened.set(project, engine);
        const profile = engine.config.surfaces?.http;
        const access = new SurfaceAccess(engine, profile, 'http');
        return { engine, events: new EventLog(engine, options.eventBuffer ?? 1000), visible: access.offered, grants: profile?.grants, access };
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
    if (text.trim() === '') {
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
  app.addHook('onRequest', async (request, reply) => {
    const refused = refusal(rules, request.headers.host, header(request.headers.origin) ?? undefined);
    if (!refused) return;
    reportRefused(request, refused);
    return reply
      .code(403)
      .send(errorEnvelope('DENIED', refused.message, { stage: 'permission', details: { header: refused.header, value: refused.value } }));
  });

  const expected = options.apiKey ? digest(options.apiKey) : null;
  app.addHook('onRequest', async (request, reply) => {
    if (!expected || request.url === '/healthz' || (inspector && isInspectorAsset(request.method, request.url))) return;
    const given = bearer(request.headers.authorization) ?? header(request.headers['x-api-key']);
    // Compared as digests of equal length, in constant time; the key itself is never logged or echoed.
    if (given === null || !timingSafeEqual(digest(given), expected)) {
      reply.header('www-authenticate', 'Bearer');
      return reply
        .code(401)
        .send(errorEnvelope('DENIED', 'This gateway needs an API key: Authorization: Bearer <key> or X-API-Key', { stage: 'permission' }));
    }
  });

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

  app.get('/healthz', { schema: { hide: true } }, async () => ({ ok: true, projects: [...opened.keys()] }));

  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  if (inspector) await registerInspector(app, options.inspectorDir ?? builtInspector());

  const routes = async (scope: FastifyInstance, fixed: string | null) => {
    // Under /p/:project a route that declares its own path parameters must declare `project` too, or
    // the OpenAPI document lists a path template with a parameter it does not define (invalid 3.1).
    if (fixed === null) scope.addHook('onRoute', (route) => withProjectParam(route.schema));
    // Which engine a request is for: the default project, or the one named in the path.
    scope.addHook('preHandler', async (request) => {
      const project = fixed ?? (request.params as { project?: string }).project ?? '';
      try {
        (request as FastifyRequest & { served: Served }).served = await open(project);
      } catch (error) {
        if (error instanceof EngineConfigError && error.field === 'project') {
          throw new ToolFailure('validation', 'NOT_FOUND', `No project "${project}" in this workspace`, { details: { project } });
        }
        if (error instanceof ProjectLockedError) {
          throw new ToolFailure('transport', 'UNAVAILABLE', `Project "${project}" is held by another engine: ${error.message}`);
        }
        if (error instanceof EngineConfigError) {
          throw new ToolFailure('validation', 'MISCONFIGURED', `Project "${project}" cannot be opened: ${error.message}`, {
            details: { field: error.field ?? null },
          });
        }
        throw error;
      }
    });
    const engineOf = (request: FastifyRequest) => (request as FastifyRequest & { served: Served }).served;
    const visible = (request: FastifyRequest) => engineOf(request).visible;
    /**
     * Runs a builtin for a route that changes state (a snapshot, a restore), as a call from this
     * surface: offered by its profile, with its grants, through approvals, events and the audit log.
     */
    const runBuiltin = async (request: FastifyRequest, reply: FastifyReply, id: string, input: unknown, created = false) => {
      const { engine, grants, access } = engineOf(request);
      const traceId = header(request.headers['x-trace-id']);
      if (!access.offered(id)) {
        return send(
          reply,
          403,
          errorEnvelope('DENIED', `${request.method} ${request.routeOptions.url} runs ${id}, which surfaces.http.tools does not offer`, {
            stage: 'permission',
            toolId: id,
            traceId,
          }),
        );
      }
      const result = await engine.call(id, input, {
        caller: `http:${request.ip}`,
        signal: connectionSignal(request.raw.socket),
        ...(traceId ? { trace_id: traceId } : {}),
        ...(grants ? { grants } : {}),
      });
      if (result.ok) return send(reply, created ? 201 : 200, result.data);
      const status = failureStatus(result.error);
      if (status === 429) reply.header('retry-after', '1');
      return send(reply, status, runEnvelope(id, result));
    };

    scope.get(
      '/v1/tools',
      {
        schema: {
          summary: 'The tools this gateway offers, and the definition files that did not load',
          response: { 200: { type: 'object', properties: { tools: { type: 'array' }, problems: { type: 'array' } } } },
        },
      },
      async (request) => {
        const show = visible(request);
        const { engine } = engineOf(request);
        return {
          tools: engine
            .tools()
            .filter((t) => show(t.id))
            .map(publicTool),
          // A file that did not load is shown with its problem whatever the profile: it offers no tool.
          problems: engine.problems(),
        };
      },
    );

    scope.get(
      '/v1/tools/:id',
      {
        schema: {
          summary: 'One tool',
          params: { type: 'object', properties: { id: { type: 'string' } } },
          response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
        },
      },
      async (request, reply) => {
        const { id } = request.params as { id: string };
        const tool = visible(request)(id) ? engineOf(request).engine.tool(id) : undefined;
        if (!tool)
          return send(reply, 404, errorEnvelope('UNKNOWN_TOOL', `No tool "${id}" is offered here; GET /v1/tools lists them`, { toolId: id }));
        return publicTool(tool);
      },
    );

    scope.post(
      '/v1/tools/:id(^[^:/]+)::run',
      {
        schema: {
          summary: 'Run a tool',
          params: { type: 'object', properties: { id: { type: 'string' } } },
          body: RUN_BODY_SCHEMA,
          headers: { type: 'object', properties: { 'x-trace-id': { type: 'string' } } },
          response: { 200: { description: 'The run, succeeded or failed', ...ENVELOPE_SCHEMA }, ...ERROR_RESPONSES },
        },
      },
      async (request, reply) => {
        const { id } = request.params as { id: string };
        const body = request.body as { input: unknown; trace_id?: string; timeout_ms?: number };
        const traceId = body.trace_id ?? header(request.headers['x-trace-id']) ?? undefined;
        const { engine } = engineOf(request);
        if (!visible(request)(id)) {
          return send(
            reply,
            404,
            errorEnvelope('UNKNOWN_TOOL', `No tool "${id}" is offered here; GET /v1/tools lists them`, { toolId: id, traceId: traceId ?? null }),
          );
        }
        const { grants } = engineOf(request);
        const result = await engine.call(id, body.input, {
          caller: `http:${request.ip}`,
          // A client that goes away cancels its run: nothing it would have written lands.
          signal: connectionSignal(request.raw.socket),
          ...(traceId ? { trace_id: traceId } : {}),
          ...(body.timeout_ms ? { timeout_ms: body.timeout_ms } : {}),
          ...(grants ? { grants } : {}),
        });
        const envelope = runEnvelope(id, result);
        const status = result.ok ? 200 : statusOf(result.error.code);
        if (status === 429) reply.header('retry-after', '1');
        return send(reply, status, envelope);
      },
    );

    scope.post(
      '/v1/capabilities/:name(^[^:/]+)::run',
      {
        schema: {
          summary: 'Run the one tool offered here that provides a capability (409 AMBIGUOUS when several do)',
          params: { type: 'object', properties: { name: { type: 'string' } } },
          body: RUN_BODY_SCHEMA,
          headers: { type: 'object', properties: { 'x-trace-id': { type: 'string' } } },
          response: { 200: { description: 'The run, succeeded or failed', ...ENVELOPE_SCHEMA }, ...ERROR_RESPONSES },
        },
      },
      async (request, reply) => {
        const { name } = request.params as { name: string };
        const body = request.body as { input: unknown; trace_id?: string; timeout_ms?: number };
        const traceId = body.trace_id ?? header(request.headers['x-trace-id']) ?? undefined;
        const { engine, grants } = engineOf(request);
        const result = await engine.call({ capability: name }, body.input, {
          caller: `http:${request.ip}`,
          offered: visible(request),
          signal: connectionSignal(request.raw.socket),
          ...(traceId ? { trace_id: traceId } : {}),
          ...(body.timeout_ms ? { timeout_ms: body.timeout_ms } : {}),
          ...(grants ? { grants } : {}),
        });
        const envelope = runEnvelope(result.meta.tool, result);
        const status = result.ok ? 200 : statusOf(result.error.code);
        if (status === 429) reply.header('retry-after', '1');
        return send(reply, status, envelope);
      },
    );

    scope.get(
      '/v1/snapshots',
      {
        schema: {
          summary: 'The snapshot log, oldest first (needs vfs.read)',
          response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
        },
      },
      async (request) => ({ snapshots: engineOf(request).access.snapshots() }),
    );

    scope.post(
      '/v1/snapshots',
      {
        schema: {
          summary: 'Save the live VFS as a snapshot: a call of vfs.snapshot (needs vfs.read on /, goes through approvals)',
          body: {
            type: ['object', 'null'],
            additionalProperties: false,
            properties: {
              label: { type: 'string', minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' },
              message: { type: 'string', maxLength: 2000 },
            },
          },
          headers: { type: 'object', properties: { 'x-trace-id': { type: 'string' } } },
          response: { 201: { description: 'The snapshot', type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
        },
      },
      async (request, reply) => runBuiltin(request, reply, 'vfs.snapshot', request.body ?? {}, true),
    );

    scope.get(
      '/v1/diff',
      {
        schema: {
          summary: 'Compare snapshots or live (default: newest snapshot → live); files without vfs.read are left out',
          querystring: {
            type: 'object',
            additionalProperties: false,
            properties: { from: { type: 'string' }, to: { type: 'string' }, path: { type: 'string' }, file: FILE_QUERY, stat: STAT_QUERY },
          },
        },
      },
      async (request) => {
        const q = request.query as { from?: string; to?: string; path?: string; file?: string; stat?: string };
        const { engine, access } = engineOf(request);
        return engine.diff(q.from, q.to, {
          visible: (path) => access.mayRead(path),
          ...(q.path ? { path: q.path } : {}),
          ...(q.file ? { file: q.file } : {}),
          ...(q.stat === 'true' ? { stat_only: true } : {}),
        });
      },
    );

    scope.post(
      '/v1/restore',
      {
        schema: {
          summary: 'Bring the live VFS back to a snapshot: a call of vfs.restore (needs vfs.read and vfs.write on /, goes through approvals)',
          body: {
            type: 'object',
            required: ['ref'],
            additionalProperties: false,
            properties: { ref: { type: 'string', minLength: 1, maxLength: 200 } },
          },
          headers: { type: 'object', properties: { 'x-trace-id': { type: 'string' } } },
          response: {
            200: { description: 'What was restored, and the snapshot that undoes it', type: 'object', additionalProperties: true },
            ...ERROR_RESPONSES,
          },
        },
      },
      async (request, reply) => runBuiltin(request, reply, 'vfs.restore', { snapshot: (request.body as { ref: string }).ref }),
    );

    scope.get('/v1/project', { schema: { summary: 'The project served here, and the projects of the workspace' } }, async (request) => {
      const { engine } = engineOf(request);
      return {
        project: engine.project,
        projects: workspaceProjects(options.workspace),
        read_only: engine.readOnly !== null,
        persist: engine.config.persist !== false && options.engineOptions?.persist !== false,
        change_log: inspector || options.engineOptions?.changeLog !== undefined,
      };
    });

    const TREE_QUERY = {
      type: 'object',
      required: ['path'],
      additionalProperties: false,
      properties: {
        path: { type: 'string', minLength: 1, description: 'An absolute VFS path' },
        at: { type: 'string', minLength: 1, description: '`live` (default) or a snapshot: id, prefix, label, `latest`' },
      },
    } as const;

    scope.get(
      '/v1/fs/list',
      {
        schema: {
          summary: 'The entries of one folder of the live tree or of a snapshot (folders first, then by name); needs vfs.read on it',
          querystring: TREE_QUERY,
          response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
        },
      },
      async (request) => {
        const q = request.query as { path: string; at?: string };
        const at = q.at ?? 'live';
        const { engine, access } = engineOf(request);
        const { entries } = access.tree(at).list(q.path);
        const sorted = [...entries].sort((a, b) =>
          a.type === b.type ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a.type === 'directory' ? -1 : 1,
        );
        return { at, path: engine.scrub(q.path), entries: sorted };
      },
    );

    scope.get(
      '/v1/fs/read',
      {
        schema: {
          summary: 'One file of the live tree or of a snapshot: text up to 1 MiB, or its size and hash; needs vfs.read on it',
          querystring: TREE_QUERY,
          response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
        },
      },
      async (request) => {
        const q = request.query as { path: string; at?: string };
        const at = q.at ?? 'live';
        const { engine, access } = engineOf(request);
        const bytes = access.tree(at).read(q.path);
        const cut = bytes.length > FILE_TEXT_BYTES;
        const head = cut ? bytes.subarray(0, FILE_TEXT_BYTES) : bytes;
        // A cut may split a character: the text is what decodes, the cut noted.
        const text = asText(head) ?? (cut ? asText(head.subarray(0, lastCharBoundary(head))) : null);
        return {
          at,
          path: engine.scrub(q.path),
          size: bytes.length,
          sha256: createHash('sha256').update(bytes).digest('hex'),
          binary: text === null,
          // Scrubbed as the beginning of a longer text: a secret the cut goes through is left out whole.
          text: text === null ? null : engine.scrub(text, { cut }),
          truncated: text !== null && cut,
        };
      },
    );

    scope.get(
      '/v1/runs/:run_id/diff',
      {
        schema: {
          summary: 'What one committed call changed in the VFS, while the change log still holds it; files without vfs.read are left out',
          params: { type: 'object', properties: { run_id: { type: 'string', maxLength: 200 } } },
          querystring: {
            type: 'object',
            additionalProperties: false,
            properties: { path: { type: 'string' }, file: FILE_QUERY, stat: STAT_QUERY },
          },
        },
      },
      async (request, reply) => {
        const { run_id: runId } = request.params as { run_id: string };
        const q = request.query as { path?: string; file?: string; stat?: string };
        const { engine, access } = engineOf(request);
        const found = engine.changes(runId, {
          visible: (path) => access.mayRead(path),
          ...(q.path ? { path: q.path } : {}),
          ...(q.file ? { file: q.file } : {}),
          ...(q.stat === 'true' ? { stat_only: true } : {}),
        });
        if (found) return found;
        return send(
          reply,
          404,
          errorEnvelope(
            'NOT_FOUND',
            `No changes of run ${runId} are kept: it changed no file, failed, is older than what the change log holds, or this gateway keeps no change log`,
            { details: { run_id: runId } },
          ),
        );
      },
    );

    scope.get(
      '/v1/approvals',
      { schema: { summary: 'Calls waiting for a person’s approval (oldest first) that this gateway’s profile may see' } },
      async (request) => {
        const { engine, access } = engineOf(request);
        return { approvals: engine.approvals().filter((p) => access.seesCall(p.tool)) };
      },
    );

    scope.post(
      '/v1/approvals/:run_id',
      {
        schema: {
          summary: 'Approve or deny a waiting call',
          params: { type: 'object', properties: { run_id: { type: 'string', maxLength: 200 } } },
          body: APPROVAL_BODY_SCHEMA,
          response: { 200: { type: 'object', additionalProperties: true }, ...ERROR_RESPONSES },
        },
      },
      async (request) => {
        const { run_id: runId } = request.params as { run_id: string };
        const body = request.body as { decision: 'approve' | 'deny'; by: string; reason?: string };
        const { engine, access } = engineOf(request);
        const waiting = engine.approvals().find((p) => p.run_id === runId);
        // An approval this gateway may not see is as unknown here as one that does not exist.
        if (waiting && !access.seesCall(waiting.tool)) {
          throw new ToolFailure('validation', 'NOT_FOUND', `No approval is pending for run ${runId}; GET /v1/approvals lists them`, {
            details: { run_id: runId },
          });
        }
        const answer = { by: body.by, ...(body.reason !== undefined ? { reason: body.reason } : {}) };
        return body.decision === 'approve' ? engine.approve(runId, answer) : engine.deny(runId, answer);
      },
    );

    scope.get(
      '/v1/events',
      { schema: { summary: 'Engine events as server-sent events, of the calls this gateway’s profile may see; Last-Event-ID resumes' } },
      async (request, reply) => {
        const lastId = Number(header(request.headers['last-event-id']) ?? (request.query as { last_event_id?: string }).last_event_id ?? Number.NaN);
        const { events, access } = engineOf(request);
        reply.hijack();
        events.stream(reply.raw, Number.isFinite(lastId) ? lastId : null, (event) => access.seesEvent(event));
      },
    );

    // MCP over Streamable HTTP: the SDK's transport, one per session.
    scope.all('/mcp', { schema: { hide: true } }, async (request, reply) => {
      const { engine } = engineOf(request);
      reply.hijack();
      await mcp.handle(engine, sessionKey(request, expected !== null), request.raw, reply.raw, request.body);
    });
  };

  await app.register((scope) => routes(scope, options.project));
  await app.register((scope) => routes(scope, null), { prefix: '/p/:project' });

  return {
    app,
    engines: () => new Map(opened),
    mcpSessions: () => mcp.stats(),
    close: async () => {
      closing = true;
      await mcp.close();
      await app.close();
      const all = await Promise.allSettled([...served.values()]);
      for (const entry of all) if (entry.status === 'fulfilled') entry.value.events.detach();
      await Promise.all([...opened.values()].map((engine) => engine.close()));
    },
  };
}

/**
 * Who holds MCP sessions, for their per-key bound: the API key given (its digest) on a gateway that checks
 * keys, else the client's address (a key nobody checks would let a client pick a new one per session).
 */
function sessionKey(request: FastifyRequest, keyed: boolean): string {
  const given = keyed ? (bearer(request.headers.authorization) ?? header(request.headers['x-api-key'])) : null;
  return given === null ? `address ${request.ip}` : `key ${digest(given).toString('hex')}`;
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

function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/**
 * One abort signal per connection, aborted when it closes: every run still going on a connection that
 * is gone is cancelled. (An AbortController per request cost 3.5% of the gateway's time under load;
 * a keep-alive connection carries its requests one after another, so they can share one.)
 */
const CONNECTION_SIGNALS = new WeakMap<Socket, AbortSignal>();
function connectionSignal(socket: Socket): AbortSignal {
  let signal = CONNECTION_SIGNALS.get(socket);
  if (!signal) {
    const controller = new AbortController();
    socket.once('close', () => controller.abort());
    signal = controller.signal;
    CONNECTION_SIGNALS.set(socket, signal);
  }
  return signal;
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

/** Sends `body` with `status` (the route's typed reply knows only the statuses its schema lists). */
function send(reply: FastifyReply, status: number, body: unknown): FastifyReply {
  return reply.code(status).send(body);
}

/** The status of a route's failure (a run's failure is a 200 answer; a route's is not). */
function failureStatus(failure: Pick<ToolFailure, 'code'>): number {
  if (failure.code === 'NOT_FOUND') return 404;
  if (failure.code === 'UNAVAILABLE') return 503;
  if (failure.code === 'MISCONFIGURED' || failure.code === 'INTERNAL') return 500;
  const status = statusOf(failure.code);
  return status === 200 ? 400 : status;
}

/** A tool as the gateway shows it: what a caller needs, not the host's paths. */
function publicTool(tool: ToolInfo): Record<string, unknown> {
  const { id, name, description, runner, schema, output_schema, permissions, examples, limits, provides } = tool;
  return { id, name, description, runner, schema, output_schema, permissions, examples, limits, provides };
}

/** How much of a file `/v1/fs/read` returns as text. */
const FILE_TEXT_BYTES = 1024 * 1024;

/** Where the last whole UTF-8 character of `bytes` ends (a cut file ends inside one at most). */
function lastCharBoundary(bytes: Buffer): number {
  let end = bytes.length;
  // Step back over continuation bytes (10xxxxxx) to the lead byte of the cut character, and drop it.
  while (end > 0 && ((bytes[end - 1] as number) & 0xc0) === 0x80) end--;
  return end > 0 && (bytes[end - 1] as number) >= 0xc0 ? end - 1 : bytes.length;
}

/** The project folders of a workspace (those with a tools folder or an arium.json), by name. */
function workspaceProjects(workspace: string): string[] {
  let names: string[];
  try {
    names = readdirSync(workspace);
  } catch {
    return [];
  }
  const isProject = (name: string) => {
    for (const marker of ['tools', 'arium.json']) {
      try {
        statSync(join(workspace, name, marker));
        return true;
      } catch {}
    }
    return false;
  };
  return names.filter((name) => !name.startsWith('.') && isProject(name)).sort();
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function bearer(value: string | undefined): string | null {
  const match = value ? /^Bearer\s+(.+)$/i.exec(value) : null;
  return match ? (match[1] as string) : null;
}

function header(value: string | string[] | undefined): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/**
 * The recent events of one project, numbered, for server-sent event streams: a client that
 * reconnects with `Last-Event-ID` gets what it missed while it is still in the buffer, and an event
 * `gap` saying how many it lost when it is not.
 */
class EventLog {
  readonly #buffer: Array<{ id: number; event: EngineEvent }> = [];
  readonly #streams = new Set<(entry: { id: number; event: EngineEvent }) => void>();
  readonly #listener: (event: EngineEvent) => void;
  #next = 1;

  constructor(
    readonly engine: Engine,
    readonly size: number,
  ) {
    this.#listener = (event) => {
      const entry = { id: this.#next++, event };
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
    const send = (entry: { id: number; event: EngineEvent }) => {
      if (!shown(entry.event)) return;
      const ok = res.write(`id: ${entry.id}\nevent: ${entry.event.type}\ndata: ${JSON.stringify(entry.event)}\n\n`);
      // A reader that does not keep up is let go rather than buffered without end: it reconnects with Last-Event-ID.
      if (!ok && res.writableLength > 8 * 1024 * 1024) res.end();
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

export type { RunEnvelope };
