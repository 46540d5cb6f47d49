import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_CATALOG, loadWorker } from '../../../defaults.js';
import { int, maxPositionals, str, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, workerSpec.usage);
  const url = str(ctx.parsed, 'nats') ?? ctx.io.env.ARIUM_NATS_URL;
  if (!url) throw new UsageError('Name the NATS server: --nats nats://host:4222 (or set ARIUM_NATS_URL)');
  // Loaded here: the NATS client and the worker cost every other command their import.
  const { checkSettings, resolveAuth, RemoteConfigError, startWorker, HOSTABLE_RUNNERS, hostableList, NatsUnreachable } = await loadWorker();
  const runners = (str(ctx.parsed, 'runners') ?? HOSTABLE_RUNNERS.join(',')).split(',').filter((r) => r !== '');
  for (const name of runners) {
    if (!HOSTABLE_RUNNERS.includes(name)) throw new UsageError(`Option --runners: a worker hosts ${hostableList()} (got "${name}")`);
  }
  const refs = {
    ...(str(ctx.parsed, 'user')
      ? { user: str(ctx.parsed, 'user') as string, password_env: str(ctx.parsed, 'password-env') ?? 'ARIUM_NATS_PASSWORD' }
      : {}),
    ...(str(ctx.parsed, 'password-file') ? { password_env: undefined, password_file: str(ctx.parsed, 'password-file') } : {}),
    ...(str(ctx.parsed, 'token-env') ? { token_env: str(ctx.parsed, 'token-env') } : {}),
    ...(str(ctx.parsed, 'token-file') ? { token_file: str(ctx.parsed, 'token-file') } : {}),
    ...(str(ctx.parsed, 'nkey-seed-file') ? { nkey_seed_file: str(ctx.parsed, 'nkey-seed-file') } : {}),
  };
  const tls = {
    ...(str(ctx.parsed, 'tls-ca') ? { ca_file: resolve(ctx.io.cwd, str(ctx.parsed, 'tls-ca') as string) } : {}),
    ...(str(ctx.parsed, 'tls-cert') ? { cert_file: resolve(ctx.io.cwd, str(ctx.parsed, 'tls-cert') as string) } : {}),
    ...(str(ctx.parsed, 'tls-key') ? { key_file: resolve(ctx.io.cwd, str(ctx.parsed, 'tls-key') as string) } : {}),
  };
  let settings: ReturnType<typeof checkSettings>;
  try {
    settings = checkSettings(
      {
        servers: url.split(','),
        deployment: str(ctx.parsed, 'deployment') ?? 'default',
        auth: resolveAuth(
          Object.keys(refs).length > 0 ? (JSON.parse(JSON.stringify(refs)) as typeof refs) : undefined,
          ctx.io.env,
          ctx.io.cwd,
          'arium worker',
        ),
        tls: Object.keys(tls).length > 0 ? tls : null,
      },
      'arium worker',
    );
  } catch (error) {
    if (error instanceof RemoteConfigError) throw new UsageError(error.message);
    throw error;
  }
  const concurrency = int(ctx.parsed, 'concurrency');
  const heartbeatMs = int(ctx.parsed, 'heartbeat-ms', 20);
  const cache = str(ctx.parsed, 'cache');
  const cacheMb = int(ctx.parsed, 'cache-mb', 1);
  const python = str(ctx.parsed, 'python');
  const stop = ctx.io.interrupt();
  const start = () =>
    startWorker({
      settings,
      runners,
      ...(concurrency ? { concurrency } : {}),
      ...(heartbeatMs ? { heartbeatMs } : {}),
      ...(cache ? { cacheDir: resolve(ctx.io.cwd, cache) } : {}),
      ...(cacheMb ? { cacheLimits: { maxBytes: cacheMb * 1024 * 1024 } } : {}),
      ...(python ? { runnerConfig: { python: resolve(ctx.io.cwd, python) } } : {}),
      onConnection: (event, server) =>
        ctx.io.stderr.write(
          event === 'disconnected'
            ? `arium: worker lost the NATS server ${server}; reconnecting (its running calls fail on their engines)\n`
            : `arium: worker reconnected to ${server}\n`,
        ),
    });
  let worker: Awaited<ReturnType<typeof startWorker>> | null = null;
  // A server not up yet (machines booting in any order) is waited for; refused credentials are not.
  for (let wait = 250, told = false; worker === null; wait = Math.min(wait * 2, 2_000)) {
    try {
      worker = await start();
    } catch (error) {
      if (!(error instanceof NatsUnreachable)) {
        if (error instanceof RemoteConfigError) throw new HostError(error.message);
        throw error;
      }
      if (!told) ctx.io.stderr.write(`arium: ${error.message}; trying again until it answers (Ctrl-C stops)\n`);
      told = true;
      await sleep(wait, undefined, { signal: stop }).catch(() => {});
      if (stop.aborted) {
        ctx.io.stderr.write('arium: worker stopped before it reached the NATS server\n');
        return EXIT.ok;
      }
    }
  }
  const hb = worker.heartbeat();
  ctx.io.stderr.write(
    `arium: worker ${worker.id} on ${worker.host} runs ${runners.join(', ')} (${hb.capacity} at once) for deployment "${settings.deployment}" at ${settings.servers.join(', ')}; SIGTERM or Ctrl-C drains\n`,
  );
  if (ctx.json) ctx.emit({ id: worker.id, host: worker.host, runners, capacity: hb.capacity, deployment: settings.deployment });
  await new Promise<void>((done) => {
    if (stop.aborted) done();
    else stop.addEventListener('abort', () => done(), { once: true });
  });
  ctx.io.stderr.write(`arium: worker ${worker.id} draining (${worker.heartbeat().in_flight} calls running)\n`);
  await worker.drain();
  ctx.io.stderr.write(`arium: worker ${worker.id} stopped\n`);
  return EXIT.ok;
}

