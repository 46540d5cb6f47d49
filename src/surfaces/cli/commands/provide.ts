import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { int, maxPositionals, str, UsageError } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

/** What a module served by `arium provide` exports: `tools` (and `version`, `capacity`), or a default of either shape. */
interface ToolModule {
  tools?: unknown;
  version?: unknown;
  capacity?: unknown;
  default?: unknown;
}

async function load(path: string): Promise<{ tools: unknown[]; version?: string; capacity?: number }> {
  let mod: ToolModule;
  try {
    mod = (await import(pathToFileURL(path).href)) as ToolModule;
  } catch (error) {
    throw new HostError(`Cannot load ${path}: ${(error as Error).message}`);
  }
  const source = (
    Array.isArray(mod.default) ? { tools: mod.default } : typeof mod.default === 'object' && mod.default !== null ? mod.default : mod
  ) as ToolModule;
  if (!Array.isArray(source.tools) || source.tools.length === 0) {
    throw new UsageError(
      `${path} exports no tools: export const tools = [{ name, description, inputSchema, handler }] (or a default export of that list)`,
    );
  }
  return {
    tools: source.tools,
    ...(typeof source.version === 'string' ? { version: source.version } : {}),
    ...(typeof source.capacity === 'number' ? { capacity: source.capacity } : {}),
  };
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 1, provideSpec.usage);
  const file = ctx.parsed.positionals[0];
  if (!file) throw new UsageError(`Name the module whose tools to serve; usage: ${provideSpec.usage}`);
  const url = str(ctx.parsed, 'nats') ?? ctx.io.env.ARIUM_NATS_URL;
  if (!url) throw new UsageError('Name the NATS server: --nats nats://host:4222 (or set ARIUM_NATS_URL)');
  const path = resolve(ctx.io.cwd, file);
  if (path.endsWith('.py')) {
    throw new UsageError(
      `arium provide runs JavaScript modules; run a Python satellite with python3 and sdk/python/arium_satellite.py (README "NATS satellites")`,
    );
  }
  const mod = await load(path);
  // Loaded here: the NATS client costs every other command its import.
  const { satellite } = await import('../../../satellite/index.js');
  const { checkSettings, resolveAuth, RemoteConfigError, NatsUnreachable } = await loadSettings();
  const refs = {
    ...(str(ctx.parsed, 'user') ? { user: str(ctx.parsed, 'user'), password_env: str(ctx.parsed, 'password-env') ?? 'ARIUM_NATS_PASSWORD' } : {}),
    ...(str(ctx.parsed, 'token-env') ? { token_env: str(ctx.parsed, 'token-env') } : {}),
    ...(str(ctx.parsed, 'nkey-seed-file') ? { nkey_seed_file: str(ctx.parsed, 'nkey-seed-file') } : {}),
  };
  const deployment = str(ctx.parsed, 'deployment') ?? 'default';
  let auth: ReturnType<typeof resolveAuth>;
  try {
    // Checked before connecting, as arium worker does: a bad option is a usage error, not a host's.
    auth = resolveAuth(Object.keys(refs).length > 0 ? refs : undefined, ctx.io.env, ctx.io.cwd, 'arium provide');
    checkSettings({ servers: url.split(','), deployment, auth, tls: null }, 'arium provide');
  } catch (error) {
    if (error instanceof RemoteConfigError) throw new UsageError(error.message);
    throw error;
  }
  const capacity = int(ctx.parsed, 'capacity') ?? mod.capacity;
  const heartbeatMs = int(ctx.parsed, 'heartbeat-ms', 20);
  const nodeId = str(ctx.parsed, 'node-id');
  let served: Awaited<ReturnType<typeof satellite>>;
  try {
    served = await satellite({
      servers: url.split(','),
      deployment,
      tools: mod.tools as Parameters<typeof satellite>[0]['tools'],
      ...(mod.version ? { version: mod.version } : {}),
      ...(capacity ? { capacity } : {}),
      ...(heartbeatMs ? { heartbeat_ms: heartbeatMs } : {}),
      ...(nodeId ? { node_id: nodeId } : {}),
      ...(auth ? { auth } : {}),
    } as Parameters<typeof satellite>[0]);
  } catch (error) {
    if (error instanceof NatsUnreachable || error instanceof RemoteConfigError) throw new HostError((error as Error).message);
    // A bad tool list or option: the SDK's message names it.
    throw new UsageError(`${path}: ${(error as Error).message}`);
  }
  const hb = served.heartbeat();
  const names = hb.tools.map((t) => t.name);
  ctx.io.stderr.write(
    `arium: satellite ${served.node_id} serves ${names.join(', ')} (${hb.capacity} at once) for deployment "${deployment}" at ${url}; SIGTERM or Ctrl-C stops it\n`,
  );
  if (ctx.json) ctx.emit({ node_id: served.node_id, tools: names, capacity: hb.capacity, version: hb.version });
  const stop = ctx.io.interrupt();
  await new Promise<void>((done) => {
    if (stop.aborted) done();
    else stop.addEventListener('abort', () => done(), { once: true });
  });
  ctx.io.stderr.write(`arium: satellite ${served.node_id} leaving (${served.heartbeat().in_flight} calls running)\n`);
  await served.close();
  return EXIT.ok;
}

async function loadSettings() {
  const settings = await import('../../../../runners/remote/settings.js');
  const connect = await import('../../../../runners/remote/connect.js');
  return {
    checkSettings: settings.checkSettings,
    resolveAuth: settings.resolveAuth,
    RemoteConfigError: settings.RemoteConfigError,
    NatsUnreachable: connect.NatsUnreachable,
  };
}

export const provideSpec: CommandSpec = {
  name: 'provide',
  usage: 'arium provide <module.mjs> --nats <url> [--deployment <name>] [--node-id <id>] [--capacity <n>]',
  summary: 'serve the tools a JS module exports as a NATS satellite, until SIGTERM',
  details: [
    'The module exports `tools`: a list of { name, description, inputSchema, handler(input, ctx) } (and',
    'optionally `version` and `capacity`), or a default export of that list. The satellite joins a queue',
    'group per tool on arium.<deployment>.sat.tool.<tool> and announces its tools in heartbeats; an engine',
    'whose arium.json has a provider { "nats": { "servers": …, "deployment": … } } offers them as',
    '<provider>.<tool> while it runs. SIGTERM or Ctrl-C: it says it is leaving, finishes its calls, stops.',
    'Python tools: run them with sdk/python/arium_satellite.py instead.',
  ].join('\n'),
  flags: {
    nats: { value: true, arg: '<url>', help: 'NATS server URL(s), comma-separated (default $ARIUM_NATS_URL)' },
    deployment: { value: true, arg: '<name>', help: 'namespace of the subjects, as the engine’s provider names it (default "default")' },
    'node-id': { value: true, arg: '<id>', help: 'this satellite’s id, which calls may target (default <host>-<random>)' },
    capacity: { value: true, arg: '<n>', help: 'calls run at once; more wait (default the module’s, else 16)' },
    'heartbeat-ms': { value: true, arg: '<ms>', help: 'how often it announces itself (default 1000)' },
    user: { value: true, arg: '<name>', help: 'NATS user; the password comes from $ARIUM_NATS_PASSWORD or --password-env' },
    'password-env': { value: true, arg: '<var>', help: 'environment variable holding the password' },
    'token-env': { value: true, arg: '<var>', help: 'environment variable holding a NATS token' },
    'nkey-seed-file': { value: true, arg: '<path>', help: 'file holding an nkey seed (SU…)' },
  },
  run,
};
