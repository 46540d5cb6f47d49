import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliRun, runCli, tempWorkspace } from './cli.helpers.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

let nats: NatsServer;
const workers = new Workers();

beforeAll(async () => {
  nats = await startNats({ user: 'arium', pass: 'pw' });
});
afterAll(async () => {
  await workers.closeAll();
  await nats.stop();
});

describe('arium worker', () => {
  it.each([
    [['--nats', 'nats://10.1.2.3:4222'], 2, /refusing to use the NATS server at 10\.1\.2\.3.*without credentials/],
    [['--nats', 'nats://127.0.0.1:1', '--runners', 'builtin'], 2, /a worker hosts js-runner, py-runner and wasm-runner \(got "builtin"\)/],
    [['--nats', 'nats://127.0.0.1:1', '--user', 'arium'], 2, /ARIUM_NATS_PASSWORD is not set/],
    [[], 2, /Name the NATS server/],
  ])('refuses %j with a clear error', async (args, code, message) => {
    const ws = tempWorkspace();
    try {
      const run = await runCli(ws.root, ['worker', ...args]);
      expect(run.code).toBe(code);
      expect(run.err).toMatch(message);
    } finally {
      ws.cleanup();
    }
  });

  it('refuses a wrong password, says so, and exits 3', async () => {
    const ws = tempWorkspace();
    try {
      const run = await runCli(ws.root, ['worker', '--nats', nats.url, '--user', 'arium'], { env: { ARIUM_NATS_PASSWORD: 'wrong' } });
      expect(run.code).toBe(3);
      expect(run.err).toMatch(/refused the credentials/);
    } finally {
      ws.cleanup();
    }
  });

  it('serves calls until interrupted, then drains; arium workers and doctor list it with its load', async () => {
    const ws = tempWorkspace();
    const cache = mkdtempSync(join(tmpdir(), 'arium-cli-cache-'));
    writeFileSync(join(ws.workspace, 'p', 'tools', 'echo.json'), definition({ id: 'echo', entry: 'echo.js' }));
    writeFileSync(join(ws.workspace, 'p', 'tools', 'echo.js'), 'export default async function run(input) { return input; }');
    writeFileSync(
      join(ws.workspace, 'p', 'arium.json'),
      JSON.stringify({
        remote: { nats: nats.url, deployment: 'cli', runners: ['js-runner'], credentials: { user: 'arium', password_env: 'ARIUM_NATS_PASSWORD' } },
      }),
    );
    const env = { ARIUM_NATS_PASSWORD: 'pw' };
    const stop = new AbortController();
    const serving = runCli(
      ws.root,
      ['worker', '--nats', nats.url, '--deployment', 'cli', '--user', 'arium', '--cache', cache, '--concurrency', '3', '--json'],
      {
        env,
        interrupt: stop.signal,
      },
    );
    try {
      let listed: CliRun | null = null;
      for (let i = 0; i < 100; i++) {
        listed = await runCli(ws.root, ['--workspace', ws.workspace, '--project', 'p', 'workers', '--json'], { env });
        if (JSON.parse(listed.out).workers?.length === 1) break;
      }
      expect(JSON.parse(listed?.out ?? '{}')).toMatchObject({
        connected: true,
        deployment: 'cli',
        workers: [{ runners: ['js-runner', 'py-runner', 'wasm-runner'], capacity: 3, in_flight: 0 }],
      });
      const call = await runCli(ws.root, ['--workspace', ws.workspace, '--project', 'p', 'call', 'echo', '{"a":1}', '--json'], { env });
      expect(JSON.parse(call.out)).toMatchObject({ ok: true, data: { a: 1 }, meta: { worker: { id: expect.any(String) } } });
      const doctor = await runCli(ws.root, ['--workspace', ws.workspace, '--project', 'p', 'doctor', '--json'], { env });
      expect(JSON.parse(doctor.out).checks).toContainEqual(expect.objectContaining({ name: 'remote workers', ok: true }));
      const text = await runCli(ws.root, ['--workspace', ws.workspace, '--project', 'p', 'workers'], { env });
      expect(text.out).toMatch(
        /connected[\s\S]*js-runner,py-runner,wasm-runner\s+js-runner isolated-vm, py-runner (bubblewrap|unshare|rlimits), wasm-runner isolated-vm\s+0\/3\s+0 MB \/ 2048 MB/,
      );
    } finally {
      stop.abort();
    }
    const run = await serving;
    expect(run.code).toBe(0);
    expect(run.err).toMatch(/draining[\s\S]*stopped/);
    expect(JSON.parse(run.out)).toMatchObject({ runners: ['js-runner', 'py-runner', 'wasm-runner'], capacity: 3, deployment: 'cli' });
    ws.cleanup();
    rmSync(cache, { recursive: true, force: true });
  });
});

