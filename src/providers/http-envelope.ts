/**
 * The AX v0.1 contract between a gateway and a tool worker (spec §5.2): the request envelope Arium sends
 * and the response envelope it accepts. An answer is data only once it has the envelope's exact shape
 * and echoes the run it was asked for; anything else becomes an error saying what came back instead.
 */
import type { ErrorCode } from '../errors.js';
import { HTTP_PROVIDER_LIMITS } from '../limits.js';
import type { ProviderOutcome } from './provider.js';

export interface RequestMeta {
  trace_id: string;
  tool_run_id: string;
  domain_id: string;
  /** When the gateway stops waiting, epoch ms: the worker may give up on its upstream before then. */
  deadline_ms: number;
}

export function requestEnvelope(meta: RequestMeta, input: unknown): string {
  return JSON.stringify({ meta, input });
}

/** What came back over HTTP, before it is trusted. */
export interface Answer {
  status: number;
  contentType: string | undefined;
  body: Buffer;
}

/**
 * The worker's own error codes (spec §5.2) as the engine's, with the retryable default of each class
 * when the worker does not say (spec §10: "reasonable default retryable behavior per error class").
 */
const WORKER_CODES: ReadonlyMap<string, { code: ErrorCode; retryable: boolean }> = new Map([
  ['UPSTREAM_ERROR', { code: 'TOOL_ERROR', retryable: true }],
  ['VALIDATION_ERROR', { code: 'INVALID_INPUT', retryable: false }],
  ['TIMEOUT', { code: 'TIMEOUT', retryable: true }],
  ['INTERNAL', { code: 'TOOL_ERROR', retryable: false }],
]);

/** HTTP statuses without an envelope: which say "try again later" and which say "this is set up wrong". */
const UNAVAILABLE_STATUSES = new Set([408, 429, 502, 503, 504]);
const MISCONFIGURED_STATUSES = new Set([401, 403, 404, 405, 415]);

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const type = (contentType.split(';')[0] as string).trim().toLowerCase();
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

function quote(body: Buffer): string {
  const max = HTTP_PROVIDER_LIMITS.quoted_chars;
  const text = body.subarray(0, max * 4).toString('utf8');
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function malformed(where: string, answer: Answer, what: string): ProviderOutcome {
  return {
    ok: false,
    code: 'INVALID_OUTPUT',
    message: `The worker at ${where} answered ${what}, not an AX response envelope; nothing it sent was used. It began: ${JSON.stringify(quote(answer.body))}`,
    retryable: false,
    details: { reason: 'malformed_answer', status: answer.status, content_type: answer.contentType ?? null },
  };
}

/** The first way `value` is not a response envelope for the run `sent`, or undefined when it is one. */
function envelopeProblem(value: unknown, sent: RequestMeta): string | undefined {
  if (!isObject(value)) return 'JSON that is not an object';
  if (typeof value.ok !== 'boolean') return 'an object without a boolean "ok"';
  const meta = value.meta;
  if (!isObject(meta)) return 'an envelope without a "meta" object';
  if (meta.tool_run_id !== sent.tool_run_id) {
    return `an envelope for another run (meta.tool_run_id ${JSON.stringify(meta.tool_run_id)}, expected ${JSON.stringify(sent.tool_run_id)})`;
  }
  if (meta.trace_id !== undefined && meta.trace_id !== sent.trace_id) {
    return `an envelope of another trace (meta.trace_id ${JSON.stringify(meta.trace_id)}, expected ${JSON.stringify(sent.trace_id)})`;
  }
  if (meta.duration_ms !== undefined && (typeof meta.duration_ms !== 'number' || !(meta.duration_ms >= 0))) {
    return 'an envelope whose meta.duration_ms is not a number of milliseconds';
  }
  if (value.ok) return 'output' in value ? undefined : 'an "ok": true envelope without "output"';
  const error = value.error;
  if (!isObject(error)) return 'an "ok": false envelope without an "error" object';
  if (typeof error.code !== 'string' || typeof error.message !== 'string') return 'an error without a string "code" and "message"';
  if (error.retryable !== undefined && typeof error.retryable !== 'boolean') return 'an error whose "retryable" is not a boolean';
  if (error.details !== undefined && !isObject(error.details)) return 'an error whose "details" is not an object';
  return undefined;
}

function workerError(where: string, envelope: Obj, status: number): ProviderOutcome {
  const error = envelope.error as Obj;
  const workerCode = error.code as string;
  const known = WORKER_CODES.get(workerCode);
  const retryable = typeof error.retryable === 'boolean' ? error.retryable : (known?.retryable ?? false);
  // An upstream failure the worker calls retryable is the upstream being unavailable, in the engine's words.
  const code: ErrorCode = workerCode === 'UPSTREAM_ERROR' && retryable ? 'UNAVAILABLE' : (known?.code ?? 'TOOL_ERROR');
  const meta = envelope.meta as Obj;
  return {
    ok: false,
    code,
    message: `${error.message as string} (worker ${where}: ${workerCode})`,
    retryable,
    details: {
      worker_code: workerCode,
      ...(error.details === undefined ? {} : { worker_details: error.details }),
      ...(meta.duration_ms === undefined ? {} : { worker_duration_ms: meta.duration_ms }),
      ...(status >= 200 && status < 300 ? {} : { status }),
    },
  };
}

function statusError(where: string, answer: Answer): ProviderOutcome {
  const { status } = answer;
  const head = `The worker at ${where} answered HTTP ${status} (${answer.contentType ?? 'no content type'}) without an AX envelope`;
  const began = `It began: ${JSON.stringify(quote(answer.body))}`;
  const details = { reason: 'http_status', status, content_type: answer.contentType ?? null };
  if (UNAVAILABLE_STATUSES.has(status))
    return { ok: false, code: 'UNAVAILABLE', message: `${head}; retry later. ${began}`, retryable: true, details };
  if (MISCONFIGURED_STATUSES.has(status)) {
    return {
      ok: false,
      code: 'MISCONFIGURED',
      message: `${head}: check the provider's url, the manifest's transport.endpoint and the provider's headers. ${began}`,
      retryable: false,
      details,
    };
  }
  return { ok: false, code: 'TOOL_ERROR', message: `${head}. ${began}`, retryable: false, details };
}

/** Turns what a worker sent back into the call's outcome, trusting none of it until it is an envelope. */
export function readAnswer(answer: Answer, sent: RequestMeta, where: string): ProviderOutcome {
  const success = answer.status >= 200 && answer.status < 300;
  if (!isJson(answer.contentType)) {
    return success ? malformed(where, answer, `with content type ${answer.contentType ?? '(none)'}`) : statusError(where, answer);
  }
  let value: unknown;
  try {
    value = JSON.parse(answer.body.toString('utf8'));
  } catch (error) {
    return success ? malformed(where, answer, `text that is not JSON (${(error as Error).message})`) : statusError(where, answer);
  }
  const problem = envelopeProblem(value, sent);
  if (problem !== undefined) return success ? malformed(where, answer, problem) : statusError(where, answer);
  const envelope = value as Obj;
  if (envelope.ok === false) return workerError(where, envelope, answer.status);
  // An "ok": true envelope under an error status contradicts itself: neither half can be believed.
  if (!success) return statusError(where, answer);
  return { ok: true, data: envelope.output };
}
