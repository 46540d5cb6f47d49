import type { CallLimits } from './limits.js';
import type { LogLine } from './result.js';
import type { RunnerName, Tool } from './tool.js';
import type { ToolVfs } from './tool-vfs.js';
import type { VfsState } from './vfs/state.js';

/** Everything a runner gets for one call. Built by the dispatcher, after validation and the permission gate. */
export interface RunContext {
  readonly tool: Tool;
  /** The validated input: a private copy of plain JSON. */
  readonly input: unknown;
  readonly limits: Readonly<CallLimits>;
  /** Aborted when the call times out or is cancelled; a runner must stop the tool's work when it fires. */
  readonly signal: AbortSignal;
  readonly runId: string;
  readonly traceId: string;
  /** The VFS as this call may see it: every operation is checked against declared and granted permissions. */
  readonly vfs: ToolVfs;
  /** The committed VFS and its history. For builtin tools (snapshots, restore); sandboxed runners must use `vfs`. */
  readonly state: VfsState;
  /** Captures a log line for `meta.logs` (bounded by the dispatcher). */
  log(level: LogLine['level'], message: string): void;
  /**
   * Reports an attempt of the tool to reach outside its sandbox that the runner refused (e.g. `import
   * node:fs`): one SecurityEvent with `action: "intrusion"`. The runner still fails the call itself.
   */
  intrusion(operation: string, reason: string): void;
  /** Facts a runner reports into `meta` (e.g. the isolation in force). */
  readonly meta: Record<string, unknown>;
}

/** A syntax error found in a tool's code before it is called. */
export interface CodeProblem {
  /** The file, relative to the tools folder. */
  file: string;
  line: number;
  column: number;
  message: string;
}

export interface RunnerStatus {
  available: boolean;
  /** Why not, and how to fix it, when unavailable. */
  reason?: string;
  [key: string]: unknown;
}

/** The one interface every runner implements; only the composition root (engine.ts) knows concrete runners. */
export interface Runner {
  readonly name: RunnerName;
  /**
   * True when the runner can stop a tool mid-flight (a sandbox it can kill): the dispatcher then arms a
   * wall-clock deadline. The builtin runner's operations are short and synchronous, so it needs none.
   */
  readonly interruptible: boolean;
  /** Runs one call. Throws `ToolFailure` for tool-level failures; anything else is treated as internal. */
  run(ctx: RunContext): Promise<unknown>;
  /**
   * Runs one call synchronously, for a runner whose work never waits (the builtins). The dispatcher
   * then runs, checks and commits the call with nothing in between: no other call can commit under it,
   * so it never loses a race, and it skips the awaits of `run`.
   */
  runSync?(ctx: RunContext): unknown;
  /**
   * Looks for syntax errors in a tool's code without running it; null when it finds none or cannot
   * check here (no interpreter, say). The registry reports what it finds as a load problem.
   */
  check?(tool: Tool): Promise<CodeProblem | null>;
  /** Called when a tool is added or changed, so the runner may warm caches off the call path. */
  prepare?(tool: Tool): void;
  /** Called when a tool is removed or replaced, so the runner may drop what it cached for it. */
  forget?(tool: Tool): void;
  status(): Promise<RunnerStatus>;
  close(): Promise<void>;
}