export const workerSpec: CommandSpec = {
  name: 'worker',
  usage: 'arium worker --nats <url> [--deployment <name>] [--runners js-runner,py-runner] [--concurrency <n>]',
  summary: 'run JS and Python tool calls for engines elsewhere, taken from a NATS server, until SIGTERM',
  details: [
    'Joins the queue group of each runner on arium.<deployment>.run.<runner>, so calls are balanced across',
    'workers, and announces itself on arium.<deployment>.hb. Tool files come from the calling engine and are',
    'cached by sha256 in --cache; ctx.vfs requests go back to that engine, which checks them. SIGTERM or',
    'Ctrl-C drains: the calls running finish, no new ones are taken. The client reconnects to the server',
    'by itself. A server off loopback needs credentials: --user (password in $ARIUM_NATS_PASSWORD or',
    '--password-env/--password-file), --token-env/--token-file, or --nkey-seed-file.',
  ].join('\n'),
  flags: {
    nats: { value: true, arg: '<url>', help: 'NATS server URL(s), comma-separated (default $ARIUM_NATS_URL)' },
    deployment: { value: true, arg: '<name>', help: 'namespace of the subjects, as the engines’ remote.deployment (default "default")' },
    runners: { value: true, arg: '<list>', help: `runners to host (default ${DEFAULT_CATALOG.hostable().join(',')})` },
    concurrency: { value: true, arg: '<n>', help: 'calls run at once (default the number of CPUs)' },
    cache: { value: true, arg: '<dir>', help: 'where received tool files are kept (default <tmp>/arium-worker-cache)' },
    'cache-mb': {
      value: true,
      arg: '<n>',
      help: 'past this many MB the cache drops the tools, bundles and environments used least recently (default 2048)',
    },
    'heartbeat-ms': { value: true, arg: '<ms>', help: 'how often it announces itself (default 2000)' },
    python: {
      value: true,
      arg: '<path>',
      help: "the Python interpreter for Python tools (default python3 on PATH); a pinned project's tools need the one its environment was installed for",
    },
    user: { value: true, arg: '<name>', help: 'NATS user; the password comes from $ARIUM_NATS_PASSWORD or --password-env' },
    'password-env': { value: true, arg: '<var>', help: 'environment variable holding the password' },
    'password-file': { value: true, arg: '<path>', help: 'file holding the password' },
    'token-env': { value: true, arg: '<var>', help: 'environment variable holding a NATS token' },
    'token-file': { value: true, arg: '<path>', help: 'file holding a NATS token' },
    'nkey-seed-file': { value: true, arg: '<path>', help: 'file holding an nkey seed (SU…)' },
    'tls-ca': { value: true, arg: '<path>', help: 'CA certificate to verify the server with' },
    'tls-cert': { value: true, arg: '<path>', help: 'client certificate (mutual TLS)' },
    'tls-key': { value: true, arg: '<path>', help: 'client key (mutual TLS)' },
  },
  run,
};
