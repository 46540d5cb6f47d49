import { ERROR_CODES, type ErrorCode, type Stage, ToolFailure } from '../../src/errors.js';
import type { LogLine } from '../../src/result.js';
import type { RunContext } from '../../src/runner.js';

/**
 * A worker's `done` as the engine takes it: untrusted data. Its log lines, intrusions and `meta` go to
 * the call's context, bounded, without replacing what the engine set; its result becomes the value or
 * the ToolFailure the local runner would have given, with codes and stages the engine knows.
 */

const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODES);
const STAGES: ReadonlySet<string> = new Set(['validation', 'permission', 'execution', 'transport']);
const LEVELS: ReadonlySet<string> = new Set(['log', 'info', 'warn', 'error', 'stdout', 'stderr']);
/** Log lines taken from a worker's answer (the dispatcher bounds them again). */
const MAX_LOGS = 10_000;
const MAX_INTRUSIONS = 16;

/** Applies what the worker reported to `ctx`; returns the call's value, or the failure to throw. */
export function outcomeOf(ctx: RunContext, message: Record<string, unknown>): { value: unknown } | { failure: ToolFailure } {
  const logs = Array.isArray(message.logs) ? message.logs.slice(0, MAX_LOGS) : [];
  for (const line of logs) {
    const level = (line as { level?: unknown })?.level;
    ctx.log((LEVELS.has(level as string) ? level : 'log') as LogLine['level'], String((line as { message?: unknown })?.message));
  }
  if (Array.isArray(message.intrusions)) {
    for (const entry of message.intrusions.slice(0, MAX_INTRUSIONS)) {
      if (Array.isArray(entry)) ctx.intrusion(String(entry[0]).slice(0, 300), String(entry[1]).slice(0, 500));
    }
  }
  const meta = message.meta;
  if (typeof meta === 'object' && meta !== null && !Array.isArray(meta)) {
    // The worker adds what its runner reported; it cannot replace what the engine set.
    for (const [key, value] of Object.entries(meta)) if (!Object.hasOwn(ctx.meta, key)) ctx.meta[key] = value;
  }
  if (message.ok === true) return { value: message.data };
  const error = (message.error ?? {}) as Record<string, unknown>;
  const code = KNOWN_CODES.has(error.code as string) ? (error.code as ErrorCode) : 'INTERNAL';
  const stage = STAGES.has(error.stage as string) ? (error.stage as Stage) : 'execution';
  const details =
    typeof error.details === 'object' && error.details !== null && !Array.isArray(error.details)
      ? (error.details as Record<string, unknown>)
      : undefined;
  return {
    failure: new ToolFailure(stage, code, String(error.message ?? 'The worker reported a failure without details'), {
      ...(details ? { details } : {}),
      ...(typeof error.stack === 'string' ? { toolStack: error.stack } : {}),
    }),
  };
}
