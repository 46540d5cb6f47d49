import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { findDaemon } from '../../../daemon/link.js';
import { daemonPaths } from '../../../daemon/paths.js';
import { DEFAULT_CATALOG } from '../../../defaults.js';
import type { Engine, EngineStatus } from '../../../index.js';
import { type DependencyStatus, dependencyChecks, dependencyStatus } from '../../../install.js';
import { DEFAULT_PROVIDER_LIMITS } from '../../../limits.js';
import { maxPositionals } from '../args.js';
import type { CommandSpec } from '../command.js';
import type { Context } from '../context.js';
import { sandboxSummary, table } from '../format.js';
import { EXIT } from '../io.js';
import { type Check, checkNode } from '../probes.js';

/** A runner's status() may wait on a sandbox process; doctor reports a hang instead of hanging. */
const STATUS_TIMEOUT_MS = 15_000;
const REMOTE_LISTEN_MS = 300;

/** Whether the NATS server is reached and some worker is live, when the project runs tools remotely. */
function remoteCheck(status: EngineStatus | null): Check[] {
  const remote = status?.remote;
  if (!remote) return [];
  const where = `${remote.servers.join(', ')} (deployment "${remote.deployment}")`;
  if (!remote.connected)
    return [
      { name: 'remote workers', ok: false, detail: `not connected to ${where}`, fix: 'start the NATS server, or fix remote.nats in arium.json' },
    ];
  if (remote.workers.length === 0) {
    return [
      {
        name: 'remote workers',
        ok: false,
        detail: `none live on ${where}`,
        fix: `arium worker --nats ${remote.servers[0]} --deployment ${remote.deployment}`,
      },
    ];
  }
  const load = remote.workers
    .map((w) => {
      const sandbox = sandboxSummary(w);
      return `${w.id}@${w.host} ${w.in_flight}/${w.capacity}${sandbox ? ` (${sandbox})` : ''}`;
    })
    .join(', ');
  return [{ name: 'remote workers', ok: true, detail: `${remote.workers.length} on ${where}: ${load}` }];
}

/** Each provider of arium.json: started, with its tools, or why not. */
function providerChecks(status: EngineStatus | null): Check[] {
  return (status?.providers ?? []).map((p) => {
    const where = p.details
      ? Object.entries(p.details)
          .map(([k, v]) => `${k} ${typeof v === 'string' ? v : JSON.stringify(v)}`)
          .join(', ')
      : '';
    const restarts = p.restarts > 0 ? `, ${p.restarts} restarts` : '';
    if (p.state === 'ready')
      return { name: `provider ${p.name}`, ok: true, detail: `${p.kind}, ${p.tools} tools${restarts}${where ? ` (${where})` : ''}` };
    return {
      name: `provider ${p.name}`,
      ok: false,
      detail: `${p.kind}, ${p.state}${p.error ? `: ${p.error}` : ''}${where ? ` (${where})` : ''}`,
      fix: `check providers.${p.name} in arium.json, and that its server starts or answers`,
    };
  });
}

