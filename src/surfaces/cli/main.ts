import { EngineConfigError, ProjectLockedError, StateCorruptError, ToolFailure } from '../../index.js';
import { PackError } from '../../packs/errors.js';
import { bool, closest, GLOBAL_FLAGS, type Parsed, parseArgs, UsageError } from './args.js';
import { type CommandSpec, commandHelp, EXIT_CODES_HELP, flagsHelp, HostError } from './command.js';
import { approvalsSpec, approveSpec, denySpec } from './commands/approvals.js';
import { callSpec } from './commands/call.js';
import { daemonSpec } from './commands/daemon.js';
import { demoSpec } from './commands/demo.js';
import { doctorSpec } from './commands/doctor.js';
import { eventsSpec } from './commands/events.js';
import { diffSpec, gcSpec, logSpec, restoreSpec, snapshotSpec } from './commands/history.js';
import { initSpec } from './commands/init.js';
import { installSpec } from './commands/install.js';
import { mcpSpec } from './commands/mcp.js';
import { mcpConfigSpec } from './commands/mcp-config.js';
import { addSpec, packSpec, packsSpec, removeSpec, updateSpec } from './commands/packs.js';
import { provideSpec } from './commands/provide.js';
import { schemaSpec } from './commands/schema.js';
import { serveSpec } from './commands/serve.js';
import { toolsSpec } from './commands/tools.js';
import { exportSpec, importSpec } from './commands/transfer.js';
import { workerSpec } from './commands/worker.js';
import { workersSpec } from './commands/workers.js';
import { type Context, makeContext } from './context.js';
import { type CliIo, EXIT } from './io.js';

const COMMANDS: ReadonlyMap<string, CommandSpec> = new Map(
  [
    toolsSpec,
    callSpec,
    initSpec,
    installSpec,
    doctorSpec,
    demoSpec,
    eventsSpec,
    mcpSpec,
    mcpConfigSpec,
    serveSpec,
    daemonSpec,
    approvalsSpec,
    approveSpec,
    denySpec,
    schemaSpec,
    snapshotSpec,
    logSpec,
    diffSpec,
    restoreSpec,
    gcSpec,
    importSpec,
    exportSpec,
    workerSpec,
    workersSpec,
    provideSpec,
    addSpec,
    removeSpec,
    packsSpec,
    updateSpec,
    packSpec,
  ].map((c) => [c.name, c]),
);

function help(): string {
  const rows = [...COMMANDS.values()].map((c) => `  ${c.name.padEnd(9)} ${c.summary}`);
  return `arium — a sandboxed, multi-language tool engine for AI agents

Usage: arium <command> [arguments] [options]

Commands:
${rows.join('\n')}

Global options:
${flagsHelp(GLOBAL_FLAGS)}

${EXIT_CODES_HELP}

arium <command> --help shows a command's arguments and options.
`;
}

/**
 * Runs the CLI: parses `argv` (without node and the script), runs the command, and returns the exit
 * code. Never calls process.exit and never throws, so tests run it in-process with a fake io.
 */
export async function main(argv: readonly string[], io: CliIo): Promise<number> {
  let split: { name: string | undefined; rest: string[] };
  try {
    split = commandFirst(argv);
  } catch (error) {
    return usageError(io, argv.includes('--json'), `arium: ${(error as Error).message} (see arium --help)`);
  }
  const { name, rest } = split;
  if (name === undefined || name === 'help' || ((rest.includes('--help') || rest.includes('-h')) && !COMMANDS.has(name))) {
    io.stdout.write(help());
    // Bare `arium` is a usage error that helps; asking for help is not an error.
    return name === undefined && !rest.includes('--help') && !rest.includes('-h') ? EXIT.usage : EXIT.ok;
  }
  const json = rest.includes('--json');
  const command = COMMANDS.get(name);
  if (!command) {
    const near = closest(name, [...COMMANDS.keys()]);
    const hint = near ? `did you mean "${near}"? ` : '';
    return usageError(io, json, `arium: unknown command "${name}"; ${hint}commands: ${[...COMMANDS.keys()].join(', ')} (see arium --help)`);
  }
  let parsed: Parsed;
  try {
    parsed = parseArgs(rest, command.flags);
  } catch (error) {
    return usageError(io, json, `arium ${name}: ${(error as Error).message}\nusage: ${command.usage}`);
  }
  if (bool(parsed, 'help')) {
    io.stdout.write(commandHelp(command));
    return EXIT.ok;
  }
  const ctx = makeContext(parsed, io, name);
  try {
    return await command.run(ctx);
  } catch (error) {
    return report(ctx, command, error);
  }
}

