import type { FastifyInstance } from 'fastify';
import type { ToolInfo } from '../../../tool.js';
import { ENVELOPE_SCHEMA, errorEnvelope, runEnvelope, statusOf } from '../envelope.js';
import { ERROR_RESPONSES, send } from '../replies.js';
import { clientName, connectionSignal, header } from '../request.js';
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
  },
} as const;

/** A tool as the gateway shows it: what a caller needs, not the host's paths. */
function publicTool(tool: ToolInfo): Record<string, unknown> {
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
      const show = servedOf(request).visible;
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
      const body = request.body as { input: unknown; trace_id?: string; timeout_ms?: number };
      const traceId = body.trace_id ?? header(request.headers['x-trace-id']) ?? undefined;
      const { engine } = servedOf(request);
      if (!servedOf(request).visible(id)) {
        return send(
          reply,
          404,
          errorEnvelope('UNKNOWN_TOOL', `No tool "${id}" is offered here; GET /v1/tools lists them`, { toolId: id, traceId: traceId ?? null }),
        );
      }
      const { grants } = servedOf(request);
      const result = await engine.call(id, body.input, {
        caller: clientName(request, `http:${request.ip}`),
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
      const { engine, grants } = servedOf(request);
      const result = await engine.call({ capability: name }, body.input, {
        caller: clientName(request, `http:${request.ip}`),
        offered: servedOf(request).visible,
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
}
