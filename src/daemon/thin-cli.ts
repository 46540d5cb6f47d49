/**
 * The `arium` command's way through the workspace's daemon: when one answers on the workspace's socket,
 * a command that works on a project's engine is sent there whole (its command line, working folder and
 * a few settings) and runs in the daemon, on the live engine every other client of the project uses;
 * its output comes back as it is written. `bin/arium.js` runs this before loading anything else of
 * Arium, so it imports Node's built-ins and `paths.ts` only: a forwarded command starts in the time
 * Node itself takes. The wire format is written down once, here; the daemon's side is
 * src/surfaces/http/routes/cli.ts.
 */
import { type IncomingMessage, request } from 'node:http';
import { createConnection, type Socket } from 'node:net';
import { resolve } from 'node:path';
import { daemonPaths } from './paths.js';

/** The commands that run in the daemon: those that open a project's engine. Every other runs in the calling process. */
export const DAEMON_COMMANDS: ReadonlySet<string> = new Set([
  'tools',
  'call',
  'schema',
  'events',
  'approvals',
  'approve',
  'deny',
  'snapshot',
  'log',
  'diff',
  'restore',
  'gc',
  'import',
  'export',
]);

/** The client's environment variables the command sees in the daemon (colours, and the key `--addr` sends). */
export const FORWARDED_ENV: readonly string[] = ['NO_COLOR', 'FORCE_COLOR', 'TERM', 'COLUMNS', 'ARIUM_API_KEY'];

/**
 * How long a daemon has to start answering a command (the daemon sends its answer's headers before it
 * runs the command). Past it, the process holding the socket is taken as stuck. A busy daemon answers in
 * milliseconds (bench/daemon-cli.ts); this leaves room for one loading the CLI on a loaded machine.
 */
export const ANSWER_MS = 5000;

/** Global options that take a value, so the argument after one is not the command (args.ts GLOBAL_FLAGS). */
const VALUE_OPTIONS: ReadonlySet<string> = new Set(['workspace', 'project', 'grant']);

/** `POST /v1/cli`: one command line to run in the daemon. */
export interface CliRequest {
  argv: string[];
  /** The client's working folder: relative paths (`--workspace`, `@file`, import and export folders) are its. */
  cwd: string;
  env: Record<string, string>;
  stdout_tty: boolean;
  stderr_tty: boolean;
  /** Standard input, base64, when the command reads it (`arium call <id> -`). */
  stdin?: string;
}

/** One line of the answer (NDJSON): text for stdout, text for stderr, or the exit code, which ends it. */
export type CliFrame = { o: string } | { e: string } | { exit: number };

/** What the command line says about where it runs; the rest is the command's to parse. */
export interface CommandLine {
  /** The command, or undefined when there is none (`arium`, `arium --help`). */
  name: string | undefined;
  /** `--workspace`, as given (relative to the working folder), else `workspace`. */
  workspace: string;
  /** `--no-daemon` was given. */
  noDaemon: boolean;
  /** `--recover` was given: the state folder is opened by this process, never a daemon's. */
  recover: boolean;
  /** A `-` argument: the input is read from standard input. */
  readsStdin: boolean;
}

/** Reads a command line as main() does (global options may come before the command), options only until `--`. */
export function commandLine(argv: readonly string[]): CommandLine {
  const line: CommandLine = { name: undefined, workspace: 'workspace', noDaemon: false, recover: false, readsStdin: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--') {
      line.readsStdin ||= argv.slice(i + 1).includes('-');
      break;
    }
    if (arg === '-') line.readsStdin = true;
    if (!arg.startsWith('--')) {
      if (line.name === undefined && arg !== '-h' && arg !== '-') line.name = arg;
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = arg.slice(2, eq === -1 ? undefined : eq);
    if (flag === 'no-daemon') line.noDaemon = true;
    if (flag === 'recover') line.recover = true;
    if (!VALUE_OPTIONS.has(flag)) continue;
    const value = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (flag === 'workspace' && value !== undefined) line.workspace = value;
  }
  return line;
}

export interface ThinIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  stdin: NodeJS.ReadableStream;
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
  stdoutTty: boolean;
  stderrTty: boolean;
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/**
 * Runs the command in the workspace's daemon and returns its exit code; null when it is not for a
 * daemon (a local command, `--no-daemon`, `ARIUM_NO_DAEMON=1`, `--recover`) or none answers (no socket
 * file, or one nobody listens on): the caller then runs it in its own process. Never starts a daemon.
 */
