import type { FastifyInstance } from 'fastify';
import { sessionKey } from '../request.js';
import { type RouteContext, servedOf } from './context.js';

/** A project's MCP server, mounted at `/mcp`. */
export function mcpRoutes(scope: FastifyInstance, ctx: RouteContext): void {
  // MCP over Streamable HTTP: the SDK's transport, one per session.
  scope.all('/mcp', { schema: { hide: true } }, async (request, reply) => {
    const { engine } = servedOf(request);
    reply.hijack();
    await ctx.mcp.handle(engine, () => sessionKey(request, ctx.keyed), request.raw, reply.raw, request.body);
  });
}
