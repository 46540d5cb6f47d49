import type { ErrorInfo } from './errors.js';

/** What every result carries besides its payload. */
export interface ResultMeta {
  tool: string;
  run_id: string;
  trace_id: string;
  duration_ms: number;
  /** Which runner executed the call, once it got that far. */
  runner?: string;
  /** The capability the caller asked for, when it asked for one instead of an id (`tool` is the id chosen). */
  capability?: string;
  /** The remote worker that ran the call (remote runners only). */
  worker?: { id: string; host: string };
  /** Lines the tool logged (JS and Python runners), bounded. */
  logs?: LogLine[];
  /** Extra facts a runner reports, e.g. the isolation in force. */
  [key: string]: unknown;
}

export interface LogLine {
  level: 'log' | 'info' | 'warn' | 'error' | 'stdout' | 'stderr';
  message: string;
}

export interface OkResult<T = unknown> {
  ok: true;
  data: T;
  meta: ResultMeta;
}

export interface ErrResult {
  ok: false;
  error: ErrorInfo;
  meta: ResultMeta;
}

export type ToolResult<T = unknown> = OkResult<T> | ErrResult;

/** How far a running call is, as its tool tells it: `progress` grows; `total` when the tool knows it. */
export interface Progress {
  progress: number;
  total?: number;
  message?: string;
}
