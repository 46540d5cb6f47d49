import type { Engine, EngineEvent, ToolInfo, ToolResult } from '../../../index.js';
import { installProject } from '../../../install.js';
import { maxPositionals } from '../args.js';
import type { CommandSpec } from '../command.js';
import { type Context, withEngine } from '../context.js';
import { clip, formatError, formatEvent, indent } from '../format.js';
import { EXIT } from '../io.js';
import { BUILTIN_STEPS, type Step, showData } from './demo-steps.js';

/**
 * The main job, scripted: a short agent-like session on the demo project that shows each contract —
 * results, diffs, structured errors, permissions, the sandboxed runners, snapshots — and prints every
 * event as it happens. Only builtins are required; the project's own tools are called when their
 * runner is available, and a one-line note says why when it is not.
 */

interface Recorded {
  title: string;
  tool: string;
  input: unknown;
  grants?: string[];
  result: ToolResult;
}

/** The demo's JS tool (workspace/demo/tools/demo-todo-stats.json), used again to show a scoped permission at run time. */
const SCOPED_TOOL = 'demo.todo-stats';

async function session(ctx: Context, engine: Engine, setup: readonly string[]): Promise<number> {
  const { c } = ctx;
  const events: EngineEvent[] = [];
  const recorded: Recorded[] = [];
  const notes: string[] = [];
  const note = (text: string) => {
    notes.push(text);
    if (!ctx.json) ctx.out(c.yellow(`  note: ${text}`));
  };
  engine.events.on('event', (e) => {
    events.push(e);
    if (!ctx.json) ctx.out(`  ${c.dim('↳')} ${formatEvent(e, c)}`);
  });
  const traceId = `demo-${Date.now().toString(36)}`;
  const call = async (step: Step): Promise<ToolResult> => {
    if (!ctx.json) {
      const grants = step.grants ? c.dim(` grants=${step.grants.join(',')}`) : '';
      ctx.out(
        `\n${c.bold(`▶ ${recorded.length + 1}. ${step.title}`)}\n  ${c.cyan(step.tool)} ${c.dim(clip(JSON.stringify(step.input), 110))}${grants}`,
      );
    }
    const result = await engine.call(step.tool, step.input, { caller: 'demo', trace_id: traceId, ...(step.grants ? { grants: step.grants } : {}) });
    recorded.push({ title: step.title, tool: step.tool, input: step.input, ...(step.grants ? { grants: step.grants } : {}), result });
    if (!ctx.json) {
      const took = c.dim(`${result.meta.duration_ms.toFixed(2)} ms`);
      if (result.ok) ctx.out(`  ${c.green('✓ ok')} ${took}\n${indent((step.show ?? showData)(result.data, c), '    ')}`);
      // An unavailable runner is told by the caller's one-line note, not as an error of the session.
      else if (step.optional && unavailable(result.error.code)) return result;
      else ctx.out(`  ${c.red('✗ error')} ${took}${step.expectError ? c.dim(' (expected)') : ''}\n${indent(formatError(result.error, c), '  ')}`);
    }
    return result;
  };

  const tools = engine.tools();
  const own = tools.filter((t) => t.source !== 'builtin').sort((a, b) => a.id.localeCompare(b.id));
  if (!ctx.json) {
    ctx.out(c.bold(`Arium demo — project ${engine.project}: ${tools.length - own.length} builtin tools, ${own.length} of its own`));
    ctx.out(c.dim(`Each step is one engine.call(); the ↳ lines are the events it emitted, as they happened (trace ${traceId}).`));
  }
  // The session writes below /notes only and starts each run from an empty /notes. What is there (a
  // person's notes written from the inspector, or an earlier run's) is saved in a snapshot first and the
  // reset is said, so a run never loses a file unseen.
  if (engine.vfs.exists('/notes')) {
    const saved = engine.snapshot({ label: 'before-demo', message: 'the live tree before arium demo reset /notes' });
    engine.vfs.delete('/notes', { recursive: true });
    note(
      `the demo starts from an empty /notes: what /notes held is saved in snapshot ${saved.id.slice(0, 12)} "before-demo" (arium restore before-demo brings it back)`,
    );
  }

  for (const step of BUILTIN_STEPS) await call(step);

  if (!ctx.json) ctx.out(`\n${c.bold('Project tools')} ${c.dim('(sandboxed runners; each is called with the first of its "examples")')}`);
  for (const text of setup) note(text);
  for (const problem of engine.problems()) note(`${problem.file} did not load: ${problem.message}`);
  if (own.length === 0) note('the project defines no tools of its own (add *.json or *.yaml definitions to its tools/ folder)');
  for (const tool of own) await projectTool(tool, call, note, engine);

  await call({
    title: 'What changed since the snapshot? (vfs.diff, file by file, with unified patches)',
    tool: 'vfs.diff',
    input: { from: 'demo-start', to: 'live' },
    show: (data, paint) => showData(data, paint),
  });

  const counts = new Map<string, number>();
  for (const e of events) counts.set(e.type, (counts.get(e.type) ?? 0) + 1);
  if (ctx.json) {
    ctx.emit({ project: engine.project, trace_id: traceId, steps: recorded, notes, events });
    return EXIT.ok;
  }
  ctx.out(`\n${c.bold('Events')}: ${[...counts].map(([t, n]) => `${n} ${t}`).join(', ')}`);
  ctx.out(c.dim(`The VFS and its snapshots persist in ${engine.projectDir}/.arium. Next: arium log · arium diff demo-start · arium tools`));
  return EXIT.ok;
}

