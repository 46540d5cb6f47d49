import { types } from 'node:util';
import { type ErrorCode, type Stage, ToolFailure } from './errors.js';

/**
 * Checks on values that cross into or out of a tool: they must be plain JSON, within size and depth
 * limits. Inputs are also copied, so a caller cannot change them while the tool runs and keys such as
 * `__proto__` become ordinary own properties that cannot reach any prototype.
 */

export interface PayloadLimits {
  bytes: number;
  depth: number;
}

interface WalkContext {
  stage: Stage;
  invalid: ErrorCode;
  tooLarge: ErrorCode;
  what: 'input' | 'output';
  limits: PayloadLimits;
  bytes: number;
  copy: boolean;
  /** The value the walk started from (to search for a cycle once the depth limit is hit). */
  root: unknown;
}

function pointer(path: readonly (string | number)[]): string {
  return path.length === 0 ? '' : `/${path.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;
}

function reject(ctx: WalkContext, path: readonly (string | number)[], reason: string): never {
  const at = pointer(path);
  throw new ToolFailure(ctx.stage, ctx.invalid, `The ${ctx.what} is not plain JSON at "${at || '/'}": ${reason}`, {
    details: { pointer: at, reason },
  });
}

function addBytes(ctx: WalkContext, n: number): void {
  ctx.bytes += n;
  if (ctx.bytes > ctx.limits.bytes) {
    throw new ToolFailure(ctx.stage, ctx.tooLarge, `The ${ctx.what} is larger than the limit of ${ctx.limits.bytes} bytes of JSON`, {
      details: { limit_bytes: ctx.limits.bytes },
    });
  }
}

/**
 * A cycle shows up as a walk that reaches the depth limit; only then (off the hot path) is the chain of
 * ancestors searched for a value that contains itself, so a cycle is reported as what it is (not plain
 * JSON), with the pointer where it closes, rather than as a size problem. Every ancestor on `path` is
 * an own data property already checked by `walk`, so reading it runs no caller code.
 */
function cycleAt(root: unknown, path: readonly (string | number)[]): (string | number)[] | null {
  const seen = new Set<unknown>();
  let node = root;
  for (let i = 0; i <= path.length; i++) {
    if (seen.has(node)) return path.slice(0, i);
    seen.add(node);
    if (i === path.length || typeof node !== 'object' || node === null) break;
    node = Object.getOwnPropertyDescriptor(node, path[i] as string | number)?.value;
  }
  return null;
}

function walk(ctx: WalkContext, value: unknown, path: (string | number)[], depth: number): unknown {
  switch (typeof value) {
    case 'string':
      addBytes(ctx, value.length < 256 ? value.length + 2 : Buffer.byteLength(value) + 2);
      return value;
    case 'number':
      if (!Number.isFinite(value)) reject(ctx, path, `${value} is not a JSON number`);
      addBytes(ctx, 8);
      return value;
    case 'boolean':
      addBytes(ctx, 5);
      return value;
    case 'object':
      break;
    case 'undefined':
      return reject(ctx, path, 'undefined is not a JSON value');
    case 'bigint':
      return reject(ctx, path, 'a BigInt is not a JSON value (send it as a string)');
    default:
      return reject(ctx, path, `a ${typeof value} is not a JSON value`);
  }
  if (value === null) {
    addBytes(ctx, 4);
    return null;
  }
  if (depth >= ctx.limits.depth) {
    const cycle = cycleAt(ctx.root, path);
    if (cycle !== null) reject(ctx, cycle, 'the value contains itself (a cycle)');
    throw new ToolFailure(ctx.stage, ctx.tooLarge, `The ${ctx.what} is nested deeper than ${ctx.limits.depth} levels`, {
      details: { pointer: pointer(path), limit_depth: ctx.limits.depth },
    });
  }
  if (types.isProxy(value)) reject(ctx, path, 'a Proxy is not plain JSON');
  if (Array.isArray(value)) {
    addBytes(ctx, 2);
    const out: unknown[] | null = ctx.copy ? new Array(value.length) : null;
    for (let i = 0; i < value.length; i++) {
      const d = Object.getOwnPropertyDescriptor(value, i);
      if (d === undefined) reject(ctx, [...path, i], 'arrays must not have holes');
      if (d.get || d.set) reject(ctx, [...path, i], 'accessor properties are not plain JSON');
      path.push(i);
      const v = walk(ctx, d.value, path, depth + 1);
      path.pop();
      if (out) out[i] = v;
      addBytes(ctx, 1);
    }
    return out ?? value;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    const kind = (value as object).constructor?.name ?? 'object';
    reject(ctx, path, `a ${kind} instance is not a plain object`);
  }
  if (Object.getOwnPropertySymbols(value).length > 0) reject(ctx, path, 'symbol keys are not JSON');
  addBytes(ctx, 2);
  const out: Record<string, unknown> | null = ctx.copy ? {} : null;
  for (const key of Object.keys(value)) {
    const d = Object.getOwnPropertyDescriptor(value, key) as PropertyDescriptor;
    if (d.get || d.set) reject(ctx, [...path, key], 'accessor properties are not plain JSON');
    addBytes(ctx, key.length + 4);
    path.push(key);
    const v = walk(ctx, d.value, path, depth + 1);
    path.pop();
    // defineProperty, not assignment: a "__proto__" key must stay data, never a prototype change.
    if (out) Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
  }
  return out ?? value;
}

/** Validates and copies a call input. Throws `INVALID_INPUT` / `INPUT_TOO_LARGE` at stage `validation`. */
export function copyInput(value: unknown, limits: PayloadLimits): unknown {
  const ctx: WalkContext = {
    stage: 'validation',
    invalid: 'INVALID_INPUT',
    tooLarge: 'INPUT_TOO_LARGE',
    what: 'input',
    limits,
    bytes: 0,
    copy: true,
    root: value,
  };
  return walk(ctx, value, [], 0);
}

/** Checks a tool's output and returns its approximate JSON size. Throws `INVALID_OUTPUT` / `OUTPUT_LIMIT`. */
export function checkOutput(value: unknown, limits: PayloadLimits): number {
  const ctx: WalkContext = {
    stage: 'execution',
    invalid: 'INVALID_OUTPUT',
    tooLarge: 'OUTPUT_LIMIT',
    what: 'output',
    limits,
    bytes: 0,
    copy: false,
    root: value,
  };
  walk(ctx, value, [], 0);
  return ctx.bytes;
}

/** Keys whose values never appear in events or logs (secrets never appear in events: README, Events). */
const SECRET_KEY = /pass(word|phrase)?|secret|token|api[-_]?key|auth(orization)?|credential|private[-_]?key|cookie|session/i;
/** `key`, `ssh_key`, `signing-key`, `accessKey`; not `keys`, `monkey` or `keyword`. */
const KEY_NAME = /(?:^|[-_.])[kK][eE][yY]$|[a-z0-9]Key$/;

/**
 * Whether the value under `key` is masked in events, approval requests and the audit log. The one
 * place that decides it: when the engine holds secrets of its own, their names are checked here too.
 */
export function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key) || KEY_NAME.test(key);
}

/**
 * A copy of `value` fit for an event: secret-looking keys redacted, long strings and large values cut.
 * Never throws (the value has already been checked or comes from the engine itself).
 */
export function forEvent(value: unknown, maxBytes: number): unknown {
  let budget = maxBytes;
  const visit = (v: unknown, depth: number): unknown => {
    if (budget <= 0) return '[truncated]';
    if (typeof v === 'string') {
      const out = v.length > budget ? `${v.slice(0, Math.max(0, budget))}…[${v.length} chars]` : v;
      budget -= Math.min(v.length, budget) + 2;
      return out;
    }
    if (v === null || typeof v !== 'object') {
      budget -= 8;
      return v;
    }
    if (depth > 16) return '[nested]';
    if (Array.isArray(v)) {
      const out: unknown[] = [];
      for (const item of v) {
        if (budget <= 0) {
          out.push(`[${v.length - out.length} more]`);
          break;
        }
        out.push(visit(item, depth + 1));
      }
      return out;
    }
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(v)) {
      if (budget <= 0) {
        out['…'] = 'truncated';
        break;
      }
      // Keys count against the budget and are cut like strings: one key of a megabyte is a payload too.
      const shown = key.length > budget ? `${key.slice(0, budget)}…[${key.length} chars]` : key;
      budget -= shown.length + 4;
      const item = isSecretKey(key) ? '[redacted]' : visit((v as Record<string, unknown>)[key], depth + 1);
      Object.defineProperty(out, shown, { value: item, enumerable: true, writable: true, configurable: true });
    }
    return out;
  };
  try {
    return visit(value, 0);
  } catch {
    return '[unavailable]';
  }
}
