import type { ErrorCode } from '../../src/errors.js';
import type { CallLimits } from '../../src/limits.js';
import type { LogLine } from '../../src/result.js';
import type { VfsOp, WireError } from './vfs-ops.js';

/**
 * Messages between the engine and an isolated-vm sandbox process (sandbox-process.ts, with a runner's
 * worker, runners/<name>/worker/main.mjs, started by runners/shared/worker/sandbox.mjs), over
 * Node's IPC channel as JSON (small bytes cross as base64 strings, flagged by `bytes` / `binary`; large
 * writes as raw bytes on a pipe of their own, see `blob`). The workers are plain JavaScript; these types
 * are the contract they follow, and runners/shared/protocol.schema.json ("js.toWorker", "js.fromWorker")
 * describes the same messages for the checks.
 *
 * The engine treats what comes back as untrusted data: a tool cannot write these messages, but if V8
 * were ever compromised in the sandbox process it could, so every field is checked before use.
 */

export interface ToolRef {
  /** Real path of the entry file. */
  entry: string;
  /** Real path of the tools folder: nothing outside it may be imported. */
  root: string;
}

export { VFS_OPS, type VfsOp, type WireError } from './vfs-ops.js';

export type ToWorker =
  | {
      t: 'call';
      id: number;
      tool: ToolRef;
      input: unknown;
      limits: Omit<CallLimits, 'max_attempts'>;
      info: { tool: string; runId: string; traceId: string };
      /** Send each log line as a `log` message when it is written, not with `done` (the caller follows them). */
      stream_logs?: true;
      /**
       * A code-mode program (code.run) to run instead of the module `tool` names: the body of an async
       * function of `tools`. Its tool calls come back as `vfs` messages with `op: 'tool'`.
       */
      program?: string;
      /** What the runner's own worker needs beyond the tool to start it (e.g. a module's argv, environment and preopened folders); plain JSON. */
      setup?: Record<string, unknown>;
      /** The tool keeps its context between calls (its definition's `"context": "persistent"`; worker/persistent.mjs). */
      persistent?: true;
    }
  | { t: 'reply'; id: number; rid: number; ok: true; value: unknown; bytes?: true }
  | { t: 'reply'; id: number; rid: number; ok: false; error: WireError }
  | { t: 'abort'; id: number; code: ErrorCode; message: string }
  | { t: 'prepare'; tool: ToolRef; memoryMb: number }
  | { t: 'forget'; entry: string; tool?: string }
  | { t: 'stats'; id: number }
  | { t: 'probe'; id: number }
  | { t: 'shutdown' };

export type FromWorker =
  | { t: 'ready'; node: string; isolatedVm: string }
  | { t: 'unavailable'; reason: string }
  /**
   * `binary: 1`: args[1] of a write is base64 of the bytes to write. `blob: n`: args[1] is null and the
   * n bytes to write are the next blob on the bulk pipe (fd 4 in the worker), in the order sent.
   */
  /** `op: 'tool'`: a code-mode program's tool call; `args` is [path, input], the path's parts under `tools` joined by U+0000, the input as JSON text. */
  | { t: 'vfs'; id: number; rid: number; op: VfsOp | 'tool'; args: unknown[]; binary?: 1; blob?: number }
  | { t: 'done'; id: number; ok: true; data: unknown; logs: LogLine[]; dropped: number }
  | { t: 'done'; id: number; ok: false; error: WireError & { stack?: string }; logs: LogLine[]; dropped: number }
  | { t: 'log'; id: number; level: LogLine['level']; message: string }
  | { t: 'draining'; reason: string }
  | { t: 'stats'; id: number; [key: string]: unknown }
  | { t: 'probe'; id: number; [key: string]: unknown };
