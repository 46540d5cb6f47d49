import type { CallerTools } from './code-mode/catalog.js';
import type { CallLimits } from './limits.js';
import type { LogLine, ToolResult } from './result.js';
import type { Tool } from './tool.js';
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
  /**
   * The committed VFS and its history (snapshots, diff, restore), for a runner that declares the
   * `history` capability (the builtins); null for every other runner, whose tools reach the VFS only
   * through `vfs`.
   */
  readonly history: VfsState | null;
  /** Captures a log line for `meta.logs` (bounded by the dispatcher). */
  log(level: LogLine['level'], message: string): void;
  /**
   * True when the caller follows the call's logs as they are written (an MCP client): a runner that
   * gathers a sandbox's log lines until the call ends should pass each to `log` as it comes instead.
   */
  readonly streamLogs?: boolean;
  /** Tells the caller how far the call is, when it listens (a provider passes on its upstream's progress). */
  progress?(progress: { progress: number; total?: number; message?: string }): void;
  /**
   * Reports an attempt of the tool to reach outside its sandbox that the runner refused (e.g. `import
   * node:fs`): one SecurityEvent with `action: "intrusion"`. The runner still fails the call itself.
   */
  intrusion(operation: string, reason: string): void;
  /** Facts a runner reports into `meta` (e.g. the isolation in force). */
  readonly meta: Record<string, unknown>;
  /**
   * Calls another tool as a step of this call, for a runner that declares the `steps` capability (the
   * macro runner); absent otherwise. The step is a full call (validation, the permission gate with this
   * call's grants, events) that runs in this call's transaction: it lands only when this call commits.
   */
  readonly steps?: StepCaller | null;
  /**
   * Calls other tools from inside this call, for a runner that declares the `calls` capability (code
   * mode); absent otherwise. See `ToolCaller`.
   */
  readonly calls?: ToolCaller | null;
  /**
   * The tools this call's caller may call (its grants, and the tools its surface offers), for a runner
   * that declares the `catalog` capability (the builtin runner, for tools.search, tools.describe,
   * tools.call and code.types); absent otherwise. Made when asked for, so a call that does not ask pays nothing.
   */
  readonly catalog?: (() => CallerTools) | null;
}

/**
 * What a code-mode call may call: each call is a full call through the dispatcher with this call's
 * grants and trace, its events naming this call's run as their parent, within what is left of this
 * call's time. `atomic`: the call runs in this call's transaction (as a macro's step: it lands only
 * when this call commits, and may not wait for approval); otherwise it commits on its own.
 */
export interface ToolCaller {
  /** The tools this call may reach: those its caller's grants cover and its surface offers. */
  callable(): Tool[];
  /** Resolves with the inner call's own result (a failure is `ok: false`, never a rejection). */
  call(id: string, input: unknown, atomic: boolean): Promise<ToolResult>;
}

/** One step a composite call asks for: its index in the call's steps, the tool, and the input built for it. */
export interface StepCall {
  index: number;
  tool: string;
  input: unknown;
}

/** Runs one step; resolves with the step's own result (a failed step is `ok: false`, never a rejection). */
export type StepCaller = (step: StepCall) => Promise<ToolResult>;

/** A tool by id as the registry will serve it; null when a definition has that id but is not served (it has problems). */
export type LinkLookup = (id: string) => Tool | null | undefined;

/** A problem `link` finds: a JSON pointer into the definition, and what is wrong there. */
export interface LinkProblem {
  at: string;
  message: string;
}

/** A syntax error found in a tool's code before it is called. */
export interface CodeProblem {
  /** The file, relative to the tools folder. */
  file: string;
  line: number;
  column: number;
  message: string;
  /** What kind of problem: a syntax error (default), or an import that cannot be served (a package not installed, a Node built-in). */
  kind?: 'syntax' | 'import';
}

export interface RunnerStatus {
  available: boolean;
  /** Why not, and how to fix it, when unavailable. */
  reason?: string;
  [key: string]: unknown;
}

/** The one interface every runner implements; the engine reaches runners only through their `RunnerDefinition`. */
export interface Runner {
  /** The name its definition registers (`RunnerDefinition.name`). */
  readonly name: string;
  /**
   * True when the runner can stop a tool mid-flight (a sandbox it can kill): the dispatcher then arms a
   * wall-clock deadline for calls that go through `run`. The builtin runner is: its synchronous tools
   * go through `runSync`, which arms none, and system.exec, which `waits`, can kill its sandbox.
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
   * Ids of the tools of a runner with `runSync` that wait instead (the builtins `shell.run`, whose script
   * runs in a worker thread, and `system.exec`, which waits for its sandboxed program): the dispatcher runs them through `run`, under a deadline and with a live
   * `ctx.signal`, as an interruptible runner's calls. The runner's other tools stay synchronous.
   */
  readonly asyncTools?: ReadonlySet<string>;
  /**
   * Looks for syntax errors in a tool's code without running it; null when it finds none or cannot
   * check here (no interpreter, say). The registry reports what it finds as a load problem.
   */
  check?(tool: Tool): Promise<CodeProblem | null>;
  /** Called when a tool is added or changed, so the runner may warm caches off the call path. */
  prepare?(tool: Tool): void;
  /**
   * Work a call of `tool` needs done that is not the tool's own run (the JS runner bundling a tool's
   * npm packages after an edit): awaited before the call's clock starts, so `timeout_ms` measures the
   * tool and not the engine's preparation of it. A failure here is reported by `run`, not thrown.
   */
  ready?(tool: Tool): Promise<void>;
  /** Called when a tool is removed or replaced, so the runner may drop what it cached for it. */
  forget?(tool: Tool): void;
  /**
   * What the runner needs beyond `ctx.vfs`: `history` gives its calls `ctx.history`, `steps` gives them
   * `ctx.steps`, `calls` gives them `ctx.calls`, `catalog` gives them `ctx.catalog`.
   */
  readonly capabilities?: readonly RunnerCapability[];
  /** Tools the runner brings itself, with no definition file (the builtins); their ids are reserved. */
  tools?(): Tool[];
  status(): Promise<RunnerStatus>;
  close(): Promise<void>;
}