describe('machines started in any order', () => {
  it('a worker and an engine started before the NATS server wait for it; the engine fails remote calls meanwhile and says why', async () => {
    const server = await startNats();
    await server.stop();
    const ws = tempWorkspace();
    writeFileSync(join(ws.workspace, 'p', 'tools', 'echo.json'), definition({ id: 'echo', entry: 'echo.js' }));
    writeFileSync(join(ws.workspace, 'p', 'tools', 'echo.js'), 'export default async function run(input) { return input; }');
    writeFileSync(
      join(ws.workspace, 'p', 'arium.json'),
      JSON.stringify({ remote: { nats: server.url, deployment: 'late', runners: ['js-runner'] } }),
    );
    const stop = new AbortController();
    const serving = runCli(ws.root, ['worker', '--nats', server.url, '--deployment', 'late', '--heartbeat-ms', '100'], { interrupt: stop.signal });
    try {
      const early = await runCli(ws.root, ['--workspace', ws.workspace, '--project', 'p', 'call', 'echo', '{"a":1}', '--json']);
      expect(JSON.parse(early.out)).toMatchObject({
        ok: false,
        error: { stage: 'transport', code: 'UNAVAILABLE', retryable: true, details: { reason: 'unreachable' } },
      });
      expect(JSON.parse(early.out).error.message).toMatch(
        /has not been reached since the engine started \(Could not connect.*\); the engine keeps trying/,
      );
      const engine = await remoteEngine({ workspace: ws.workspace, project: 'p' } as never, server.url, { deployment: 'late' });
      try {
        expect((await engine.status()).remote).toMatchObject({ connected: false, problem: expect.stringMatching(/Could not connect/) });
        // Local tools work while the server is away.
        expect(await engine.call('fs.write', { path: '/x.txt', content: 'x' })).toMatchObject({ ok: true });
        await server.start();
        let result = await engine.call('echo', { a: 2 });
        for (let i = 0; i < 200 && !result.ok; i++) {
          await new Promise((resolve) => setTimeout(resolve, 50));
          result = await engine.call('echo', { a: 2 });
        }
        expect(result).toMatchObject({ ok: true, data: { a: 2 }, meta: { worker: { id: expect.any(String) } } });
        expect((await engine.status()).remote).not.toHaveProperty('problem');
      } finally {
        await engine.close();
      }
    } finally {
      stop.abort();
      const run = await serving;
      await server.stop();
      ws.cleanup();
      expect(run.code).toBe(0);
      expect(run.err).toMatch(
        /Could not connect to the NATS server at .*; trying again until it answers[\s\S]*runs js-runner, py-runner[\s\S]*stopped/,
      );
    }
  });
});

describe('remote.tools', () => {
  it('sends only the tools it names to workers; the rest run locally', async () => {
    const project = tempProject(
      {
        'heavy.json': definition({ id: 'heavy.sum', entry: 'sum.js' }),
        'light.json': definition({ id: 'light.sum', entry: 'sum.js' }),
        'sum.js': 'export default async function run(input) { return { sum: input.a + input.b }; }',
      },
      'arium-remote-',
    );
    const open = await startNats();
    try {
      const worker = await workers.start(open.url);
      const engine = await remoteEngine(project, open.url, { runners: [], tools: ['heavy.*'] });
      try {
        const heavy = await engine.call('heavy.sum', { a: 1, b: 2 });
        const light = await engine.call('light.sum', { a: 1, b: 2 });
        expect(heavy).toMatchObject({ ok: true, data: { sum: 3 }, meta: { worker: { id: worker.id } } });
        expect(light).toMatchObject({ ok: true, data: { sum: 3 } });
        expect(light.meta.worker).toBeUndefined();
      } finally {
        await engine.close();
      }
    } finally {
      await workers.closeAll();
      await open.stop();
      project.remove();
    }
  });
});

describe('a worker’s own machine settings', () => {
  it('runs Python tools on its own interpreter; a configured one that is missing fails MISCONFIGURED', async () => {
    const project = tempProject(
      {
        'py.json': definition({ id: 'py.echo', runner: 'py-runner', entry: 'echo.py', permissions: ['exec.py'] }),
        'echo.py': 'def run(input, ctx):\n    return {"got": input}\n',
      },
      'arium-remote-',
    );
    const open = await startNats();
    try {
      const good = await workers.start(open.url, { runners: ['py-runner'], deployment: 'good' });
      await workers.start(open.url, { runners: ['py-runner'], deployment: 'bad', runnerConfig: { python: '/nonexistent/bin/python3' } });
      const engines = await Promise.all(['good', 'bad'].map((deployment) => remoteEngine(project, open.url, { deployment, runners: ['py-runner'] })));
      try {
        const [ok, missing] = await Promise.all(engines.map((e) => e.call('py.echo', { a: 1 })));
        expect(ok).toMatchObject({ ok: true, data: { got: { a: 1 } }, meta: { worker: { id: good.id } } });
        expect(missing).toMatchObject({ ok: false, error: { code: 'MISCONFIGURED' } });
      } finally {
        await Promise.all(engines.map((e) => e.close()));
      }
    } finally {
      await workers.closeAll();
      await open.stop();
      project.remove();
    }
  });
});