type Caller = (step: Step) => Promise<ToolResult>;

/** Calls one project tool with its first example; an unavailable runner is a note, not a failure of the demo. */
async function projectTool(tool: ToolInfo, call: Caller, note: (text: string) => void, engine: Engine): Promise<void> {
  const example = tool.examples?.[0];
  if (!example) {
    note(`${tool.id} (${tool.runner}) has no "examples" in ${tool.source}, so the demo does not call it`);
    return;
  }
  // engine.tool(id) is what a caller checks first; the registry may have dropped the tool since tools() was read.
  if (!engine.tool(tool.id)) return note(`${tool.id} is no longer in the registry`);
  const result = await call({ title: `${tool.name}: ${tool.description}`, tool: tool.id, input: example, optional: true });
  if (!result.ok && unavailable(result.error.code)) {
    note(`the ${tool.runner} is not available here, so ${tool.id} did not run: ${result.error.message}`);
    return;
  }
  if (result.ok && tool.id === SCOPED_TOOL) {
    await call({
      title: `The same JS tool asked to read outside its declared scope (vfs.read:/notes/**): denied at run time`,
      tool: tool.id,
      input: { path: '/private/keys.txt' },
      expectError: true,
    });
  }
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, demoSpec.usage);
  // The demo project pins npm packages for a JS tool and a Python package (a wheel in the project) for a
  // Python tool: installed first (npm from its cache when it has them), as `arium install` would;
  // without them those tools' calls say what is missing.
  const setup: string[] = [];
  try {
    const installed = await installProject({ workspace: ctx.workspace, project: ctx.project, offline: true });
    if (installed.js?.changed)
      setup.push(`installed the project's npm packages for its JS tools (${installed.js.packages}, ${installed.js.seconds} s)`);
    if (installed.python?.changed)
      setup.push(
        `made the project's Python environment for its Python tools (${installed.python.packages.length} package(s), ${installed.python.seconds} s)`,
      );
  } catch (error) {
    setup.push(`the project's pinned packages could not be installed (${String((error as Error).message).split('\n')[0]}); run \`arium install\``);
  }
  return withEngine(ctx, (engine) => session(ctx, engine, setup), { warmUp: true });
}

export const demoSpec: CommandSpec = {
  name: 'demo',
  usage: 'arium demo',
  summary: 'the main job: a scripted session on the demo project that prints every event as it happens',
  details: `Starts from an empty /notes (what was there is saved first, in a snapshot labelled
"before-demo"), then writes, reads and rewrites /notes/todo.md (showing the unified diff fs.write returns), lists,
hashes, then shows structured errors: a denied call, an invalid input, a path escaping the VFS, an
unknown tool. Then it calls each project tool that has "examples" (JS and Python tools run when their
runner is available; otherwise a note says why) and diffs the VFS against the snapshot taken at the
start. Needs only the builtins. With --json: { project, trace_id, steps, notes, events }.`,
  flags: {},
  run,
};

/** A runner this machine cannot run (not installed, not set up): the demo notes it and goes on. */
function unavailable(code: string): boolean {
  return code === 'UNAVAILABLE' || code === 'MISCONFIGURED';
}
