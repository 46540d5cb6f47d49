import type { CallLimits } from './limits.js';
import type { Permission } from './permissions.js';
import type { Validator } from './validation.js';

/** A runner's name, as its `RunnerDefinition` gives it (`builtin`, `js-runner`, `py-runner`, or one a caller adds). */
export type RunnerName = string;

/** A tool definition as written in `tools/<anything>.json`. */
export interface ToolSpec {
  id: string;
  name: string;
  description: string;
  runner: RunnerName;
  entry?: string;
  schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  permissions: string[];
  limits?: Partial<CallLimits>;
  /** Example inputs, each valid against `schema`. */
  examples?: Record<string, unknown>[];
  /** Capabilities a caller may ask for instead of this id (`engine.call({ capability }, …)`). */
  provides?: string[];
  /**
   * js-runner only: `persistent` keeps the tool's context (its modules' top-level state) between its
   * calls; `fresh`, the default, gives each call a new one (runners/js/worker/persistent.mjs).
   */
  context?: 'fresh' | 'persistent';
  /** A macro's steps (runner "macro", instead of `entry`): each calls a tool with an input template. */
  steps?: StepSpec[];
  /** A macro's output template over `{ input, steps }`; the last step's output when absent. */
  output?: unknown;
}

/** One step of a macro, as written in its definition (runners/macro says what the templates mean). */
export interface StepSpec {
  tool: string;
  input?: unknown;
  when?: unknown;
}

/** What the engine tells callers about a tool. Holds no host paths. */
export interface ToolInfo extends ToolSpec {
  /** `builtin`, or the definition file relative to the project, e.g. `tools/reverse.json`. */
  source: string;
}

/** A loaded, validated tool: the spec plus what the engine derived from it once, at load. */
export interface Tool {
  readonly spec: Readonly<ToolSpec>;
  readonly source: string;
  /** Absolute host path of the entry file; runners only, never shown to callers. */
  readonly entryPath: string | null;
  /** Absolute host path of the tools folder the entry must stay inside. */
  readonly toolsDir: string | null;
  /**
   * A worker's tools: the folder below `toolsDir` holding this version of the project's tools folder
   * (one name, e.g. `t<tree hash>`). The tool's own imports and the file names it is shown start there,
   * as they start at `toolsDir` on the engine's machine.
   */
  readonly root?: string;
  readonly declared: readonly Permission[];
  readonly validateInput: Validator;
  readonly validateOutput: Validator | null;
  /** Content hash of the definition; runners key their caches on it (with the entry's own hash). */
  readonly hash: string;
  /**
   * A Python environment folder the tool runs in, in place of its project's pinned one: set by a remote
   * worker for the environment the engine shipped it (runners/remote/shipment.ts). Other runners ignore it.
   */
  readonly environment?: string;
}

export function toolInfo(tool: Tool): ToolInfo {
  return { ...structuredClone(tool.spec), source: tool.source };
}
