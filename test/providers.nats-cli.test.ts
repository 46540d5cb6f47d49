import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsProviderKind } from '../src/providers/nats.js';
import type { ProviderCallContext } from '../src/providers/provider.js';
import { runCli } from './cli.helpers.js';
import { type NatsServer, natsServerPath, startNats } from './support/nats.js';

const hasNats = natsServerPath() !== null || Boolean(process.env.CI);
const FIXTURE = resolve('fixtures/satellites/echo.mjs');
let nats: NatsServer;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'arium-provide-'));
  if (hasNats) nats = await startNats();
});
afterAll(async () => {
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ctx = (): ProviderCallContext => ({ signal: new AbortController().signal, timeoutMs: 10_000, runId: 'r', traceId: 't' });

describe('arium provide', () => {
  it.each([
    [[], /Name the module whose tools to serve/],
    [['x.mjs'], /Name the NATS server/],
    [['tools.py', '--nats', 'nats://127.0.0.1:1'], /runs JavaScript modules; run a Python satellite with python3/],
    [['none.mjs', '--nats', 'nats://127.0.0.1:1'], /exports no tools: export const tools = \[/],
    [['bad.mjs', '--nats', 'nats://127.0.0.1:1'], /tools\[0\]\.name must be 1 to 64 letters/],
    [[FIXTURE, '--nats', 'nats://10.1.2.3:4222'], /refusing to use the NATS server at 10\.1\.2\.3.*without credentials/],
  ])('refuses %j with a clear error and exit 2', async (args, message) => {
    writeFileSync(join(dir, 'none.mjs'), 'export const version = "1";\n');
    writeFileSync(join(dir, 'bad.mjs'), 'export default [{ name: "a.b", inputSchema: {}, handler() {} }];\n');
    const run = await runCli(dir, ['provide', ...args]);
    expect(run.err).toMatch(message);
    expect(run.code).toBe(2);
  });

  it('says so when the module cannot be loaded (exit 3)', async () => {
    const run = await runCli(dir, ['provide', 'missing.mjs', '--nats', 'nats://127.0.0.1:1']);
    expect(run.code).toBe(3);
    expect(run.err).toMatch(/Cannot load .*missing\.mjs/);
  });

  it.skipIf(!hasNats)('serves a module’s tools until interrupted, then leaves', async () => {
    const deployment = `cli${process.pid}`;
    const stop = new AbortController();
    const running = runCli(
      dir,
      ['provide', FIXTURE, '--nats', nats.url, '--deployment', deployment, '--node-id', 'cli-node', '--heartbeat-ms', '100'],
      {
        interrupt: stop.signal,
      },
    );
    const p = natsProviderKind.create('sat', natsProviderKind.parse({ servers: nats.url, deployment }, '/p'), {
      projectDir: dir,
      secret: () => undefined,
      log: () => {},
    });
    try {
      await p.start();
      for (let i = 0; p.tools().length === 0 && i < 200; i++) await new Promise((r) => setTimeout(r, 25));
      expect(p.tools().map((t) => t.name)).toEqual(['echo', 'sleep']);
      expect(await p.call('echo', { text: 'hi' }, ctx())).toEqual({ ok: true, data: { text: 'hi', node: 'cli-node' } });
      const gone = new Promise<void>((done) => p.onToolsChanged(() => p.tools().length === 0 && done()));
      stop.abort();
      const run = await running;
      expect(run.code).toBe(0);
      expect(run.err).toMatch(/satellite cli-node serves echo, sleep \(16 at once\) for deployment "cli/);
      // Its last heartbeat says it is leaving: the tools go at once.
      await gone;
    } finally {
      stop.abort();
      await p.close();
    }
  });
});
