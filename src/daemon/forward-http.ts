// The gateway's side of forwarding (forward.ts): a request for a project another gateway holds is sent
// there as the caller this gateway authenticated; a request forwarded here runs through this gateway's
// own routes (app.inject), so the holder checks it as it checks its own: its profile, grants, schemas.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ToolFailure } from '../errors.js';
import { FORWARDED_HEADERS } from '../store/jetstream/forward-wire.js';
import { clientName, forwardedHeaders } from '../surfaces/http/request.js';
import type { ForwardRequest, GatewayForwarding, LocalHandler } from './forward.js';

/** Routes that stream (an SSE log, MCP sessions): a request-reply cannot carry them. */
const STREAMED = /^\/(mcp|v1\/events)(\?|$)/;

/**
 * Answers `request` from the gateway that holds `project`, when the project forwards and another gateway
 * holds it; returns false when this gateway should open the project itself (it does not forward, or
 * nobody holds it). `locked`: this gateway just failed to take the project, so it must not try again.
 */
export async function answerForwarded(
  forwarding: GatewayForwarding,
  project: string,
  path: string,
  request: FastifyRequest,
  reply: FastifyReply,
  locked: boolean,
): Promise<boolean> {
  const link = await forwarding.link(project);
  if (!link) return false;
  if (STREAMED.test(path)) {
    if (!locked && (await link.holder()) === null) return false;
    throw new ToolFailure(
      'transport',
      'UNAVAILABLE',
      `Project "${project}" is held by another gateway, and ${path.split('?')[0]} streams, which is not forwarded between gateways: connect to the gateway that holds it (or pin this client's connection there)`,
      { details: { reason: 'not_forwarded' } },
    );
  }
  const headers: Record<string, string> = {};
  for (const name of FORWARDED_HEADERS) {
    const value = request.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  const forwarded: ForwardRequest = {
    method: request.method,
    path,
    headers,
    body: request.body === undefined ? null : Buffer.from(JSON.stringify(request.body)),
    caller: clientName(request, `http:${request.ip}`),
    ip: request.ip ?? '',
  };
  const answer = await link.forward(forwarded);
  if (answer) {
    await reply.code(answer.status).headers(answer.headers).send(answer.body);
    return true;
  }
  const holder = await link.holder();
  if (holder === null && !locked) return false;
  reply.header('retry-after', '1');
  throw new ToolFailure(
    'transport',
    'UNAVAILABLE',
    holder === null
      ? `No gateway holds project "${project}" at this moment (another one is taking it over); try again`
      : `No gateway answers for project "${project}": the engine holding it (pid ${holder.pid} on ${holder.host}) does not answer forwarded requests. Either it stopped, and a gateway takes the project over once its lease runs out (store.lease_ms): try again then; or it is not a gateway with store.forward (a library engine, \`arium call\`), which never answers them`,
    { details: { reason: 'no_holder' } },
  );
}

/** Runs a forwarded request through `app`'s routes as its caller, with this gateway's API key (the forwarding gateway checked the caller's). */
export function localHandler(app: FastifyInstance, apiKey: string | undefined): LocalHandler {
  return async (project, request) => {
    const pathname = request.path.split('?')[0] as string;
    if (!pathname.startsWith('/v1/') || pathname.split('/').some((segment) => segment === '.' || segment === '..')) {
      throw new Error(
        `a forwarded request's path must be a route under /v1/ without . or .. segments (got ${JSON.stringify(pathname.slice(0, 200))})`,
      );
    }
    const headers: Record<string, string> = {};
    for (const name of FORWARDED_HEADERS) {
      const value = request.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    const response = await app.inject({
      method: request.method as 'GET',
      url: `/p/${encodeURIComponent(project)}${request.path}`,
      headers: { ...headers, ...forwardedHeaders(request.caller), ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
      ...(request.body ? { payload: request.body } : {}),
      ...(request.ip ? { remoteAddress: request.ip } : {}),
    });
    const answer: Record<string, string> = {};
    for (const name of ['content-type', 'retry-after']) {
      const value = response.headers[name];
      if (typeof value === 'string') answer[name] = value;
    }
    return { status: response.statusCode, headers: answer, body: response.rawPayload };
  };
}
