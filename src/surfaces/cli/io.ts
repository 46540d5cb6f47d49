import { userInfo } from 'node:os';
import { createInterface } from 'node:readline';

/** Where the CLI reads and writes: the process in real use, buffers in tests. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  /** Reads all of standard input (for `arium call <id> -`). */
  readStdin(): Promise<string>;
  env: Readonly<Record<string, string | undefined>>;
  /** Whether stdout is a terminal (colours are only for terminals). */
  isTTY: boolean;
  cwd: string;
  /**
   * A signal aborted on Ctrl-C, for commands that run until interrupted (`arium events --follow`).
   * Asking for it is what installs the handler, so every other command keeps Node's default Ctrl-C.
   */
  interrupt(): AbortSignal;
  /**
   * Asks a person a question at the terminal (on stderr, the answer read from stdin): present only when
   * both are terminals. Resolves null when `signal` aborts first (the question no longer matters).
   */
  ask?: (question: string, signal: AbortSignal) => Promise<string | null>;
  /** The OS user name, for who approved a call (`arium call --approve`). */
  user: string;
  /** The raw standard streams, for a command that speaks a protocol on them (`arium mcp`); absent in tests run in-process. */
  streams?: { stdin: NodeJS.ReadableStream & import('node:stream').Readable; stdout: import('node:stream').Writable };
  /**
   * Set when the command runs inside the workspace's daemon (forwarded by the `arium` command): its live
   * engines are lent to the command instead of opening one, and a call waiting for approval is answered
   * from another terminal (`arium approve`) rather than asked here.
   */
  daemon?: DaemonHost;
}

/** What the daemon lends a command it runs (src/surfaces/http/routes/cli.ts). */
export interface DaemonHost {
  /** The daemon's live engine of `project`, calls narrowed to `grants` when given; closing it does nothing. */
  open(project: string, grants: readonly string[] | undefined): Promise<import('../../engine.js').Engine>;
}

export const EXIT = { ok: 0, toolFailed: 1, usage: 2, engine: 3 } as const;

/** ANSI colours; every function is the identity when colour is off. */
export interface Paint {
  readonly enabled: boolean;
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
  magenta(s: string): string;
}

export function paint(enabled: boolean): Paint {
  const wrap = (open: number, close: number) => (s: string) => (enabled ? `\u001b[${open}m${s}\u001b[${close}m` : s);
  return {
    enabled,
    bold: wrap(1, 22),
    dim: wrap(2, 22),
    red: wrap(31, 39),
    green: wrap(32, 39),
    yellow: wrap(33, 39),
    cyan: wrap(36, 39),
    magenta: wrap(35, 39),
  };
}

/**
 * Colour only for people at a terminal: never with --json or --no-color, never when stdout is a pipe or
 * a file, and never when NO_COLOR is set to a non-empty value (https://no-color.org).
 */
export function wantsColour(io: CliIo, options: { json: boolean; noColor: boolean }): boolean {
  const noColorEnv = io.env.NO_COLOR !== undefined && io.env.NO_COLOR !== '';
  return io.isTTY && !options.json && !options.noColor && !noColorEnv;
}

export function processIo(): CliIo {
  let controller: AbortController | null = null;
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    streams: { stdin: process.stdin, stdout: process.stdout },
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    env: process.env,
    isTTY: process.stdout.isTTY === true,
    ...(process.stdin.isTTY === true && process.stderr.isTTY === true ? { ask: askAtTerminal } : {}),
    user: osUser(),
    cwd: process.cwd(),
    interrupt: () => {
      if (!controller) {
        const c = new AbortController();
        controller = c;
        // A second Ctrl-C while the command winds down ends the process the usual way.
        const stop = () => (c.signal.aborted ? process.exit(130) : c.abort());
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      }
      return controller.signal;
    },
  };
}

function askAtTerminal(question: string, signal: AbortSignal): Promise<string | null> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    const done = (answer: string | null) => {
      signal.removeEventListener('abort', onAbort);
      rl.close();
      resolve(answer);
    };
    const onAbort = () => {
      process.stderr.write('\n');
      done(null);
    };
    if (signal.aborted) return done(null);
    signal.addEventListener('abort', onAbort, { once: true });
    rl.question(question, (answer) => done(answer));
  });
}

/** The OS user name; `unknown` when the system has none for this uid (a container without /etc/passwd). */
export function osUser(): string {
  try {
    return userInfo().username || 'unknown';
  } catch {
    return process.env.USER || process.env.USERNAME || 'unknown';
  }
}
