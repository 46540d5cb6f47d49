import type { ErrorCode, ErrorInfo } from '../../errors.js';
import { isRetryable } from '../../errors.js';
import type { ToolResult } from '../../result.js';

/**
 * The one body shape of the gateway's answers about a run, and of every error it gives (seed 003 §6):
 * `ok`, `tool_id`, `tool_run_id`, `output` or `error`, `meta.trace_id`, `meta.duration_ms`.
 */
export interface RunEnvelope {
  ok: boolean;
  tool_id: string | null;
  tool_run_id: string | null;
  output?: unknown;
  error?: WireError;
  meta: { trace_id: string | null; duration_ms: number };
}

export interface WireError {
  code: ErrorCode;
  stage: ErrorInfo['stage'];
  message: string;
  retryable: boolean;
  details?: Record<string, unknown>;
}

/** The HTTP status of a failed run: problems of the request are 4xx; a tool that ran and failed is 200. */
export function statusOf(code: ErrorCode): number {
  switch (code) {
    case 'UNKNOWN_TOOL':
      return 404;
    case 'INVALID_INPUT':
      return 400;
    case 'INPUT_TOO_LARGE':
      return 413;
    case 'DENIED':
    case 'APPROVAL_DENIED':
    case 'APPROVAL_TIMEOUT':
      return 403;
    case 'AMBIGUOUS':
    case 'ALREADY_RESOLVED':
      return 409;
    case 'BUSY':
      return 429;
    default:
      return 200;
  }
}

export function runEnvelope(toolId: string, result: ToolResult): RunEnvelope {
  const meta = { trace_id: result.meta.trace_id, duration_ms: result.meta.duration_ms };
  if (result.ok) return { ok: true, tool_id: toolId, tool_run_id: result.meta.run_id, output: result.data, meta };
  return { ok: false, tool_id: toolId, tool_run_id: result.meta.run_id, error: wireError(result.error), meta };
}

export function wireError(error: Pick<ErrorInfo, 'code' | 'stage' | 'message' | 'retryable' | 'details'>): WireError {
  const wire: WireError = { code: error.code, stage: error.stage, message: error.message, retryable: error.retryable };
  if (error.details !== undefined) wire.details = error.details;
  return wire;
}

/** An error the gateway itself gives (no run): the same shape, with null ids. */
export function errorEnvelope(
  code: ErrorCode,
  message: string,
  options: { toolId?: string | null; stage?: ErrorInfo['stage']; details?: Record<string, unknown>; traceId?: string | null } = {},
): RunEnvelope {
  const error: WireError = { code, stage: options.stage ?? 'validation', message, retryable: isRetryable(code) };
  if (options.details !== undefined) error.details = options.details;
  return { ok: false, tool_id: options.toolId ?? null, tool_run_id: null, error, meta: { trace_id: options.traceId ?? null, duration_ms: 0 } };
}

/** JSON Schemas of the bodies, for route validation and the OpenAPI document. */
export const WIRE_ERROR_SCHEMA = {
  type: 'object',
  required: ['code', 'stage', 'message', 'retryable'],
  properties: {
    code: { type: 'string' },
    stage: { type: 'string', enum: ['validation', 'permission', 'execution', 'transport'] },
    message: { type: 'string' },
    retryable: { type: 'boolean' },
    details: { type: 'object', additionalProperties: true },
  },
} as const;

export const ENVELOPE_SCHEMA = {
  type: 'object',
  required: ['ok', 'tool_id', 'tool_run_id', 'meta'],
  properties: {
    ok: { type: 'boolean' },
    tool_id: { type: ['string', 'null'] },
    tool_run_id: { type: ['string', 'null'] },
    output: {},
    error: WIRE_ERROR_SCHEMA,
    meta: {
      type: 'object',
      required: ['trace_id', 'duration_ms'],
      properties: { trace_id: { type: ['string', 'null'] }, duration_ms: { type: 'number' } },
    },
  },
} as const;
