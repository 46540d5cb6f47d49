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

const ISOLATIONS: ReadonlySet<string> = new Set(['bubblewrap', 'unshare', 'rlimits']);
const count = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

/**
 * The `meta` fields a worker's runner reports, each checked, and copied as a fresh value: a worker's
 * JSON may hold `"__proto__"` or any other key, and assigning that into the engine's `meta` would
 * replace the prototype its readers see (forged `attempts`, `capability`, …).
 */
const WORKER_META: Readonly<Record<string, (value: unknown) => unknown>> = {
  isolation: (value) => (typeof value === 'string' && ISOLATIONS.has(value) ? value : undefined),
  logs_dropped: (value) => (count(value) ? value : undefined),
  bundle: (value) => {
    if (typeof value !== 'object' || value === null || !count((value as { bytes?: unknown }).bytes)) return undefined;
    const { bytes, built_ms } = value as { bytes: number; built_ms?: unknown };
    return { bytes, ...(typeof built_ms === 'number' && Number.isFinite(built_ms) && built_ms >= 0 ? { built_ms } : {}) };
  },
};

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
    for (const [key, check] of Object.entries(WORKER_META)) {
      const value = Object.hasOwn(meta, key) ? check((meta as Record<string, unknown>)[key]) : undefined;
      if (value !== undefined && !Object.hasOwn(ctx.meta, key)) ctx.meta[key] = value;
    }
  }
  if (message.ok === true) return { value: message.data };
  const error = plainObject(message.error) ?? {};
  const code = KNOWN_CODES.has(error.code as string) ? (error.code as ErrorCode) : 'INTERNAL';
  const stage = STAGES.has(error.stage as string) ? (error.stage as Stage) : 'execution';
  const details = plainObject(error.details);
  return {
    failure: new ToolFailure(stage, code, String(error.message ?? 'The worker reported a failure without details'), {
      ...(details ? { details } : {}),
      ...(typeof error.stack === 'string' ? { toolStack: error.stack } : {}),
    }),
  };
}

/**
 * A worker's JSON object as data the engine may merge and read: a fresh copy without `__proto__` keys
 * at any depth, so that no later spread or assignment of it can reach a prototype. Null for anything
 * but an object.
 */
export function plainObject(value: unknown): Record<string, unknown> | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  return JSON.parse(JSON.stringify(value), (key, inner) => (key === '__proto__' ? undefined : inner)) as Record<string, unknown>;
}
