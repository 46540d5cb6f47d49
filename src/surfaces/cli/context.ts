import { resolve } from 'node:path';
import { daemonPaths } from '../../daemon/paths.js';
import { DAEMON_COMMANDS, daemonAnswers } from '../../daemon/thin-cli.js';
import { createEngine, type Engine, ProjectLockedError } from '../../index.js';
import { bool, list, type Parsed, str } from './args.js';
import { type CliIo, type Paint, paint, wantsColour } from './io.js';

/** What every command gets: its parsed arguments, the io, colours, and a way to open the engine. */
export interface Context {
  parsed: Parsed;
  io: CliIo;
  json: boolean;
  c: Paint;
  /** Absolute path of the workspace folder. */
  workspace: string;
  project: string;
  /** Whether --project was given (init takes the name as an argument too). */
  projectGiven: boolean;
  /**
   * Opens the engine for the chosen project (no watcher: CLI commands are short-lived, unless `watch`).
   * A project another engine holds is opened read-only, unless `exclusive`: then that is an error.
   */
  open(how?: { watch?: boolean; exclusive?: boolean; warmUp?: boolean }): Promise<Engine>;
  out(text: string): void;
  /** Prints one JSON document (the whole --json output of a command). */
  emit(value: unknown): void;
}

/** `command`: the command's name; one the daemon runs (DAEMON_COMMANDS) is sent there when the daemon holds the project. */
export function makeContext(parsed: Parsed, io: CliIo, command?: string): Context {
  const json = bool(parsed, 'json');
  const workspace = resolve(io.cwd, str(parsed, 'workspace') ?? 'workspace');
  const project = str(parsed, 'project') ?? 'demo';
  const grants = list(parsed, 'grant');
  return {
    parsed,
    io,
    json,
    c: paint(wantsColour(io, { json, noColor: bool(parsed, 'no-color') })),
    workspace,
    project,
    projectGiven: str(parsed, 'project') !== undefined,
    open: async (how = {}) => {
      if (io.daemon) return io.daemon.open(project, grants);
      const options = {
        workspace,
        project,
        watch: how.watch === true,
        env: io.env,
        // A one-shot command gets nothing ready it will not use (see EngineOptions.warmUp).
        warmUp: how.warmUp ?? true,
        ...(grants ? { grants } : {}),
        ...(bool(parsed, 'recover') ? { recover: true } : {}),
      };
      try {
        return await createEngine(options);
      } catch (error) {
        if (!(error instanceof ProjectLockedError) || options.recover || how.exclusive) throw error;
        // The workspace's daemon holds it: a command it runs belongs there, where it can change the project too.
        const { socket } = daemonPaths(workspace, io.env);
        const daemonHolds = await daemonAnswers(socket);
        if (daemonHolds && command !== undefined && DAEMON_COMMANDS.has(command)) {
          throw new ProjectLockedError(
            `Project "${project}" is held by the workspace's daemon${error.holder ? ` (pid ${error.holder})` : ''}, which answers on ${socket}: ` +
              'run the command as `arium …` without --no-daemon (and without ARIUM_NO_DAEMON=1) and it runs in the daemon, on the live project',
            error.holder,
          );
        }
        // A holder that takes no commands, or a command the daemon does not run (doctor): inspect what it made durable, without its lock.
        const engine = await createEngine({ ...options, readOnly: true });
        const holder = engine.readOnly?.holder;
        const who = daemonHolds ? "the workspace's daemon" : 'another engine';
        const answers = daemonHolds ? '' : ", which does not answer on the workspace's daemon socket";
        io.stderr.write(
          `arium: project "${project}" is held by ${who}${holder ? ` (pid ${holder})` : ''}${answers}: showing what it has made durable, read-only; changes are refused\n`,
        );
        return engine;
      }
    },
    out: (text) => io.stdout.write(`${text}\n`),
    emit: (value) => io.stdout.write(`${JSON.stringify(value, null, 2)}\n`),
  };
}

/**
 * Runs `fn` with an open engine and always closes it. The engine is not warmed up (no code checks, no
 * runner started ahead): a one-shot command starts only what its call uses.
 */
export async function withEngine<T>(ctx: Context, fn: (engine: Engine) => Promise<T> | T, how: { warmUp?: boolean } = {}): Promise<T> {
  const engine = await ctx.open({ warmUp: how.warmUp ?? false });
  try {
    return await fn(engine);
  } finally {
    await engine.close();
  }
}