export async function tryDaemon(argv: readonly string[], io: ThinIo): Promise<number | null> {
  const line = commandLine(argv);
  if (line.name === undefined || !DAEMON_COMMANDS.has(line.name) || line.noDaemon || line.recover) return null;
  if (io.env.ARIUM_NO_DAEMON === '1') return null;
  const { socket } = daemonPaths(resolve(io.cwd, line.workspace), io.env);
  const env: Record<string, string> = {};
  for (const name of FORWARDED_ENV) {
    const value = io.env[name];
    if (value !== undefined) env[name] = value;
  }
  const body: CliRequest = { argv: [...argv], cwd: io.cwd, env, stdout_tty: io.stdoutTty, stderr_tty: io.stderrTty };
  // Connected first: standard input, once read, could not be handed back to a command run here instead.
  const connection = await connect(socket);
  if (!connection) return null;
  const readsStdin = line.readsStdin && line.name === 'call';
  if (readsStdin) body.stdin = (await readAll(io.stdin)).toString('base64');
  const code = await forward(socket, connection, Buffer.from(JSON.stringify(body)), io);
  if (code !== null) return code;
  // A process holds the socket but does not answer (stopped, or stuck): the command runs here, where a
  // project it holds is shown read-only; unless its input is gone with the request.
  io.stderr.write(
    `arium: the daemon on ${socket} did not answer within ${ANSWER_MS / 1000} s; ${readsStdin ? 'giving up' : 'running the command here'}\n`,
  );
  return readsStdin ? 3 : null;
}

/** A connection to the daemon's socket, or null when nobody listens there (no file, or a dead daemon's). */
function connect(socket: string): Promise<Socket | null> {
  return new Promise((settle) => {
    const connection = createConnection(socket);
    connection.once('connect', () => {
      connection.removeAllListeners('error');
      settle(connection);
    });
    connection.once('error', () => settle(null));
  });
}

/**
 * Sends the command and passes its output on. Ctrl-C needs no handler here: it ends this process, the
 * connection closes with it, and that is the command's interrupt in the daemon.
 */
function forward(socket: string, connection: Socket, body: Buffer, io: ThinIo): Promise<number | null> {
  return new Promise((resolve) => {
    let answered = false;
    let timedOut = false;
    const silent = setTimeout(() => {
      timedOut = true;
      req.destroy();
      resolve(null);
    }, ANSWER_MS);
    const req = request(
      {
        createConnection: () => connection,
        method: 'POST',
        path: '/v1/cli',
        headers: { host: 'localhost', 'content-type': 'application/json', 'content-length': body.length, 'x-arium-client': 'cli' },
      },
      (res) => {
        answered = true;
        clearTimeout(silent);
        (res.statusCode === 200 ? frames(res, io) : refused(res, socket, io)).then(resolve);
      },
    );
    req.on('error', (error) => {
      // After an answer its end says what happened; after the timeout the caller does.
      if (answered || timedOut) return;
      clearTimeout(silent);
      io.stderr.write(`arium: the daemon on ${socket} stopped answering: ${error.message}\n`);
      resolve(3);
    });
    req.end(body);
  });
}

/** Passes each frame on as it arrives; the exit code ends the command. */
function frames(res: IncomingMessage, io: ThinIo): Promise<number> {
  return new Promise((settle) => {
    let pending = '';
    let exit: number | null = null;
    const take = (text: string) => {
      let frame: Partial<{ o: string; e: string; exit: number }>;
      try {
        frame = JSON.parse(text);
      } catch {
        io.stderr.write(`arium: the daemon sent a line that is not a frame: ${text.slice(0, 200)}\n`);
        return;
      }
      if (typeof frame.o === 'string' && !io.stdout.write(frame.o)) {
        // A slow reader of our stdout slows the daemon's writes down, not our memory up.
        res.pause();
        io.stdout.once('drain', () => res.resume());
      }
      if (typeof frame.e === 'string') io.stderr.write(frame.e);
      if (typeof frame.exit === 'number') exit = frame.exit;
    };
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      pending += chunk;
      let at = pending.indexOf('\n');
      while (at !== -1) {
        take(pending.slice(0, at));
        pending = pending.slice(at + 1);
        at = pending.indexOf('\n');
      }
    });
    res.on('close', () => {
      if (exit === null) io.stderr.write('arium: the daemon ended the command before it finished (see its log)\n');
      settle(exit ?? 3);
    });
  });
}

/** The daemon would not run the command (a local one, another workspace, a request over TCP): its error, exit 3. */
async function refused(res: IncomingMessage, socket: string, io: ThinIo): Promise<number> {
  const text = (await readAll(res)).toString('utf8');
  let message = text;
  try {
    message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? text;
  } catch {}
  io.stderr.write(`arium: the daemon on ${socket} refused the command (${res.statusCode}): ${message}\n`);
  return 3;
}

/** Whether a daemon answers on `socket` (its /healthz), within `timeoutMs`. */
export function daemonAnswers(socket: string, timeoutMs = 1000): Promise<boolean> {
  return new Promise((settle) => {
    const req = request({ socketPath: socket, path: '/healthz', agent: false, headers: { host: 'localhost' }, timeout: timeoutMs }, (res) => {
      res.resume();
      settle(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => settle(false));
    req.end();
  });
}
