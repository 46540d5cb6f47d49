import { EngineConfigError, ProjectLockedError, StateCorruptError, ToolFailure } from '../index.js';
import { bool, type FlagSpec, type Parsed, parseArgs, UsageError } from './args.js';
import { CALL_FLAGS, callCommand } from './commands/call.js';
import { demoCommand } from './commands/demo.js';
import { doctorCommand } from './commands/doctor.js';
import {
  DIFF_FLAGS,
  diffCommand,
  EXPORT_FLAGS,
  exportCommand,
  gcCommand,
  importCommand,
  LOG_FLAGS,
  logCommand,
  restoreCommand,
  SNAPSHOT_FLAGS,
  snapshotCommand,
} from './commands/history.js';
import { INIT_FLAGS, initCommand } from './commands/init.js';
import { schemaCommand } from './commands/schema.js';
import { toolsCommand } from './commands/tools.js';
import { type Context, makeContext } from './context.js';
import { type CliIo, EXIT } from './io.js';

interface Command {
  run: (ctx: Context) => Promise<number>;
  flags: Readonly<Record<string, FlagSpec>>;
  usage: string;
  summary: string;
}

const COMMANDS: ReadonlyMap<string, Command> = new Map<string, Command>([
  ['tools', { run: toolsCommand, flags: {}, usage: 'arium tools', summary: 'list the tools and the definition files that did not load' }],
  [
    'call',
    { run: callCommand, flags: CALL_FLAGS, usage: 'arium call <id> [json | @file | -] [--trace-id ID] [--timeout MS]', summary: 'call a tool' },
  ],
  ['init', { run: initCommand, flags: INIT_FLAGS, usage: 'arium init [project] [--force]', summary: 'create a project with example tools' }],
  [
    'doctor',
    { run: doctorCommand, flags: {}, usage: 'arium doctor', summary: 'what this machine offers: Node, isolated-vm, Python, bubblewrap, namespaces' },
  ],
  ['schema', { run: schemaCommand, flags: {}, usage: 'arium schema', summary: 'print the JSON Schema of tool definitions' }],
  ['demo', { run: demoCommand, flags: {}, usage: 'arium demo', summary: 'a scripted session on the demo project, with its events' }],
  [
    'snapshot',
    { run: snapshotCommand, flags: SNAPSHOT_FLAGS, usage: 'arium snapshot [--label L] [--message M]', summary: 'save the VFS as a snapshot' },
  ],
  ['log', { run: logCommand, flags: LOG_FLAGS, usage: 'arium log [--limit N]', summary: 'list snapshots, newest first' }],
  [
    'diff',
    {
      run: diffCommand,
      flags: DIFF_FLAGS,
      usage: 'arium diff [from] [to] [--stat] [--path GLOB]',
      summary: 'compare snapshots or live (default: newest snapshot → live)',
    },
  ],
  ['restore', { run: restoreCommand, flags: {}, usage: 'arium restore <snapshot>', summary: 'bring the VFS back to a snapshot (undoable)' }],
  ['gc', { run: gcCommand, flags: {}, usage: 'arium gc', summary: 'delete stored objects no snapshot needs' }],
  ['import', { run: importCommand, flags: {}, usage: 'arium import <host-dir> [vfs-path]', summary: 'copy a host folder into the VFS' }],
  [
    'export',
    { run: exportCommand, flags: EXPORT_FLAGS, usage: 'arium export <vfs-path> <host-dir> [--overwrite]', summary: 'copy a VFS folder to the host' },
  ],
]);

const GLOBAL_HELP = `Global options:
  --workspace <dir>   folder holding the projects (default ./workspace)
  --project <name>    project folder in the workspace (default demo)
  --grant <perm>      grant a permission (repeatable; replaces the default grants)
  --json              machine-readable output: exactly one JSON document on stdout
  --no-color          no colours (also NO_COLOR, or when stdout is not a terminal)
  --recover           open a damaged state folder, keeping what is intact

Exit codes: 0 success, 1 the tool call failed, 2 usage error, 3 engine or configuration error.`;

function help(): string {
  const rows = [...COMMANDS].map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return `arium — a sandboxed, multi-language tool engine for AI agents\n\nUsage: arium <command> [options]\n\nCommands:\n${rows.join('\n')}\n\n${GLOBAL_HELP}\n\nSee arium <command> --help.`;
}

/** Runs the CLI. Never calls process.exit and never throws: it returns the exit code. */
export async function main(argv: readonly string[], io: CliIo): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.stdout.write(`${help()}\n`);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  const command = COMMANDS.get(name);
  if (!command) {
    io.stderr.write(`arium: unknown command "${name}". Commands: ${[...COMMANDS.keys()].join(', ')} (arium --help)\n`);
    return EXIT.usage;
  }
  let parsed: Parsed;
  try {
    parsed = parseArgs(rest, command.flags);
  } catch (error) {
    io.stderr.write(`arium ${name}: ${(error as Error).message}\nusage: ${command.usage}\n`);
    return EXIT.usage;
  }
  if (bool(parsed, 'help')) {
    io.stdout.write(`usage: ${command.usage}\n\n${command.summary}\n\n${GLOBAL_HELP}\n`);
    return EXIT.ok;
  }
  const ctx = makeContext(parsed, io);
  try {
    return await command.run(ctx);
  } catch (error) {
    return report(ctx, name, error);
  }
}

function report(ctx: Context, name: string, error: unknown): number {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof UsageError) {
    ctx.io.stderr.write(`arium ${name}: ${message}\nusage: ${COMMANDS.get(name)?.usage}\n`);
    return EXIT.usage;
  }
  if (error instanceof ToolFailure) {
    if (ctx.json) ctx.emit({ ok: false, error: { code: error.code, stage: error.stage, message, details: error.details ?? {} } });
    else ctx.io.stderr.write(`arium ${name}: ${ctx.c.red(error.code)} ${message}\n`);
    return EXIT.toolFailed;
  }
  const known = error instanceof EngineConfigError || error instanceof StateCorruptError || error instanceof ProjectLockedError;
  if (ctx.json) ctx.emit({ ok: false, error: { code: known ? (error as Error).name : 'INTERNAL', message } });
  else ctx.io.stderr.write(`arium ${name}: ${known ? '' : 'internal error: '}${message}\n`);
  return EXIT.engine;
}