/**
 * A power a runner asks for by name: `history`, the durable state with its snapshots; `steps`, calling
 * other tools inside its call's transaction; `calls`, calling other tools in its transaction or each
 * on its own (code mode); `catalog`, the tools its caller may call.
 */
export type RunnerCapability = 'history' | 'steps' | 'calls' | 'catalog';

/** One answer of a machine probe (`arium doctor`): a real command run, not a guess. */
export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  /** How to fix it, for failed checks. */
  fix?: string;
}

/** A tool made from source by `arium init --template <name>`, with the command that builds it. */
export interface RunnerTemplate {
  /** One line for people: what it makes. */
  readonly summary: string;
  /** Files by path relative to the tools folder: a definition as an object, source as text. */
  readonly files: Readonly<Record<string, string | Readonly<Record<string, unknown>>>>;
  /** The build command (argv), run in the tools folder: init runs it once, and shows it for later builds. */
  readonly build: readonly string[];
  /** How to install what `build` needs, for when it is missing. */
  readonly install: string;
}

/** What a runner is created with. */
export interface RunnerSetup {
  /** Absolute path of the project folder (a relative path in its options is taken from here). */
  readonly projectDir: string;
  /** The project's arium.json (checked): a runner reads the keys its definition declares in `config`. */
  readonly config: Readonly<Record<string, unknown>>;
}

/**
 * Everything the engine knows about a kind of runner, in one place: the registry takes the runner names
 * and entry extensions from here, the permission gate the `exec.*` permission, arium.json its keys,
 * `arium doctor` its probes and `arium init` its example. Adding a runner is one definition in the
 * catalog (`createEngine({ runners: [definition] })` for a runner from outside the package).
 */
export interface RunnerDefinition {
  /** What a tool definition writes in `"runner"`: lower-case letters, digits and "-", e.g. `sh-runner`. */
  readonly name: string;
  /** One line for people: what runs the tools. */
  readonly summary: string;
  /** Entry file extensions it takes, lower case with the dot (e.g. `.py`); empty when its tools have no entry file. */
  readonly extensions: readonly string[];
  /** The permission every tool of this runner declares and its caller must be granted, `exec.<kind>`; null for none. */
  readonly permission: string | null;
  /** Whether callers get `permission` when the engine's options and arium.json name no grants. */
  readonly grantedByDefault?: boolean;
  /** False for a runner only the engine's own tools use (builtin): a project's definitions may not name it. */
  readonly definable?: boolean;
  /**
   * True for a runner whose tools chain other tools (the macro runner): their definitions list `steps`
   * (and may give an `output` template) instead of an `entry`, and the runner needs no entry extension.
   */
  readonly composite?: boolean;
  /**
   * Checks what a loaded tool of this runner says about other tools (a macro's steps: unknown tools,
   * cycles, templates that cannot match), once every definition is read. Each problem names where in the
   * definition (a JSON pointer); a tool with any is not served.
   */
  link?(tool: Tool, lookup: LinkLookup): LinkProblem[];
  /**
   * Fields a tool definition of this runner may carry beyond the common ones, each with its JSON Schema
   * (the JS runner's `context`). A definition of another runner that gives one is refused at load.
   */
  readonly toolFields?: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** The top-level arium.json keys it reads, each with its JSON Schema. */
  readonly config?: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /**
   * Checks for `arium doctor`, each a real command with a timeout, for the project as `create` would
   * see it: its arium.json, and its folder (relative paths in the config are taken from there).
   */
  probe?(setup: RunnerSetup): Promise<Check[]>;
  /**
   * An example tool for `arium init`: its files by path relative to the tools folder, the definition as
   * an object (init adds its `$schema`) and code as text.
   */
  readonly example?: Readonly<Record<string, string | Readonly<Record<string, unknown>>>>;
  /** Tools `arium init --template <name>` creates instead of the examples: for a runner whose tools are built from source. */
  readonly templates?: Readonly<Record<string, RunnerTemplate>>;
  create(setup: RunnerSetup): Runner;
}
