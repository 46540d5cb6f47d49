import { maxPositionals } from '../args.js';
import type { CommandSpec } from '../command.js';
import type { Context } from '../context.js';
import { sandboxSummary, table } from '../format.js';
import { EXIT } from '../io.js';

/** How long to listen for the workers' answers to the engine's ping. */
const LISTEN_MS = 300;

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, workersSpec.usage);
  const engine = await ctx.open({ warmUp: false, watch: false });
  try {
    await new Promise((resolve) => setTimeout(resolve, LISTEN_MS));
    const remote = (await engine.status()).remote;
    if (!remote) {
      ctx.io.stderr.write(`arium workers: project "${engine.project}" runs nothing remotely (no "remote" in its arium.json)\n`);
      if (ctx.json) ctx.emit({ remote: null });
      return EXIT.ok;
    }
    if (ctx.json) {
      ctx.emit(remote);
      return EXIT.ok;
    }
    const { c } = ctx;
    ctx.out(
      `${c.bold('NATS')} ${remote.servers.join(', ')} deployment "${remote.deployment}": ${remote.connected ? c.green('connected') : c.red('not connected')}`,
    );
    if (remote.workers.length === 0) {
      ctx.out(c.yellow('no live workers (start one: arium worker --nats <url> --deployment <name>)'));
      return EXIT.ok;
    }
    const rows = [['id', 'host', 'runners', 'sandbox', 'load', 'cache', 'versions', 'state'].map((h) => c.bold(h))];
    const mb = (bytes: number) => `${Math.round(bytes / 1048576)} MB`;
    for (const w of remote.workers) {
      rows.push([
        w.id,
        w.host,
        w.runners.join(','),
        sandboxSummary(w) || '-',
        `${w.in_flight}/${w.capacity}`,
        w.cache ? `${mb(w.cache.bytes)} / ${mb(w.cache.max_bytes)}` : '-',
        `arium ${w.versions.arium}, node ${w.versions.node}`,
        w.draining ? c.yellow('draining') : `seen ${w.last_seen_ms} ms ago`,
      ]);
    }
    ctx.out(table(rows));
    return EXIT.ok;
  } finally {
    await engine.close();
  }
}

export const workersSpec: CommandSpec = {
  name: 'workers',
  usage: 'arium workers',
  summary: 'the live remote workers of the project’s deployment, with their load (arium.json "remote")',
  details:
    "Connects as the project’s engine does, asks the workers to announce themselves, and lists them:\nid, host, runners, how each runner isolates calls, calls running / capacity, the cache's use / size,\nversions.\n--json prints engine.status().remote (each worker's `sandboxes`: fields of its runners' status).",
  flags: {},
  run,
};
