import type { FastifyInstance } from 'fastify';
import { header } from '../request.js';
import { servedOf } from './context.js';

/** A project's engine events as server-sent events (the project's EventLog), resumable by Last-Event-ID. */
export function eventRoutes(scope: FastifyInstance): void {
  scope.get(
    '/v1/events',
    { schema: { summary: 'Engine events as server-sent events, of the calls this gateway’s profile may see; Last-Event-ID resumes' } },
    async (request, reply) => {
      const lastId = Number(header(request.headers['last-event-id']) ?? (request.query as { last_event_id?: string }).last_event_id ?? Number.NaN);
      const { events, access } = servedOf(request);
      reply.hijack();
      events.stream(reply.raw, Number.isFinite(lastId) ? lastId : null, (event) => access.seesEvent(event));
    },
  );
}
