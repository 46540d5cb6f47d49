import type { FastifyRequest } from 'fastify';
import type { Engine } from '../../../engine.js';
import type { SurfaceAccess } from '../../access.js';
import type { EventLog } from '../event-log.js';
import type { GatewayOptions } from '../gateway.js';
import type { McpSessions } from '../mcp-http.js';

/** One project as the gateway serves it, opened on its first request. */
export interface Served {
  engine: Engine;
  events: EventLog;
  /** The project's `surfaces.http` profile, compiled once: which tools it offers, its grants. */
  visible: (id: string) => boolean;
  /** What GET /v1/tools lists: every offered tool, or with search discovery only the discovery tools. */
  listed: (id: string) => boolean;
  grants: readonly string[] | undefined;
  /** What the routes besides the runs may read, show and answer: the same grants. */
  access: SurfaceAccess;
}

/** What each family of routes is given: the gateway's options and the parts its routes share. */
export interface RouteContext {
  options: GatewayOptions;
  /** Whether the inspector is served (and each project keeps its change log). */
  inspector: boolean;
  mcp: McpSessions;
  /** Whether the gateway checks an API key (MCP sessions are then bounded per key). */
  keyed: boolean;
}

/** The project a request is for, set by the scope's preHandler before any route runs. */
export function servedOf(request: FastifyRequest): Served {
  return (request as FastifyRequest & { served: Served }).served;
}