/**
 * Finds the command among the arguments: global options may come before it (`arium --project x
 * tools`), and are handed on after it, where every command's parser takes them. Only global options
 * may come first; a value option takes the next argument as its value.
 */
function commandFirst(argv: readonly string[]): { name: string | undefined; rest: string[] } {
  const before: string[] = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '-h') {
      before.push(arg);
      continue;
    }
    if (!arg.startsWith('--') || arg === '--') break;
    const eq = arg.indexOf('=');
    const flag = arg.slice(2, eq === -1 ? undefined : eq);
    const spec = Object.hasOwn(GLOBAL_FLAGS, flag) ? GLOBAL_FLAGS[flag] : undefined;
    if (!spec) {
      const near = closest(flag, Object.keys(GLOBAL_FLAGS));
      throw new UsageError(
        `unknown option --${flag} before the command; ${near ? `did you mean --${near}? ` : ''}only global options (${Object.keys(GLOBAL_FLAGS)
          .map((k) => `--${k}`)
          .join(', ')}) may come before it`,
      );
    }
    before.push(arg);
    if (spec.value && eq === -1) {
      const value = argv[i + 1];
      if (value === undefined) throw new UsageError(`option --${flag} needs a value: --${flag} ${spec.arg ?? '<value>'}`);
      before.push(value);
      i++;
    }
  }
  const name = argv[i];
  return { name, rest: [...argv.slice(i + 1), ...before] };
}

/** With --json even a failure prints one JSON document on stdout; the message also goes to stderr for people. */
function usageError(io: CliIo, json: boolean, message: string): number {
  io.stderr.write(`${message}\n`);
  if (json) io.stdout.write(`${JSON.stringify({ ok: false, error: { code: 'USAGE', message } }, null, 2)}\n`);
  return EXIT.usage;
}

function report(ctx: Context, command: CommandSpec, error: unknown): number {
  const message = describe(error);
  if (error instanceof UsageError) return usageError(ctx.io, ctx.json, `arium ${command.name}: ${message}\nusage: ${command.usage}`);
  if (error instanceof ToolFailure) {
    // A refused snapshot, restore or export: the same shape as a failed result's error.
    if (ctx.json) ctx.emit({ ok: false, error: { code: error.code, stage: error.stage, message, details: error.details ?? {} } });
    ctx.io.stderr.write(`arium ${command.name}: ${ctx.c.red(error.code)} ${message}\n`);
    return EXIT.toolFailed;
  }
  const known =
    error instanceof EngineConfigError ||
    error instanceof StateCorruptError ||
    error instanceof ProjectLockedError ||
    error instanceof HostError ||
    error instanceof PackError;
  const code = known ? (error as Error).name : 'INTERNAL';
  if (ctx.json)
    ctx.emit({
      ok: false,
      error: {
        code,
        message,
        ...(error instanceof EngineConfigError && error.field ? { field: error.field } : {}),
        ...(error instanceof PackError ? { reason: error.code } : {}),
      },
    });
  // An unexpected error is a bug in arium: its stack is what a bug report needs.
  const detail = known ? message : `internal error: ${message}\n${ctx.c.dim(String((error as Error)?.stack ?? ''))}`;
  ctx.io.stderr.write(`arium ${command.name}: ${detail}\n`);
  return EXIT.engine;
}

/** Text for anything thrown, even a value whose message cannot be read. */
function describe(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return 'an error that cannot be printed';
  }
}
