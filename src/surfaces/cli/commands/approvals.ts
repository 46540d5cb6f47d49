import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { PendingApproval } from '../../../approvals/gate.js';
import type { Engine } from '../../../engine.js';
import { ToolFailure } from '../../../errors.js';
import { errorEnvelope } from '../../http/envelope.js';
import { maxPositionals, str, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { clip } from '../format.js';
import { EXIT } from '../io.js';
import { defaultAddrFile } from './serve.js';

/**
 * `arium approvals`, `arium approve`, `arium deny`: the approvals of a running `arium serve`, through
 * its HTTP routes. A waiting call lives in the engine that serves it, so these ask that engine rather
 * than open the project themselves (which another engine holds anyway).
 */

const FLAGS = {
  addr: { value: true, arg: '<url>', help: 'the gateway (default: the address `arium serve` wrote to its address file)' },
  'addr-file': { value: true, arg: '<path>', help: 'the address file to read (default as `arium serve` writes it)' },
} as const;

/** The gateway's base URL for the chosen project: `--addr`, or the address file of `arium serve`. */
function gatewayUrl(ctx: Context): string {
  let base = str(ctx.parsed, 'addr');
  if (!base) {
    const file = resolve(ctx.io.cwd, str(ctx.parsed, 'addr-file') ?? defaultAddrFile(ctx.io.env, ctx.workspace));
    try {
      base = readFileSync(file, 'utf8').trim();
    } catch {
      throw new HostError(`No running \`arium serve\` found: cannot read its address file ${file}; start one, or give --addr http://host:port`);
    }
  }
  if (!/^https?:\/\//.test(base)) throw new UsageError(`--addr must be an http(s) URL such as http://127.0.0.1:8080 (got ${JSON.stringify(base)})`);
  return `${base.replace(/\/+$/, '')}/p/${encodeURIComponent(ctx.project)}/v1/approvals`;
}

/**
 * In the workspace's daemon (and no --addr, --addr-file naming another gateway) the waiting calls are in
 * the engine lent to the command: asked there, answered as the gateway's route answers.
 */
function inDaemon(ctx: Context): boolean {
  return ctx.io.daemon !== undefined && str(ctx.parsed, 'addr') === undefined && str(ctx.parsed, 'addr-file') === undefined;
}

async function fromEngine(ctx: Context, ask: (engine: Engine) => unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const engine = await ctx.open();
  try {
    return { status: 200, json: ask(engine) as Record<string, unknown> };
  } catch (error) {
    if (!(error instanceof ToolFailure)) throw error;
    const details = error.details ? { details: error.details } : {};
    return { status: 400, json: errorEnvelope(error.code, error.message, { stage: error.stage, ...details }) as unknown as Record<string, unknown> };
  }
}

async function request(ctx: Context, url: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const key = ctx.io.env.ARIUM_API_KEY;
  let res: Response;
  try {
    res = await fetch(url, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch (error) {
    throw new HostError(`Could not reach the gateway at ${url}: ${(error as Error).message} (is \`arium serve\` running?)`);
  }
  let json: Record<string, unknown>;
  try {
    json = (await res.json()) as Record<string, unknown>;
  } catch {
    throw new HostError(`The gateway at ${url} answered ${res.status} with a body that is not JSON`);
  }
  return { status: res.status, json };
}

/** A refusal from the gateway: its error, as a failed call's would be shown; exit 1. */
function refused(ctx: Context, name: string, json: Record<string, unknown>): number {
  const error = (json.error ?? {}) as { code?: string; message?: string };
  if (ctx.json) ctx.emit(json);
  ctx.io.stderr.write(`arium ${name}: ${ctx.c.red(error.code ?? 'ERROR')} ${error.message ?? JSON.stringify(json)}\n`);
  return EXIT.toolFailed;
}

async function list(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, approvalsSpec.usage);
  const { status, json } = inDaemon(ctx)
    ? await fromEngine(ctx, (engine) => ({ approvals: engine.approvals() }))
    : await request(ctx, gatewayUrl(ctx));
  if (status !== 200) return refused(ctx, 'approvals', json);
  const pending = (json.approvals ?? []) as PendingApproval[];
  if (ctx.json) {
    ctx.emit(json);
  } else if (pending.length === 0) {
    ctx.out('No calls wait for approval.');
  } else {
    for (const p of pending) {
      ctx.out(
        `${ctx.c.bold(p.run_id)} ${p.tool}${p.caller ? ctx.c.dim(` asked by ${p.caller}`) : ''} ${ctx.c.dim(`until ${p.expires_at}`)}\n  ${clip(JSON.stringify(p.input) ?? '', 200)}`,
      );
    }
  }
  return EXIT.ok;
}

async function answer(ctx: Context, decision: 'approve' | 'deny'): Promise<number> {
  const spec = decision === 'approve' ? approveSpec : denySpec;
  const [runId] = ctx.parsed.positionals;
  if (!runId) throw new UsageError(`arium ${decision} needs the run id of a waiting call (see arium approvals): ${spec.usage}`);
  maxPositionals(ctx.parsed, 1, spec.usage);
  const reason = str(ctx.parsed, 'reason');
  const by = str(ctx.parsed, 'by') ?? ctx.io.user;
  const answer = { by, ...(reason !== undefined ? { reason } : {}) };
  const { status, json } = inDaemon(ctx)
    ? await fromEngine(ctx, (engine) => (decision === 'approve' ? engine.approve(runId, answer) : engine.deny(runId, answer)))
    : await request(ctx, `${gatewayUrl(ctx)}/${encodeURIComponent(runId)}`, { decision, ...answer });
  if (status !== 200) return refused(ctx, decision, json);
  if (ctx.json) ctx.emit(json);
  else ctx.out(`${decision === 'approve' ? ctx.c.green('approved') : ctx.c.red('denied')} ${String(json.tool)} run ${runId} (by ${by})`);
  return EXIT.ok;
}

const GATEWAY_HELP = `Talks to a running \`arium serve\` (its address file, or --addr), for the project given by --project;
sends ARIUM_API_KEY as the key when it is set. Run through the workspace's daemon (without --addr),
it answers the daemon's own waiting calls.`;

export const approvalsSpec: CommandSpec = {
  name: 'approvals',
  usage: 'arium approvals [--addr <url>]',
  summary: 'list the calls waiting for approval on a running arium serve',
  details: GATEWAY_HELP,
  flags: FLAGS,
  run: list,
};

export const approveSpec: CommandSpec = {
  name: 'approve',
  usage: 'arium approve <run_id> [--by <name>] [--addr <url>]',
  summary: 'let a call waiting for approval on a running arium serve run',
  details: `${GATEWAY_HELP}\nThe answer is recorded as by --by, default your OS user name.`,
  flags: { ...FLAGS, by: { value: true, arg: '<name>', help: 'who approves (default: your OS user name)' } },
  run: (ctx) => answer(ctx, 'approve'),
};

export const denySpec: CommandSpec = {
  name: 'deny',
  usage: 'arium deny <run_id> [--reason <text>] [--by <name>] [--addr <url>]',
  summary: 'end a call waiting for approval on a running arium serve as APPROVAL_DENIED',
  details: `${GATEWAY_HELP}\nThe answer is recorded as by --by, default your OS user name; the reason is shown in the call's error.`,
  flags: {
    ...FLAGS,
    reason: { value: true, arg: '<text>', help: 'why (shown in the denied call’s error)' },
    by: { value: true, arg: '<name>', help: 'who denies (default: your OS user name)' },
  },
  run: (ctx) => answer(ctx, 'deny'),
};
