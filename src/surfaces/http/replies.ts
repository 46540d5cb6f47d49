import type { FastifyReply } from 'fastify';
import type { ToolFailure } from '../../errors.js';
import { ENVELOPE_SCHEMA, statusOf } from './envelope.js';

/** The error responses a route's OpenAPI schema lists, each in the run envelope. */
export const ERROR_RESPONSES = Object.fromEntries(
  [400, 401, 403, 404, 409, 413, 415, 429, 500, 503].map((status) => [status, { description: 'An error, in the run envelope', ...ENVELOPE_SCHEMA }]),
);

/** Sends `body` with `status` (the route's typed reply knows only the statuses its schema lists). */
export function send(reply: FastifyReply, status: number, body: unknown): FastifyReply {
  return reply.code(status).send(body);
}

/** The status of a route's failure (a run's failure is a 200 answer; a route's is not). */
export function failureStatus(failure: Pick<ToolFailure, 'code'>): number {
  if (failure.code === 'NOT_FOUND') return 404;
  if (failure.code === 'UNAVAILABLE') return 503;
  if (failure.code === 'MISCONFIGURED' || failure.code === 'INTERNAL') return 500;
  const status = statusOf(failure.code);
  return status === 200 ? 400 : status;
}
