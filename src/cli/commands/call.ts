import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { int, str, UsageError } from '../args.js';
import { type Context, withEngine } from '../context.js';
import { formatResult } from '../format.js';
import { EXIT } from '../io.js';

export const CALL_FLAGS = { 'trace-id': { value: true }, timeout: { value: true } } as const;

function parseInput(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`The input ${where} is not valid JSON: ${(error as Error).message}`);
  }
}

async function readInput(ctx: Context, arg: string | undefined): Promise<unknown> {
  if (arg === undefined) return {};
  if (arg === '-') return parseInput(await ctx.io.readStdin(), 'from stdin');
  if (arg.startsWith('@')) {
    const path = resolve(ctx.io.cwd, arg.slice(1));
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      throw new UsageError(`Cannot read the input file ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    return parseInput(text, `in ${path}`);
  }
  return parseInput(arg, 'argument');
}

export async function callCommand(ctx: Context): Promise<number> {
  const [id, inputArg, ...extra] = ctx.parsed.positionals;
  if (!id) throw new UsageError('arium call needs a tool id: arium call <id> [json | @file | -]');
  if (extra.length > 0) throw new UsageError(`Unexpected arguments: ${extra.join(' ')} (quote the JSON input as one argument)`);
  const input = await readInput(ctx, inputArg);
  const timeout = int(ctx.parsed, 'timeout');
  const traceId = str(ctx.parsed, 'trace-id');
  return withEngine(ctx, async (engine) => {
    const result = await engine.call(id, input, {
      caller: 'cli',
      ...(traceId ? { trace_id: traceId } : {}),
      ...(timeout ? { timeout_ms: timeout } : {}),
    });
    if (ctx.json) ctx.emit(result);
    else ctx.out(formatResult(result, ctx.c));
    return result.ok ? EXIT.ok : EXIT.toolFailed;
  });
}
