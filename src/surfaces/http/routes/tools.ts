import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { TOOL_RESULT_TYPE } from '../../../daemon/wire.js';
import type { CallOptions, CallTarget } from '../../../dispatcher.js';
import { ToolFailure } from '../../../errors.js';
import { GrantSet, PermissionSyntaxError } from '../../../permissions.js';
import type { ToolDescription } from '../../../project-api.js';
import type { ToolInfo } from '../../../tool.js';
import { ENVELOPE_SCHEMA, errorEnvelope, runEnvelope, statusOf } from '../envelope.js';
import { ERROR_RESPONSES, send } from '../replies.js';
import { connectionSignal, header, overSocket, tcpCaller } from '../request.js';
import { servedOf } from './context.js';

/** The tools a project offers here, and their runs: by id, or by a capability one of them provides. */

const RUN_BODY_SCHEMA = {
  type: 'object',
  required: ['input'],
  additionalProperties: false,
  properties: {
    input: { type: 'object', description: 'The tool input; it is checked against the tool’s own schema' },
    trace_id: { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$', description: 'Correlates calls of one agent step (also X-Trace-Id)' },
    timeout_ms: { type: 'integer', minimum: 1, description: 'Shortens the tool’s timeout for this run' },
    grants: {
      type: 'array',
      maxItems: 1000,
      items: { type: 'string', maxLength: 4096 },
      description: 'Narrows this run’s grants (those of surfaces.http, else the engine’s); never widens them',
    },
    approval: {
      type: 'object',
      required: ['by'],
      additionalProperties: false,
      properties: { by: { type: 'string', minLength: 1, maxLength: 200 }, reason: { type: 'string', maxLength: 2000 } },
      description: 'A person approved this run already (as POST /v1/approvals would): an approvals rule it matches does not wait',
    },
  },
} as const;

interface RunBody {
  input: unknown;
  trace_id?: string;
  timeout_ms?: number;
  grants?: string[];
  approval?: { by: string; reason?: string };
}

/** The profile's grants narrowed by the ones the request asks for (the engine narrows by its own after). */
function runGrants(profile: readonly string[] | undefined, asked: string[] | undefined): readonly string[] | undefined {
  if (asked === undefined || profile === undefined) return asked ?? profile;
  try {
    return new GrantSet(profile).narrow(asked).texts();
  } catch (error) {
    if (error instanceof PermissionSyntaxError)
      throw new ToolFailure('validation', 'INVALID_INPUT', error.message, { details: { option: 'grants' } });
    throw error;
  }
}

/** Runs `target` as the request asks, and answers with the envelope, or the engine's result when asked for it. */
async function run(request: FastifyRequest, reply: FastifyReply, target: CallTarget): Promise<FastifyReply> {
  const body = request.body as RunBody;
  // A person's word that the run is approved is the local user's to give (`arium call --approve` through
  // the daemon, connect()): a client over TCP answers a waiting run with POST /v1/approvals/{run_id}.
  if (body.approval !== undefined && !overSocket(request)) {
    throw new ToolFailure(
      'validation',
      'INVALID_INPUT',
      'A run sent over TCP cannot carry "approval": answer the waiting run with POST /v1/approvals/{run_id}, which checks who may approve',
      { details: { field: 'approval' } },
    );
  }
  const traceId = body.trace_id ?? header(request.headers['x-trace-id']);
  const { engine, grants, visible } = servedOf(request);
  const callGrants = runGrants(grants, body.grants);
  const options: CallOptions = {
    // What a capability may resolve to, and what tools.search, tools.call and a code.run program may reach.
    offered: visible,
    caller: tcpCaller(request),
    // A client that goes away cancels its run: nothing it would have written lands.
    signal: connectionSignal(request.raw.socket),
  };
  if (traceId) options.trace_id = traceId;
  if (body.timeout_ms) options.timeout_ms = body.timeout_ms;
  if (callGrants) options.grants = callGrants;
  if (body.approval) options.approval = body.approval;
  const result = await engine.call(target, body.input, options);
  const status = result.ok ? 200 : statusOf(result.error.code);
  if (status === 429) reply.header('retry-after', '1');
  if (header(request.headers.accept) === TOOL_RESULT_TYPE) {
    // The route's response schema describes the envelope; this body is sent as it is.
    return reply.code(status).type(TOOL_RESULT_TYPE).serializer(JSON.stringify).send(result);
  }
  return send(reply, status, runEnvelope(typeof target === 'string' ? target : result.meta.tool, result));
}

/** A tool as the gateway shows it: what a caller needs, not the host's paths. */
function publicTool(tool: ToolInfo): ToolDescription {
  const { id, name, description, runner, schema, output_schema, permissions, examples, limits, provides } = tool;
  return { id, name, description, runner, schema, output_schema, permissions, examples, limits, provides };
}

export function toolRoutes(scope: FastifyInstance): void {
  scope.get(
    '/v1/tools',
    {
      schema: {
        summary: 'The tools this gateway offers, and the definition files that did not load',
        response: { 200: { type: 'object', properties: { tools: { type: 'array' }, problems: { type: 'array' } } } },
      },
    },
    async (request) => {
      // With search discovery, the discovery tools; the others are found with tools.search.
      const show = servedOf(request).listed;
      const { engine } = servedOf(request);
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
    '/v1/providers',
    {
      schema: {
        summary: "The project's providers (arium.json providers): each one's kind, state, tools, restarts and last error",
        response: { 200: { type: 'object', properties: { providers: { type: 'array' } } } },
      },
    },
    // What the profile's callers may use: a provider none of whose tools it offers is not shown, and no
    // provider's `details` (its command line, pid, the host paths its sandbox shows), as /v1/tools shows
    // no host paths; `arium doctor` and the library's engine.providers() have them.
    async (request) => {
      const { engine, visible } = servedOf(request);
      const offered = engine.tools().filter((t) => visible(t.id));
      return {
        providers: engine.providers().flatMap(({ details: _details, ...provider }) => {
          const mine = offered.filter((t) => t.id.startsWith(`${provider.name}.`)).length;
          // One with no tools yet (starting, or failed) is shown where the profile offers every tool.
          const everyTool = engine.config.surfaces?.http?.tools === undefined;
          return mine > 0 || (provider.tools === 0 && everyTool) ? [{ ...provider, tools: mine }] : [];
        }),
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
      const tool = servedOf(request).visible(id) ? servedOf(request).engine.tool(id) : undefined;
      if (!tool) return send(reply, 404, errorEnvelope('UNKNOWN_TOOL', `No tool "${id}" is offered here; GET /v1/tools lists them`, { toolId: id }));
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
      if (!servedOf(request).visible(id)) {
        const traceId = (request.body as RunBody).trace_id ?? header(request.headers['x-trace-id']);
        return send(reply, 404, errorEnvelope('UNKNOWN_TOOL', `No tool "${id}" is offered here; GET /v1/tools lists them`, { toolId: id, traceId }));
      }
      return run(request, reply, id);
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
      return run(request, reply, { capability: name });
    },
  );
}