/** Waits until no provider is still starting (doctor starts them all, as a listing of the tools does). */
async function providersSettled(engine: Engine): Promise<void> {
  if (!engine.config.providers) return;
  engine.tools();
  const until = Date.now() + DEFAULT_PROVIDER_LIMITS.start_timeout_ms;
  while (Date.now() < until) {
    const states = ((await engine.status()).providers ?? []).map((p) => p.state);
    if (!states.some((s) => s === 'idle' || s === 'starting')) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The workspace's daemon: running (pid, socket, log) or not; one that cannot be used is a failed check. */
async function daemonCheck(ctx: Context): Promise<Check> {
  const paths = daemonPaths(ctx.workspace, ctx.io.env);
  try {
    const link = await findDaemon(ctx.workspace, ctx.io.env);
    return {
      name: 'daemon',
      ok: true,
      detail: link
        ? `running, pid ${link.pid} (Arium ${link.version}), socket ${link.socket}${link.http ? `, ${link.http}` : ''}, log ${link.log}`
        : `not running (a client starts it; socket ${paths.socket}, log ${paths.log})`,
    };
  } catch (error) {
    return { name: 'daemon', ok: false, detail: (error as Error).message, fix: `see ${paths.log}; arium daemon stop, then arium daemon start` };
  }
}

export interface DoctorReport {
  /** Every check passed. */
  ok: boolean;
  checks: Check[];
  /** The engine's status() for the project (each runner's availability and isolation), or null if it did not open. */
  engine: EngineStatus | null;
  /** What every project of the workspace pins and whether its installation matches. */
  projects: DependencyStatus[];
}

/** Each folder of the workspace that holds a tools/ folder, by name. */
async function workspaceDependencies(workspace: string): Promise<DependencyStatus[]> {
  let names: string[];
  try {
    names = readdirSync(workspace, { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && existsSync(join(workspace, entry.name, 'tools')))
      .map((entry) => entry.name)
      .sort();
  } catch {
    return [];
  }
  const found = await Promise.all(names.map((project) => dependencyStatus({ workspace, project }).catch(() => null)));
  return found.filter((status): status is DependencyStatus => status !== null);
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} gave no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function projectStatus(
  ctx: Context,
): Promise<{ check: Check; engine: EngineStatus | null; config: Record<string, unknown>; projectDir: string | null }> {
  const name = `project ${ctx.project}`;
  let engine: Engine;
  try {
    engine = await ctx.open();
  } catch (error) {
    const fix = `arium init ${ctx.project}, or pass --workspace/--project (workspace: ${ctx.workspace})`;
    return { check: { name, ok: false, detail: (error as Error).message, fix }, engine: null, config: {}, projectDir: null };
  }
  try {
    // Workers answer the engine's ping within milliseconds; give them a moment before asking who is there.
    if (engine.config.remote) await new Promise((resolve) => setTimeout(resolve, REMOTE_LISTEN_MS));
    await providersSettled(engine);
    const status = await withTimeout(engine.status(), STATUS_TIMEOUT_MS, 'engine.status()');
    const problems = status.problems ? `, ${status.problems} definition problems (arium tools)` : '';
    return {
      check: { name, ok: status.problems === 0, detail: `${status.tools} tools${problems}` },
      engine: status,
      config: { ...engine.config },
      projectDir: engine.projectDir,
    };
  } catch (error) {
    return {
      check: { name, ok: false, detail: (error as Error).message },
      engine: null,
      config: { ...engine.config },
      projectDir: engine.projectDir,
    };
  } finally {
    await engine.close();
  }
}

export async function diagnose(ctx: Context): Promise<DoctorReport> {
  // The project is opened first: its arium.json may configure what a runner probes (the Python interpreter).
  const project = await projectStatus(ctx);
  const setup = { config: project.config, projectDir: project.projectDir ?? ctx.io.cwd };
  const probes = await Promise.all(DEFAULT_CATALOG.list().map((definition) => definition.probe?.(setup) ?? Promise.resolve([])));
  let dependencies: Check[] = [];
  try {
    dependencies = await dependencyChecks({ workspace: ctx.workspace, project: ctx.project });
  } catch {
    // No such project: its own check says so.
  }
  const checks = [
    checkNode(),
    project.check,
    ...remoteCheck(project.engine),
    ...providerChecks(project.engine),
    ...dependencies,
    ...probes.flat(),
    await daemonCheck(ctx),
  ];
  return { ok: checks.every((k) => k.ok), checks, engine: project.engine, projects: await workspaceDependencies(ctx.workspace) };
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, doctorSpec.usage);
  const report = await diagnose(ctx);
  if (ctx.json) {
    ctx.emit(report);
    return EXIT.ok;
  }
  const { c } = ctx;
  const rows: string[][] = [];
  for (const k of report.checks) {
    rows.push([k.ok ? c.green('✓') : c.red('✗'), c.bold(k.name), k.detail]);
    if (!k.ok && k.fix) rows.push(['', '', c.yellow(`↳ fix: ${k.fix}`)]);
  }
  ctx.out(table(rows));
  if (report.engine) {
    ctx.out(`\n${c.bold('runners')} ${c.dim('(engine.status(); --json has every field)')}`);
    for (const [name, status] of Object.entries(report.engine.runners)) {
      const described = typeof status.isolation_detail === 'string' ? status.isolation_detail : status.isolation;
      const isolation = typeof described === 'string' ? c.dim(` ${described}`) : '';
      const why = status.reason ? `: ${status.reason}` : '';
      ctx.out(`  ${status.available ? c.green('✓') : c.red('✗')} ${name}${why}${isolation}`);
    }
  }
  const pinning = report.projects.filter((p) => p.js.state !== 'unpinned' || p.python.state !== 'unpinned');
  if (pinning.length > 0) {
    ctx.out(`\n${c.bold('dependencies')} ${c.dim('(each project of the workspace that pins packages; arium install --project <name>)')}`);
    const state = (s: string) => (s === 'ready' || s === 'unpinned' ? c.green(s) : c.red(s));
    for (const p of pinning) ctx.out(`  ${p.project}: js packages ${state(p.js.state)}, python env ${state(p.python.state)}`);
  }
  ctx.out(report.ok ? c.green('\nall checks passed') : c.yellow('\nsome checks failed: the features above marked ✗ are unavailable; the rest work'));
  return EXIT.ok;
}

export const doctorSpec: CommandSpec = {
  name: 'doctor',
  usage: 'arium doctor',
  summary: 'what this machine offers: Node, isolated-vm, Python, bubblewrap, user namespaces, Landlock, the runners',
  details: `Each check runs the real thing in a child process with a timeout (isolated-vm under
node --no-node-snapshot, python3 -c ..., a trial bwrap sandbox, unshare -Ur true), then opens the
project and prints each runner's status. A failed check prints how to fix it.
Doctor reports; it exits 0 even when checks fail (read "ok" in --json).`,
  flags: {},
  run,
};
