import { type ErrorCode, type Stage, ToolFailure } from '../../src/errors.js';
import type { ToolVfs } from '../../src/tool-vfs.js';
import { asText } from '../../src/vfs/text-diff.js';

/**
 * `ctx.vfs` of a sandboxed tool (JS or Python), on the host side: each request from the sandbox is
 * checked here and run on the call's ToolVfs, which checks the path against what the tool declared and
 * the caller granted. The arguments come from tool code: anything may be in them, and nothing is
 * trusted before it is checked.
 */

export const VFS_OPS = ['read', 'write', 'list', 'stat', 'exists', 'delete', 'mkdir', 'move'] as const;
export type VfsOp = (typeof VFS_OPS)[number];

/** A failure as a sandbox sees it: plain JSON made by the engine. */
export interface WireError {
  code: ErrorCode;
  message: string;
  details?: Record<string, unknown>;
  /** A code-mode program's failed tool call also says where it failed, whether to retry, and which tool. */
  stage?: Stage;
  retryable?: boolean;
  tool?: string;
}

const OPS: ReadonlySet<string> = new Set(VFS_OPS);
const MAX_LIST = 100_000;

function bad(op: string, message: string): ToolFailure {
  return new ToolFailure('execution', 'INVALID_INPUT', `ctx.vfs.${op}: ${message}`, { details: { operation: op } });
}

/** Options are a plain object or nothing; each field is read only if it is an own data field of the right type. */
function options(op: string, value: unknown): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw bad(op, 'options must be an object');
  return value as Record<string, unknown>;
}

function flag(op: string, opts: Record<string, unknown>, name: string, fallback: boolean): boolean {
  const value = Object.hasOwn(opts, name) ? opts[name] : undefined;
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw bad(op, `options.${name} must be a boolean`);
  return value;
}

function choice<T extends string>(op: string, opts: Record<string, unknown>, name: string, allowed: readonly T[], fallback: T): T {
  const value = Object.hasOwn(opts, name) ? opts[name] : undefined;
  if (value === undefined) return fallback;
  if (!allowed.includes(value as T)) throw bad(op, `options.${name} must be one of ${allowed.map((a) => `"${a}"`).join(', ')}`);
  return value as T;
}

function bytesOf(op: string, content: unknown, encoding: 'utf8' | 'base64'): Buffer | string {
  if (typeof content === 'string') {
    if (encoding === 'utf8') return content;
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(content) || content.length % 4 === 1) throw bad(op, 'content is not valid base64');
    return Buffer.from(content, 'base64');
  }
  if (content instanceof Uint8Array) return Buffer.from(content.buffer, content.byteOffset, content.byteLength);
  if (ArrayBuffer.isView(content)) return Buffer.from(content.buffer, content.byteOffset, content.byteLength);
  if (content instanceof ArrayBuffer) return Buffer.from(content);
  throw bad(op, 'content must be a string, a Uint8Array or an ArrayBuffer');
}

/** Runs one `ctx.vfs` request. Returns plain data (or bytes) for the tool; throws ToolFailure. */
export function runVfsOp(vfs: ToolVfs, op: VfsOp, args: readonly unknown[]): unknown {
  switch (op) {
    case 'read': {
      const encoding = choice(op, options(op, args[1]), 'encoding', ['utf8', 'base64', 'bytes'] as const, 'utf8');
      const data = vfs.read(args[0]);
      if (encoding === 'bytes') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      if (encoding === 'base64') return data.toString('base64');
      const text = asText(data);
      if (text === null) {
        const path = vfs.resolve(args[0]);
        throw new ToolFailure('execution', 'NOT_TEXT', `${path} is not UTF-8 text; read it with { encoding: 'bytes' }`, { details: { path } });
      }
      return text;
    }
    case 'write': {
      const opts = options(op, args[2]);
      const encoding = choice(op, opts, 'encoding', ['utf8', 'base64'] as const, 'utf8');
      const outcome = vfs.write(args[0], bytesOf(op, args[1], encoding), {
        append: flag(op, opts, 'append', false),
        exclusive: flag(op, opts, 'exclusive', false),
        parents: flag(op, opts, 'parents', true),
      });
      return { path: outcome.path, created: outcome.created, size: outcome.size };
    }
    case 'list': {
      const opts = options(op, args[1]);
      const limit = Object.hasOwn(opts, 'limit') ? opts.limit : 1000;
      if (!Number.isInteger(limit) || (limit as number) < 1 || (limit as number) > MAX_LIST) {
        throw bad(op, `options.limit must be an integer from 1 to ${MAX_LIST}`);
      }
      return vfs.list(args[0] ?? '/', { recursive: flag(op, opts, 'recursive', false), limit: limit as number });
    }
    case 'stat':
      return vfs.stat(args[0]);
    case 'exists':
      return vfs.exists(args[0]);
    case 'delete':
      return vfs.delete(args[0], { recursive: flag(op, options(op, args[1]), 'recursive', false) });
    case 'mkdir':
      return vfs.mkdir(args[0], { parents: flag(op, options(op, args[1]), 'parents', false) });
    case 'move':
      return vfs.move(args[0], args[1], { overwrite: flag(op, options(op, args[2]), 'overwrite', false) });
  }
}

/**
 * A `ctx.vfs` served by another process: a remote runner's worker hands its local runner a view whose
 * every request goes back to the engine that owns the VFS, to be checked there by `runVfsOp` on the
 * call's ToolVfs. Failures come back as ToolFailure, as from a local view.
 */
export interface ForwardedVfs {
  readonly forwarded: true;
  forward(op: VfsOp, args: readonly unknown[]): Promise<unknown>;
}

export function isForwarded(vfs: unknown): vfs is ForwardedVfs {
  return typeof vfs === 'object' && vfs !== null && (vfs as Partial<ForwardedVfs>).forwarded === true;
}

export function isVfsOp(op: unknown): op is VfsOp {
  return typeof op === 'string' && OPS.has(op);
}

/**
 * Failures that end the call instead of being handed to the tool to catch: a permission denial, and a
 * path that tries to leave the VFS. A tool must not be able to probe its sandbox, swallow the refusal
 * and carry on as if nothing happened; the call fails with the denial (and its one SecurityEvent).
 */
export function endsCall(failure: ToolFailure): boolean {
  return failure.code === 'DENIED' || (failure.code === 'INVALID_PATH' && failure.details?.escape === true);
}

/** What the tool sees of a failure: its code, message and details (plain JSON made by the engine). */
export function toWire(failure: ToolFailure): WireError {
  const wire: WireError = { code: failure.code, message: failure.message };
  if (failure.details) wire.details = failure.details;
  return wire;
}

/**
 * Codes a call may end with when the tool lets a `ctx.vfs` failure escape: what happened to the VFS
 * (the caller learns the file was missing or the quota full, as from the builtins). Failures that are
 * the tool's own misuse of `ctx.vfs` (a bad argument, too many requests pending) stay `TOOL_ERROR`.
 */
const UNCAUGHT_VFS_CODES: ReadonlySet<string> = new Set<ErrorCode>([
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'NOT_A_DIRECTORY',
  'IS_A_DIRECTORY',
  'NOT_EMPTY',
  'INVALID_PATH',
  'NOT_TEXT',
  'QUOTA_EXCEEDED',
]);

/** The code a call ends with when its tool did not catch a `ctx.vfs` failure of code `code`. */
export function uncaughtVfsCode(code: unknown): ErrorCode {
  return typeof code === 'string' && UNCAUGHT_VFS_CODES.has(code) ? (code as ErrorCode) : 'TOOL_ERROR';
}
