import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { PendingApproval } from '../../../approvals/gate.js';
import type { CallOptions } from '../../../dispatcher.js';
import type { Engine } from '../../../engine.js';
import { bool, int, maxPositionals, str, UsageError } from '../args.js';
import type { CommandSpec } from '../command.js';
import { type Context, withEngine } from '../context.js';
import { formatResult } from '../format.js';
import { EXIT } from '../io.js';

const USAGE =
  'arium call <id> [json | @file | -] [--trace-id <id>] [--timeout <ms>] [--approve]\n       arium call --capability <name> [json | @file | -] …';

/** Parses JSON input; the error says where the input came from and, for multi-line files, the line and column. */
export function parseInput(text: string, where: string): unknown {
  if (text.trim() === '') throw new UsageError(`The input ${where} is empty; give a JSON object such as {} or {"path":"/a.txt"}`);
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    const position = /at position (\d+)/.exec(message)?.[1];
    let at = '';
    if (position !== undefined && !/\(line \d+/.test(message)) {
      const before = text.slice(0, Number(position)).split('\n');
      at = ` (line ${before.length}, column ${(before.at(-1)?.length ?? 0) + 1})`;
    }
    throw new UsageError(`The input ${where} is not valid JSON: ${message}${at}. Quote inline JSON for the shell: '{"path":"/a.txt"}'`);
  }
}

async function readInput(ctx: Context, arg: string | undefined): Promise<unknown> {
  if (arg === undefined) return {};
  if (arg === '-') return parseInput(await ctx.io.readStdin(), 'from stdin');
  if (arg.startsWith('@')) {
    if (arg.length === 1) throw new UsageError('"@" needs a file name: arium call <id> @input.json');
    const path = resolve(ctx.io.cwd, arg.slice(1));
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a folder' : (code ?? (error as Error).message);
      throw new UsageError(`Cannot read the input file ${path}: ${why}`);
    }
    return parseInput(text, `in ${path}`);
  }
  return parseInput(arg, 'argument');
}

async function run(ctx: Context): Promise<number> {
  const capability = str(ctx.parsed, 'capability');
  // With --capability the first positional is the input: the engine picks the tool.
  const [id, inputArg] = capability === undefined ? ctx.parsed.positionals : [undefined, ...ctx.parsed.positionals];
  if (!id && capability === undefined) throw new UsageError(`arium call needs a tool id (see arium tools): ${USAGE}`);
  maxPositionals(ctx.parsed, capability === undefined ? 2 : 1, `${USAGE} (quote the JSON input as one argument)`);
  const target = capability === undefined ? (id as string) : { capability };
  // Arguments are checked before the engine opens, so a usage error never touches the project.
  const timeout = int(ctx.parsed, 'timeout');
  const traceId = str(ctx.parsed, 'trace-id');
  const input = await readInput(ctx, inputArg);
  const approve = bool(ctx.parsed, 'approve');
  return withEngine(ctx, async (engine) => {
    const result = await engine.call(target, input, {
      caller: 'cli',
      ...approvalOptions(ctx, engine, approve),
      ...(traceId ? { trace_id: traceId } : {}),
      ...(timeout ? { timeout_ms: timeout } : {}),
      // Ctrl-C cancels the call (CANCELLED) so the sandbox is stopped and the engine closes cleanly.
      signal: ctx.io.interrupt(),
    });
    if (ctx.json) ctx.emit(result);
    else ctx.out(formatResult(result, ctx.c));
    return result.ok ? EXIT.ok : EXIT.toolFailed;
  });
}

/** How a command's call meets an `approvals` rule: approved beforehand (`--approve`), or asked at the terminal. */
export function approvalOptions(ctx: Context, engine: Engine, approve: boolean): Pick<CallOptions, 'approval' | 'onApproval'> {
  return approve ? { approval: { by: ctx.io.user } } : { onApproval: (pending: PendingApproval) => askApproval(ctx, engine, pending) };
}

/**
 * A call an `approvals` rule matches: a person at a terminal is asked; without one the call is denied
 * at once, saying how to approve it (`--approve`), since nobody could answer while it waited.
 */
function askApproval(ctx: Context, engine: Engine, pending: PendingApproval): void {
  const { run_id: runId } = pending;
  const ask = ctx.io.ask;
  if (ctx.io.daemon) {
    // In the daemon the call waits where every surface can answer it, as a gateway's or an MCP client's does.
    const where = ctx.projectGiven ? ` --project ${ctx.project}` : '';
    ctx.io.stderr.write(
      `arium: ${pending.tool} waits for approval (run ${runId}, until ${pending.expires_at}): answer from another terminal with ` +
        `arium approve ${runId}${where} (or arium deny ${runId}${where}); Ctrl-C cancels the call\n`,
    );
    return;
  }
  if (!ask) {
    engine.deny(runId, {
      by: 'cli',
      reason: `approval is required, and there is no terminal to ask; to approve this one call, run it again with --approve (recorded as approved by ${ctx.io.user})`,
    });
    return;
  }
  // The question ends with the approval: answered elsewhere, timed out, or the call cancelled (Ctrl-C).
  const ended = new AbortController();
  const onResolved = (event: { type: string; run_id: string }) => {
    if (event.type === 'ApprovalResolved' && event.run_id === runId) ended.abort();
  };
  engine.events.on('approval', onResolved);
  const input = JSON.stringify(pending.input) ?? '';
  const shown = input.length > 500 ? `${input.slice(0, 500)}…` : input;
  void ask(`Approve ${pending.tool} with input ${shown}? [y/N] `, ended.signal)
    .then((answer) => {
      if (answer === null) return;
      const by = ctx.io.user;
      if (/^\s*y(es)?\s*$/i.test(answer)) engine.approve(runId, { by });
      else engine.deny(runId, { by, reason: 'answered no at the terminal' });
    })
    .catch(() => {
      // Answered elsewhere first: the call ends as that answer says.
    })
    .finally(() => engine.events.off('approval', onResolved));
}

export const callSpec: CommandSpec = {
  name: 'call',
  usage: USAGE,
  summary: 'call a tool through the whole pipeline and print its result',
  details: `The input is a JSON object given
  inline        arium call fs.read '{"path":"/notes/todo.md"}'
  from a file   arium call fs.read @input.json
  from stdin    echo '{"path":"/"}' | arium call fs.list -
and {} when omitted. With --json the whole result { ok, data | error, meta } is printed.
--capability <name> instead of an id runs the one tool that provides that capability and
that the caller may call (AMBIGUOUS when several do: call one by id).
A call that an approvals rule in arium.json matches asks "Approve <tool> with input …? [y/N]"
on a terminal; without one it fails as APPROVAL_DENIED unless --approve is given. Run through
the workspace's daemon, it waits instead, to be answered by arium approve from another terminal.
Exit code 1 when the result has ok: false.`,
  flags: {
    'trace-id': { value: true, arg: '<id>', help: 'trace id carried by the result and every event of the call' },
    timeout: { value: true, arg: '<ms>', help: 'lower the call timeout (never above the tool’s own limit)' },
    capability: { value: true, arg: '<name>', help: 'call the one tool that provides this capability instead of naming an id' },
    approve: { help: 'approve this one call beforehand, if an approvals rule matches it (recorded as by your OS user name)' },
  },
  run,
};
