import { readFileSync } from 'node:fs';
import { DaemonError, type DaemonLink, ensureDaemon, findDaemon } from '../../../daemon/link.js';
import { daemonPaths } from '../../../daemon/paths.js';
import { lockHolder } from '../../../store/lock.js';
import { maxPositionals, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';
import { httpOptions, idleOption, serveDaemon } from './serve.js';

/** A daemon started by a client stops after this long unused, unless `--idle` says otherwise. */
const STARTED_IDLE_MS = 600_000;
/** How long `arium daemon stop` waits for the daemon to go after SIGTERM (it closes its engines first). */
const STOP_WAIT_MS = 30_000;

const ACTIONS = ['run', 'start', 'status', 'stop'] as const;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** DaemonError (another user's folder, another protocol, no answer) is the host's refusal: exit 3 with its message. */
async function host<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof DaemonError) throw new HostError(error.message);
    throw error;
  }
}

function describe(link: DaemonLink): string[] {
  return [
    `pid      ${link.pid}`,
    `version  ${link.version} (protocol ${link.protocol})`,
    `socket   ${link.socket}`,
    `http     ${link.http ?? '(none)'}`,
    `log      ${link.log}`,
  ];
}

async function start(ctx: Context): Promise<number> {
  const idleMs = idleOption(ctx);
  const link = await host(() => ensureDaemon(ctx.workspace, { env: ctx.io.env, ...(idleMs !== undefined ? { idleMs } : {}) }));
  if (ctx.json) ctx.emit({ running: true, ...link });
  else ctx.out([`daemon of ${link.workspace} running`, ...describe(link)].join('\n'));
  return EXIT.ok;
}

async function status(ctx: Context): Promise<number> {
  const paths = daemonPaths(ctx.workspace, ctx.io.env);
  const link = await host(() => findDaemon(ctx.workspace, ctx.io.env));
  let startedAt: string | null = null;
  try {
    startedAt = (JSON.parse(readFileSync(paths.record, 'utf8')) as { started_at?: string }).started_at ?? null;
  } catch {}
  if (ctx.json) {
    ctx.emit(
      link ? { running: true, ...link, started_at: startedAt } : { running: false, workspace: paths.workspace, socket: paths.socket, log: paths.log },
    );
  } else if (link) {
    ctx.out([`daemon of ${link.workspace} running${startedAt ? ` since ${startedAt}` : ''}`, ...describe(link)].join('\n'));
  } else {
    ctx.out(
      `no daemon runs for ${paths.workspace} (its socket would be ${paths.socket}; log ${paths.log}); a client starts one, or arium daemon start`,
    );
  }
  return EXIT.ok;
}

async function stop(ctx: Context): Promise<number> {
  const paths = daemonPaths(ctx.workspace, ctx.io.env);
  // The record, not /healthz: a daemon of another protocol must be stoppable too.
  let pid: number | null = null;
  try {
    const record = JSON.parse(readFileSync(paths.record, 'utf8')) as { pid?: unknown };
    // The lock names the same pid only while that daemon runs: a record left by a killed one may name a pid reused since.
    if (typeof record.pid === 'number' && alive(record.pid) && lockHolder(paths.lock) === record.pid) pid = record.pid;
  } catch {}
  if (pid === null) {
    if (ctx.json) ctx.emit({ stopped: false, running: false, workspace: paths.workspace });
    else ctx.out(`no daemon runs for ${paths.workspace}`);
    return EXIT.ok;
  }
  process.kill(pid, 'SIGTERM');
  const until = Date.now() + STOP_WAIT_MS;
  while (alive(pid)) {
    if (Date.now() > until)
      throw new HostError(`The daemon (pid ${pid}) did not stop within ${STOP_WAIT_MS / 1000} s of SIGTERM; see ${paths.log}, or kill -9 ${pid}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  if (ctx.json) ctx.emit({ stopped: true, pid, workspace: paths.workspace });
  else ctx.out(`stopped the daemon of ${paths.workspace} (pid ${pid})`);
  return EXIT.ok;
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 1, daemonSpec.usage);
  const action = ctx.parsed.positionals[0];
  switch (action) {
    case 'run': {
      return await serveDaemon(ctx, {
        http: httpOptions(ctx),
        idleMs: idleOption(ctx) ?? STARTED_IDLE_MS,
        heldIsFine: true,
        stamped: true,
      });
    }
    case 'start':
      return await start(ctx);
    case 'status':
      return await status(ctx);
    case 'stop':
      return await stop(ctx);
    default:
      throw new UsageError(
        action === undefined ? `Say what to do: ${ACTIONS.join(', ')}` : `Unknown action "${action}": use one of ${ACTIONS.join(', ')}`,
      );
  }
}

export const daemonSpec: CommandSpec = {
  name: 'daemon',
  usage: 'arium daemon run|start|status|stop [--idle <seconds>]',
  summary: 'the workspace’s engine daemon: start it, show it, stop it (clients start it when missing)',
  details: [
    'One daemon per workspace holds its engines; arium mcp, the CLI and connect() talk to it over its Unix',
    'socket ($XDG_RUNTIME_DIR/arium/<id>.sock, else <workspace>/.arium/run/<id>.sock; 0600 in a 0700 folder).',
    '  run     the daemon itself, in the foreground (what clients start, detached, logging to <id>.log);',
    '          stops after --idle seconds with no connection, MCP session or call (default 600; 0: never)',
    '  start   start it in the background unless it runs, and wait until it answers; prints pid, socket, log',
    '  status  whether it runs: pid, version, socket, HTTP address, log (--json: running: true|false)',
    '  stop    SIGTERM to its pid (from its record), waiting until it has gone',
    'arium serve is the same daemon in the foreground, with an address file and never idle unless --idle.',
  ].join('\n'),
  flags: {
    idle: { value: true, arg: '<seconds>', help: 'run, start: stop after this long with nothing open (default 600; 0: never)' },
  },
  run,
};
