/**
 * The one error type that crosses layers. Inner layers throw `ToolFailure`; the dispatcher alone turns
 * it into the plain-JSON `ErrorInfo` inside a result (see result.ts). Anything else that is thrown is an
 * engine bug or a hostile value and becomes `INTERNAL` / `TOOL_ERROR` there.
 */

/** Where a call failed. */
export type Stage = 'validation' | 'permission' | 'execution' | 'transport';

/**
 * Stable error codes. Documented in the README's error-code table; a test pins this list to that table.
 */
export const ERROR_CODES = [
  'UNKNOWN_TOOL',
  'AMBIGUOUS',
  'INVALID_INPUT',
  'INPUT_TOO_LARGE',
  'DENIED',
  'APPROVAL_DENIED',
  'APPROVAL_TIMEOUT',
  'ALREADY_RESOLVED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'NOT_A_DIRECTORY',
  'IS_A_DIRECTORY',
  'NOT_EMPTY',
  'INVALID_PATH',
  'NOT_TEXT',
  'QUOTA_EXCEEDED',
  'TIMEOUT',
  'MEMORY_LIMIT',
  'OUTPUT_LIMIT',
  'INVALID_OUTPUT',
  'TOOL_ERROR',
  'BUSY',
  'CONFLICT',
  'CANCELLED',
  'UNAVAILABLE',
  'MISCONFIGURED',
  'CORRUPT_STATE',
  'INTERNAL',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** A caller may retry these unchanged and expect a different outcome. */
const RETRYABLE: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['BUSY', 'CONFLICT', 'TIMEOUT', 'UNAVAILABLE']);

export function isRetryable(code: ErrorCode): boolean {
  return RETRYABLE.has(code);
}

/** The plain-JSON error inside a failed result. Never an `Error` instance. */
export interface ErrorInfo {
  type: 'ToolError';
  tool: string;
  stage: Stage;
  code: ErrorCode;
  message: string;
  retryable: boolean;
  details?: Record<string, unknown>;
  stack?: string;
}

export interface ToolFailureOptions {
  details?: Record<string, unknown>;
  /** The tool's own stack (already stripped of host paths), if the failure came from tool code. */
  toolStack?: string;
  cause?: unknown;
}

export class ToolFailure extends Error {
  override readonly name = 'ToolFailure';
  readonly stage: Stage;
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;
  readonly toolStack: string | undefined;

  constructor(stage: Stage, code: ErrorCode, message: string, options: ToolFailureOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.stage = stage;
    this.code = code;
    this.details = options.details;
    this.toolStack = options.toolStack;
  }
}

/** Shorthand for the most common case: a failure while the tool runs. */
export function executionFailure(code: ErrorCode, message: string, options?: ToolFailureOptions): ToolFailure {
  return new ToolFailure('execution', code, message, options);
}

export function isToolFailure(value: unknown): value is ToolFailure {
  return value instanceof ToolFailure;
}
