// The same attacks from the JS and Python containment fixtures, run locally and on a remote worker:
// the outcome must be the same (a worker's sandbox is the local one; the VFS checks stay with the engine).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine, type ToolResult } from '../src/index.js';
import { JS_FIXTURES } from './support/js-engine.js';
import { type NatsServer, startNats } from './support/nats.js';
import { copyFixtureProject, type TempProject } from './support/project.js';
import { FAST, Workers } from './support/remote.js';

let nats: NatsServer;
const workers = new Workers();
const engines: Engine[] = [];
let local: Engine;
let remote: Engine;
let pyLocal: Engine;
let pyRemote: Engine;
let python: TempProject;

function open(workspace: string, project: string, runners: string[] | null): Promise<Engine> {
  return createEngine({
    workspace,
    project,
    watch: false,
    persist: false,
    ...(runners ? { remote: { nats: nats.url, deployment: 'test', runners, keepalive_ms: FAST.keepaliveMs } } : { remote: false }),
  }).then((engine) => {
    engines.push(engine);
    return engine;
  });
}

beforeAll(async () => {
  nats = await startNats();
  await workers.start(nats.url, { concurrency: 2 });
  python = copyFixtureProject('python');
  [local, remote, pyLocal, pyRemote] = await Promise.all([
    open(JS_FIXTURES, 'hostile', null),
    open(JS_FIXTURES, 'hostile', ['js-runner']),
    open(python.workspace, python.project, null),
    open(python.workspace, python.project, ['py-runner']),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all(engines.map((e) => e.close()));
  await workers.closeAll();
  await nats.stop();
  python?.remove();
});

/** What a test compares: the data of a success, or the code and stage of a failure. */
function outcome(result: ToolResult): unknown {
  return result.ok ? { ok: true, data: result.data } : { ok: false, code: result.error.code, stage: result.error.stage };
}

describe('hostile tools on a remote worker', () => {
  it.each([
    ['escape', { attack: 'globals' }],
    ['escape', { attack: 'ctx-chain' }],
    ['escape', { attack: 'dynamic-import' }],
    ['traversal', { paths: ['/etc/passwd', '/proc/self/environ', '../../etc/passwd'] }],
    ['deny', {}],
    ['deny', { swallow: true }],
    ['timeouts', { kind: 'cpu-loop' }],
    ['timeouts', { kind: 'awaiting-host' }],
    ['memory', { kind: 'resizable-array-buffers' }],
    ['memory', { kind: 'wasm-no-maximum' }],
  ])('JS %s %j: the same outcome as locally', async (id, input) => {
    const [here, there] = await Promise.all([local.call(id, input), remote.call(id, input)]);
    expect(there.meta).toHaveProperty('worker');
    expect(outcome(there)).toEqual(outcome(here));
  });

  it('JS deny: the worker cannot write what the tool did not declare, and the engine records the denial', async () => {
    const denials: { run_id: string | null }[] = [];
    remote.events.on('security', (e) => denials.push(e));
    const r = await remote.call('deny', { swallow: true });
    expect(r).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    expect(remote.vfs.exists('/stolen.txt')).toBe(false);
    expect(denials.filter((e) => e.run_id === r.meta.run_id)).toEqual([
      expect.objectContaining({ action: 'denied', operation: 'write /stolen.txt' }),
    ]);
  });

  it.each([
    ['py.attack', { attack: 'host-files' }],
    ['py.attack', { attack: 'network' }],
    ['py.attack', { attack: 'run-programs' }],
    ['py.attack', { attack: 'cpu' }],
    [
      'py.vfs',
      {
        steps: [
          ['write', ['/a.txt', 'x']],
          ['read', ['/a.txt']],
          ['read', ['/missing.txt']],
        ],
      },
    ],
    ['py.vfs', { steps: [['write', ['/b.txt', 'x']]], then_fail: true }],
  ])('Python %s %j: the same outcome as locally', async (id, input) => {
    const [here, there] = await Promise.all([pyLocal.call(id, input), pyRemote.call(id, input)]);
    expect(there.meta).toHaveProperty('worker');
    expect(outcome(there)).toEqual(outcome(here));
  });
});
