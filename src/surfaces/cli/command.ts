import { type FlagSpecs, GLOBAL_FLAGS } from './args.js';
import type { Context } from './context.js';

/** The host refused something the CLI itself does (a folder it cannot create, a file it cannot read): exit 3. */
export class HostError extends Error {
  override readonly name = 'HostError';
}

/** One `arium <name>` command: what it accepts, how it is described, and what it does. */
export interface CommandSpec {
  name: string;
  /** The synopsis after `usage:`, e.g. `arium call <id> [json | @file | -]`. */
  usage: string;
  /** One line for the command list of `arium --help`. */
  summary: string;
  /** More for `arium <name> --help`: arguments, behaviour, examples. */
  details?: string;
  flags: FlagSpecs;
  /** Returns the exit code; throws UsageError, ToolFailure or engine errors, which main turns into codes. */
  run(ctx: Context): Promise<number>;
}

export const EXIT_CODES_HELP = `Exit codes:
  0  success
  1  the tool call failed (the result has ok: false; also a refused snapshot, restore or export)
  2  usage error (unknown command or option, bad argument, bad JSON input)
  3  engine or configuration error (missing project, bad arium.json, bad grant, locked or damaged state)`;

export function flagsHelp(flags: FlagSpecs): string {
  const rows = Object.entries(flags).map(([name, f]) => [`--${name}${f.value ? ` ${f.arg ?? '<value>'}` : ''}`, f.help]);
  const width = Math.max(...rows.map(([left]) => (left as string).length));
  return rows.map(([left, help]) => `  ${(left as string).padEnd(width)}  ${help}`).join('\n');
}

export function commandHelp(command: CommandSpec): string {
  const parts = [`usage: ${command.usage}`, command.summary];
  if (command.details) parts.push(command.details);
  if (Object.keys(command.flags).length > 0) parts.push(`Options:\n${flagsHelp(command.flags)}`);
  parts.push(`Global options:\n${flagsHelp(GLOBAL_FLAGS)}`, EXIT_CODES_HELP);
  return `${parts.join('\n\n')}\n`;
}
