import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf } from './support/js-engine.js';
import { type NatsServer, startNats } from './support/nats.js';
import { type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';
import { compileC, toolchain } from './support/wasm.js';

// WebAssembly tools on a remote worker over a real nats-server: the module travels with the tools
// folder (content-addressed), file calls come back to the engine's VFS, and the limits hold there.

describe.runIf(toolchain('c'))('wasm tools on a remote worker', () => {
  let nats: NatsServer;
  const workers = new Workers();
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    nats = await startNats();
    project = tempProject({}, 'arium-remote-wasm-');
    const tool = (id: string, entry: string, fields: Record<string, unknown> = {}) =>
      project.write(
        `${id}.json`,
        JSON.stringify({ id, description: id, runner: 'wasm-runner', entry, schema: { type: 'object' }, permissions: ['exec.wasm'], ...fields }),
      );
    compileC('sum.c', join(project.tools, 'sum.wasm'));
    compileC('files.c', join(project.tools, 'files.wasm'));
    compileC('hostile.c', join(project.tools, 'grow.wasm'), ['GROW']);
    tool('sum', 'sum.wasm', { limits: { timeout_ms: 20_000 } });
    tool('files', 'files.wasm', { permissions: ['exec.wasm', 'vfs.read:/data/**', 'vfs.write:/out/**'], limits: { timeout_ms: 20_000 } });
    tool('grow', 'grow.wasm', { limits: { timeout_ms: 10_000, memory_mb: 32 } });
    await workers.start(nats.url);
    engine = await remoteEngine(project, nats.url, { runners: ['wasm-runner'] });
    engine.vfs.write('/data/in.txt', 'hello world');
  });

  afterAll(async () => {
    await engine?.close();
    await workers.closeAll();
    await nats.stop();
    project.remove();
  });

  it('runs a module on the worker', async () => {
    const result = await engine.call('sum', { numbers: [1, 2, 3.5] });
    expect(dataOf(result)).toEqual({ sum: 6.5 });
    expect(result.meta).toMatchObject({ worker: { id: expect.any(String) }, logs: [{ level: 'log', message: 'summed' }] });
  });

  it("reads and writes the engine's VFS through its checks, and refuses '..' out of a preopen", async () => {
    expect(dataOf(await engine.call('files', { escape: '/data/../secret.txt' }))).toEqual({ read: 11, entries: 3, escape_errno: 76 });
    expect(engine.vfs.read('/out/len.txt').toString()).toBe('11');
  });

  it('stops a module growing past memory_mb with MEMORY_LIMIT there', async () => {
    expect(errorOf(await engine.call('grow', {}))).toMatchObject({ code: 'MEMORY_LIMIT', details: { memory_mb: 32 } });
    expect(dataOf(await engine.call('sum', { numbers: [2] }))).toEqual({ sum: 2 });
  });
});
