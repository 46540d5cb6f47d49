import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CATALOG, runnerCatalog } from '../runners/index.js';
import { HOSTABLE_RUNNERS, startWorker } from '../runners/remote/worker.js';
import { wasmRunner } from '../runners/wasm/index.js';
import { createEngine, type Engine, type Runner, type RunnerDefinition } from '../src/index.js';
import { dataOf } from './support/js-engine.js';
import { type NatsServer, startNats } from './support/nats.js';
import { type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

// Which runners a remote worker can host is what their definitions say (`remote: true`), not a list
// kept elsewhere: a runner added by its definition alone runs on a real worker over a real nats-server.

/** A runner from outside the package: its tools' entry files hold text, which a call returns with its input. */
const echoRunner: RunnerDefinition = {
  name: 'echo-runner',
  summary: 'Returns its entry file text',
  extensions: ['.echo'],
  permission: 'exec.echo',
  grantedByDefault: true,
  remote: true,
  create: (): Runner => ({
    name: 'echo-runner',
    interruptible: false,
    run: async (ctx) => ({ text: readFileSync(ctx.tool.entryPath as string, 'utf8').trim(), input: ctx.input }),
    status: async () => ({ available: true }),
    close: async () => {},
  }),
};

describe('the runners a worker can host', () => {
  it('are those of the catalog whose definitions say remote: true', () => {
    expect(HOSTABLE_RUNNERS).toEqual(
      DEFAULT_CATALOG.list()
        .filter((d) => d.remote === true)
        .map((d) => d.name),
    );
    expect(HOSTABLE_RUNNERS).toEqual(['js-runner', 'py-runner', 'wasm-runner']);
    expect(runnerCatalog([echoRunner]).hostable()).toEqual(['js-runner', 'py-runner', 'wasm-runner', 'echo-runner']);
    expect(runnerCatalog([{ ...wasmRunner, remote: false }]).hostable()).toEqual(['js-runner', 'py-runner']);
  });

  it('refuses a definition whose remote is not a boolean', () => {
    expect(() => runnerCatalog([{ ...echoRunner, remote: 'yes' as never }])).toThrow(/"remote" must be true .* or false/);
  });
});

describe('a runner added by its definition, on a remote worker', () => {
  let nats: NatsServer;
  const workers = new Workers();
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    nats = await startNats();
    project = tempProject({}, 'arium-remote-hostable-');
    project.write(
      'hello.json',
      JSON.stringify({
        id: 'hello',
        description: 'd',
        runner: 'echo-runner',
        entry: 'hello.echo',
        schema: { type: 'object' },
        permissions: ['exec.echo'],
      }),
    );
    project.write('hello.echo', 'hello from the tools folder\n');
  });

  afterAll(async () => {
    await engine?.close();
    await workers.closeAll();
    await nats.stop();
    project.remove();
  });

  it('is hosted by a worker given its definition, by default, and its calls run there', async () => {
    const worker = await workers.start(nats.url, { definitions: [echoRunner] });
    expect(worker.heartbeat().runners).toEqual(['js-runner', 'py-runner', 'wasm-runner', 'echo-runner']);
    engine = await remoteEngine(project, nats.url, { runners: ['echo-runner'] }, { runners: [echoRunner] });
    const results = await Promise.all([engine.call('hello', { n: 1 }), engine.call('hello', { n: 2 })]);
    expect(results.map((r) => dataOf(r))).toEqual([
      { text: 'hello from the tools folder', input: { n: 1 } },
      { text: 'hello from the tools folder', input: { n: 2 } },
    ]);
    expect(results.map((r) => (r.meta as { worker?: { id: string } }).worker?.id)).toEqual([worker.id, worker.id]);
  });

  it('is refused by a worker and an engine whose catalogs do not have it, naming the runners they can host', async () => {
    const settings = { servers: [nats.url], deployment: 'test', auth: null, tls: null };
    await expect(startWorker({ settings, runners: ['echo-runner'] })).rejects.toThrow(
      'A worker cannot host "echo-runner": it hosts js-runner, py-runner and wasm-runner',
    );
    await expect(startWorker({ settings, runners: ['macro'], definitions: [echoRunner] })).rejects.toThrow(
      'it hosts js-runner, py-runner, wasm-runner and echo-runner',
    );
    await expect(
      createEngine({
        workspace: project.workspace,
        project: project.project,
        watch: false,
        persist: false,
        remote: { nats: nats.url, runners: ['macro'] },
      }),
    ).rejects.toThrow('"macro" cannot run remotely; workers host js-runner, py-runner and wasm-runner');
  });
});
