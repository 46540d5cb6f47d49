import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installJsPackages } from '../runners/js/packages.js';
import { installPythonEnvironment } from '../runners/python/environment.js';
import { findInterpreter } from '../runners/python/interpreter.js';
import { createEngine, type Engine } from '../src/index.js';
import { startNats } from './nats-server.js';
import { spawnWorker } from './remote.js';
import { median } from './stats.js';

/**
 * A project's dependencies on a remote worker (a real `arium worker` process, loopback NATS): the
 * first call of a JS tool importing `yaml` and of a Python tool importing a pinned wheel on a worker
 * whose cache is empty (the bundle or the environment's site-packages sent, the venv laid out, the
 * sandbox started), the first call on a second fresh worker once the engine has everything built,
 * and warm calls; beside them the same tools run locally. `node --no-node-snapshot dist/bench/run.js
 * remote-deps` runs this suite.
 */

const ms = (value: number) => Math.round(value * 100) / 100;
const WARM = 40;

function definition(id: string, runner: string, entry: string): string {
  return JSON.stringify({
    id,
    description: id,
    runner,
    entry,
    schema: { type: 'object' },
    permissions: [runner === 'py-runner' ? 'exec.py' : 'exec.js'],
  });
}

async function once(engine: Engine, id: string, input: unknown): Promise<number> {
  const t0 = performance.now();
  const result = await engine.call(id, input);
  const took = performance.now() - t0;
  if (!result.ok) throw new Error(`bench call ${id} failed: ${result.error.message}`);
  return took;
}

async function warm(engine: Engine, id: string, input: unknown): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < WARM; i++) times.push(await once(engine, id, input));
  return ms(median(times));
}

export async function benchRemoteDeps(): Promise<Record<string, unknown>> {
  const workspace = mkdtempSync(join(tmpdir(), 'arium-bench-remote-deps-'));
  const project = join(workspace, 'p');
  const tools = join(project, 'tools');
  mkdirSync(tools, { recursive: true });
  writeFileSync(join(tools, 'yaml.js'), "import { parse } from 'yaml';\nexport default async function run(input) { return parse(input.text); }\n");
  writeFileSync(join(tools, 'yaml.json'), definition('b.yaml', 'js-runner', 'yaml.js'));
  writeFileSync(join(tools, 'pinned.py'), 'import arium_pin_demo\n\n\ndef run(input, ctx):\n    return arium_pin_demo.triple(input["x"])\n');
  writeFileSync(join(tools, 'pinned.json'), definition('b.pinned', 'py-runner', 'pinned.py'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'bench', private: true, dependencies: { yaml: '2.8.1' } }));
  const python = (await findInterpreter(undefined, process.cwd())).executable;
  const wheels = join(workspace, 'wheels');
  mkdirSync(wheels);
  const maker = new URL('../../fixtures/python-env/wheel/make_wheel.py', import.meta.url).pathname;
  const wheel = execFileSync(python, [maker, 'arium_pin_demo', '1.0', wheels], { encoding: 'utf8' }).trim();
  const hash = /--hash=(sha256:[0-9a-f]{64})/.exec(execFileSync(python, ['-m', 'pip', 'hash', wheel], { encoding: 'utf8' }))?.[1];
  writeFileSync(join(project, 'requirements.txt'), `arium_pin_demo==1.0 --hash=${hash}\n`);
  const stateDir = join(project, '.arium');
  await installJsPackages({ projectDir: project, stateDir, offline: true });
  await installPythonEnvironment({ projectDir: project, stateDir, pip: { noIndex: true, findLinks: [wheels] } });
  const nats = await startNats();
  const workers: ChildProcess[] = [];
  const engines: Engine[] = [];
  const open = async (remote: boolean) => {
    const engine = await createEngine({
      workspace,
      project: 'p',
      watch: false,
      persist: false,
      warmUp: false,
      remote: remote ? { nats: nats.url, deployment: 'bench', runners: ['js-runner', 'py-runner'] } : false,
    });
    engines.push(engine);
    return engine;
  };
  const stopWorkers = async () => {
    for (const worker of workers.splice(0)) {
      const gone = new Promise((resolve) => worker.once('exit', resolve));
      worker.kill('SIGTERM');
      await gone;
    }
  };
  const cases = [
    ['js_yaml', 'b.yaml', { text: 'a: [1, 2]' }],
    ['py_pinned', 'b.pinned', { x: 2 }],
  ] as const;
  try {
    const local = await open(false);
    const results: Record<string, Record<string, number>> = {};
    for (const [name, id, input] of cases)
      results[name] = { local_first_ms: ms(await once(local, id, input)), local_warm_median_ms: await warm(local, id, input) };
    const remote = await open(true);
    for (const [name, id, input] of cases) {
      // A fresh worker per case and round: its cache empty, its sandboxes not started.
      workers.push(await spawnWorker(nats.url, join(workspace, `cache-${name}-1`), null, 'js-runner,py-runner'));
      const first = ms(await once(remote, id, input));
      const warmMedian = await warm(remote, id, input);
      await stopWorkers();
      workers.push(await spawnWorker(nats.url, join(workspace, `cache-${name}-2`), null, 'js-runner,py-runner'));
      const fresh = ms(await once(remote, id, input));
      await stopWorkers();
      workers.push(await spawnWorker(nats.url, join(workspace, `cache-${name}-2`), null, 'js-runner,py-runner'));
      const cached = ms(await once(remote, id, input));
      await stopWorkers();
      Object.assign(results[name] as object, {
        remote_first_ms: first,
        remote_first_fresh_worker_ms: fresh,
        remote_first_restarted_worker_cached_ms: cached,
        remote_warm_median_ms: warmMedian,
      });
    }
    return results;
  } finally {
    await Promise.allSettled(engines.map((e) => e.close()));
    await stopWorkers();
    await nats.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.stdout.write(`${JSON.stringify(await benchRemoteDeps(), null, 2)}\n`);
}
