import { afterAll, expect } from 'vitest';
import { pyRunner } from '../../runners/python/definition.js';
import { PythonRunner, type PythonRunnerOptions } from '../../runners/python/index.js';
import type { Engine, EngineOptions } from '../../src/index.js';
import { type NatsServer, startNats } from './nats.js';
import { Workers } from './remote.js';

// Where the containment suites run their tools: on this process's runners (the default), or on a
// remote worker over a real nats-server once a wrapper file (test/remote.*-suite.test.ts) has called
// `runOnRemoteWorker()` before importing the suite. A suite asks `remote()` and `engineOptions()`;
// the attacks and what they assert stay the same. The engines keep the default keepalive (a worker is
// lost after 3 s of silence): these suites are about containment, on a machine busy with the others.

interface RemoteTarget {
  readonly nats: NatsServer;
  readonly workers: Workers;
  deployments: number;
  /** Successful calls of remote runners' tools, by where they ran: a suite that ran here proved nothing of workers. */
  readonly ran: { onWorker: number; here: string[] };
}

let target: RemoteTarget | null = null;

/** Starts nats-server and a worker; suites imported after this run their tools on workers. */
export async function runOnRemoteWorker(): Promise<void> {
  const nats = await startNats();
  const workers = new Workers();
  const ran = { onWorker: 0, here: [] as string[] };
  target = { nats, workers, deployments: 0, ran };
  await workers.start(nats.url, { deployment: 'suite', concurrency: 4 });
  afterAll(async () => {
    await workers.closeAll();
    await nats.stop();
    expect(ran.here).toEqual([]);
    expect(ran.onWorker).toBeGreaterThan(0);
  });
}

/** Whether tools run on a remote worker. */
export function remote(): boolean {
  return target !== null;
}

/** Engine options that send `runner`'s calls to the suite's default worker (none when local). */
export function engineOptions(runner: 'js-runner' | 'py-runner'): EngineOptions {
  if (!target) return {};
  return { remote: { nats: target.nats.url, deployment: 'suite', runners: [runner] } };
}

/**
 * Engine options that run Python tools on a `PythonRunner` made with `options`: here, or on a worker
 * of a deployment of its own hosting such a runner (a worker's runners are made once, when it starts).
 */
export async function pythonRunnerOptions(options: PythonRunnerOptions): Promise<EngineOptions> {
  if (!target) return { runners: [new PythonRunner(options)] };
  const deployment = `suite-py-${++target.deployments}`;
  await target.workers.start(target.nats.url, {
    deployment,
    concurrency: 4,
    runners: ['py-runner'],
    definitions: [{ ...pyRunner, create: () => new PythonRunner(options) }],
  });
  return { remote: { nats: target.nats.url, deployment, runners: ['py-runner'] } };
}

/** Counts where `engine`'s successful JS and Python calls ran; the suite's end checks it ran them all on workers. */
export function track(engine: Engine): Engine {
  const ran = target?.ran;
  if (!ran) return engine;
  engine.events.on('result', (event) => {
    const runner = engine.tool(event.tool)?.runner;
    if (runner !== 'js-runner' && runner !== 'py-runner') return;
    if (event.worker) ran.onWorker++;
    else ran.here.push(event.tool);
  });
  return engine;
}

/**
 * The status of `runner` where the engine's calls run: this engine's runner, or the one a worker hosts,
 * as its heartbeats describe it (SANDBOX_FIELDS). A worker reads it when it starts and again after
 * its first call, so this waits for the description, with `field` in it when one is named.
 */
export async function runnerStatus(engine: Engine, runner: string, field?: string): Promise<Record<string, unknown> | undefined> {
  const status = await engine.status();
  if (!target) return status.runners[runner] as Record<string, unknown> | undefined;
  for (let i = 0; i < 100; i++) {
    const workers = (await engine.status()).remote?.workers ?? [];
    const described = workers.find((w) => w.sandboxes?.[runner])?.sandboxes?.[runner];
    if (described && (field === undefined || field in described)) return described;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no worker described its ${runner}${field ? `'s ${field}` : ''} in 5 s`);
}
