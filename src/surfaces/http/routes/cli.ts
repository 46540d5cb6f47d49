import { realpathSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { type CliFrame, type CliRequest, commandLine, DAEMON_COMMANDS, FORWARDED_ENV } from '../../../daemon/thin-cli.js';
import type { CallOptions } from '../../../dispatcher.js';
import type { Engine } from '../../../engine.js';
import { EngineConfigError } from '../../../engine-options.js';
import { GrantSet, PermissionSyntaxError } from '../../../permissions.js';
import type { CliIo } from '../../cli/io.js';
import { errorEnvelope } from '../envelope.js';
import { clientName, overSocket } from '../request.js';

/**
 * `POST /v1/cli`: a command line the `arium` command forwards (src/daemon/thin-cli.ts) runs here, in the
 * daemon, by the CLI's own `main`, so its output is the CLI's by construction. The command is lent the
 * daemon's live engine of its project instead of opening one: a writing call, a snapshot, a restore, an
 * import or a gc lands in the engine the MCP clients and the inspector use, under its lock. Its output
 * streams back as NDJSON frames as it is written, and the connection closing (Ctrl-C) is its interrupt.
 * Only over the Unix socket: that is the local user's (0600 in a 0700 folder), who could run the same
 * command in their own process; over TCP the route does not exist for anyone.
 */

export interface CliHost {
  /** The daemon's workspace. */
  workspace: string;
  /** The live engine of a project, opened on first use; its errors are those createEngine throws. */
  engine(project: string): Promise<Engine>;
}

const BODY_SCHEMA = {
  type: 'object',
  required: ['argv', 'cwd', 'env', 'stdout_tty', 'stderr_tty'],
  additionalProperties: false,
  properties: {
    argv: { type: 'array', maxItems: 1000, items: { type: 'string' } },
    cwd: { type: 'string', minLength: 1, maxLength: 4096 },
    env: { type: 'object', additionalProperties: { type: 'string' } },
    stdout_tty: { type: 'boolean' },
    stderr_tty: { type: 'boolean' },
    stdin: { type: 'string', contentEncoding: 'base64' },
  },
} as const;

function real(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/**
 * The live engine as a command may hold it: its calls carry the command's caller and `--grant` (which
 * narrow the engine's grants, never widen them), and closing it does nothing: the daemon keeps it.
 */
export function lentEngine(engine: Engine, caller: string, grants: readonly string[] | undefined): Engine {
  if (grants) withinGrants(engine, grants);
  return new Proxy(engine, {
    get(target, key) {
      if (key === 'close') return async () => {};
      if (key === 'call') {
        return (id: Parameters<Engine['call']>[0], input: unknown, options: CallOptions = {}) =>
          target.call(id, input, { ...options, caller, ...(grants ? { grants } : {}) });
      }
      const value = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * In its own process `--grant` replaces the project's grants; here the engine is shared, so a grant it
 * does not hold is refused rather than dropped (a command that ran with less than it asked would fail
 * later, and further from the cause).
 */
function withinGrants(engine: Engine, grants: readonly string[]): void {
  let wider: string[];
  try {
    const held = new GrantSet(engine.grants);
    wider = grants.filter((text) => held.narrow([text]).permissions.length === 0);
  } catch (error) {
    if (error instanceof PermissionSyntaxError) throw new EngineConfigError(error.message, 'grants');
    throw error;
  }
  if (wider.length > 0) {
    throw new EngineConfigError(
      `--grant ${wider.join(', ')} goes beyond what the daemon's engine of project "${engine.project}" grants (${engine.grants.join(', ')}): ` +
        'through the daemon a command\'s grants narrow the project\'s, never widen them; widen them in its arium.json ("grants")',
      'grants',
    );
  }
}

let cliMain: Promise<typeof import('../../cli/main.js')> | null = null;

export function cliRoutes(app: FastifyInstance, host: CliHost): { running(): number } {
  const workspace = real(host.workspace);
  let running = 0;
  // stdin carries at most a call's input, which the gateway's bodyLimit bounds; base64 adds a third.
  const bodyLimit = Math.ceil((app.initialConfig.bodyLimit ?? 1 << 20) * (4 / 3)) + 64 * 1024;

  app.post(
    '/v1/cli',
    {
      bodyLimit,
      schema: { hide: true, body: BODY_SCHEMA },
      // Before the body is read: a request over TCP is refused whatever it carries.
      onRequest: async (request, reply) => {
        if (overSocket(request)) return;
        return reply.code(403).send(
          errorEnvelope('DENIED', "/v1/cli runs commands as the daemon's user: it is served over the daemon's Unix socket only", {
            stage: 'permission',
          }),
        );
      },
    },
    async (request, reply) => {
      const body = request.body as CliRequest;
      const line = commandLine(body.argv);
      const refuse = (message: string) => reply.code(400).send(errorEnvelope('INVALID_INPUT', message, { stage: 'validation' }));
      if (line.name === undefined || !DAEMON_COMMANDS.has(line.name)) {
        return refuse(
          `arium ${line.name ?? ''} runs in the calling process, never in the daemon; the daemon runs ${[...DAEMON_COMMANDS].join(', ')}`,
        );
      }
      if (line.recover)
        return refuse('--recover opens a damaged state folder in the calling process; run it with --no-daemon once the daemon is stopped');
      if (!isAbsolute(body.cwd)) return refuse(`cwd must be an absolute path (got ${JSON.stringify(body.cwd)})`);
      const asked = real(resolve(body.cwd, line.workspace));
      if (asked !== workspace) return refuse(`This daemon serves the workspace ${workspace}, not ${asked}`);
      running++;
      try {
        await run(reply, body, clientName(request, 'local'), host);
      } finally {
        running--;
      }
    },
  );
  return { running: () => running };
}

async function run(reply: FastifyReply, body: CliRequest, caller: string, host: CliHost): Promise<void> {
  cliMain ??= import('../../cli/main.js');
  const [{ main }, { osUser }] = await Promise.all([cliMain, import('../../cli/io.js')]);
  reply.hijack();
  const res = reply.raw;
  // A client that gave up waiting (thin-cli.ts ANSWER_MS) may run the command itself: never run it here too.
  if (res.destroyed || !res.socket || res.socket.destroyed) return;
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  // Sent now, before the command runs: the client knows the daemon answers, whatever the command prints when.
  res.flushHeaders();
  const send = (frame: CliFrame) => {
    if (!res.destroyed) res.write(`${JSON.stringify(frame)}\n`);
  };
  const interrupt = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) interrupt.abort();
  });
  const env: Record<string, string> = {};
  for (const name of FORWARDED_ENV) if (typeof body.env[name] === 'string') env[name] = body.env[name];
  const io: CliIo = {
    stdout: { write: (text: string) => send({ o: String(text) }) },
    stderr: { write: (text: string) => send({ e: String(text) }) },
    readStdin: async () => Buffer.from(body.stdin ?? '', 'base64').toString('utf8'),
    env,
    isTTY: body.stdout_tty,
    cwd: body.cwd,
    interrupt: () => interrupt.signal,
    user: osUser(),
    daemon: { open: async (project, grants) => lentEngine(await host.engine(project), caller, grants) },
  };
  let code: number;
  try {
    code = await main(body.argv, io);
  } catch (error) {
    // main reports every error itself; this is the daemon's own failure, and the client still gets an end.
    send({ e: `arium: the daemon failed to run the command: ${(error as Error)?.message ?? String(error)}\n` });
    code = 3;
  }
  send({ exit: code });
  res.end();
}
