import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, createInbox } from '@nats-io/transport-node';
import { natsProviderKind } from '../src/providers/nats.js';
import type { ProviderCallContext } from '../src/providers/provider.js';
import { decodeMessage, encodeMessage, SATELLITE_PROTOCOL, satelliteSubjects } from '../src/satellite/wire.js';
import { startNats } from './nats-server.js';
import { median, percentile } from './stats.js';

/**
 * The `nats` provider's cost per call: the same `echo` call on the same satellite (a real `arium
 * provide` process serving fixtures/satellites/echo.mjs) sent by a bare NATS client that speaks the
 * satellite protocol and nothing more (publish the call, wait for `done` on an inbox), and through the
 * provider (routing, watchdogs, outcome checks), in alternating rounds of the same run. Everything is on
 * one machine over loopback. `node --no-node-snapshot dist/bench/run.js providers-nats` runs this suite.
 */

const here = dirname(fileURLToPath(import.meta.url));
const root = [join(here, '..'), join(here, '..', '..')].find((dir) => existsSync(join(dir, 'bin', 'arium.js'))) as string;
const us = (ms: number) => Math.round(ms * 1000);

export async function benchProvidersNats(flags: ReadonlyMap<string, string>): Promise<Record<string, unknown>> {
  const rounds = Number(flags.get('rounds') ?? 20);
  const perRound = Number(flags.get('calls') ?? 100);
  const nats = await startNats();
  const deployment = 'bench';
  const satellite: ChildProcess = spawn(
    process.execPath,
    [
      join(root, 'bin', 'arium.js'),
      'provide',
      join(root, 'fixtures', 'satellites', 'echo.mjs'),
      '--nats',
      nats.url,
      '--deployment',
      deployment,
      '--node-id',
      'bench-node',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  await new Promise<void>((ready, failed) => {
    let err = '';
    satellite.stderr?.on('data', (d) => {
      err += d;
      if (err.includes('serves echo')) ready();
    });
    satellite.once('exit', (code) => failed(new Error(`arium provide exited (${code}): ${err}`)));
  });
  const provider = natsProviderKind.create('bench', natsProviderKind.parse({ servers: nats.url, deployment }, '/providers/bench/nats'), {
    projectDir: root,
    secret: () => undefined,
    log: () => {},
  });
  const nc = await connect({ servers: nats.url });
  try {
    await provider.start();
    if (provider.tools().length === 0) throw new Error('the provider did not see the satellite');
    // The bare client: one inbox subscription, the call published to the node's subject (where the
    // provider sends it too: the sole node offering the tool).
    const inbox = createInbox();
    const waiting = new Map<string, () => void>();
    nc.subscribe(`${inbox}.*`, {
      callback: (_error, msg) => {
        const message = decodeMessage(msg.data);
        if (message?.t !== 'done') return;
        if (message.ok !== true) throw new Error(`direct call failed: ${JSON.stringify(message)}`);
        waiting.get(msg.subject.slice(inbox.length + 1))?.();
      },
    });
    const subject = satelliteSubjects(deployment).node('bench-node', 'echo');
    let seq = 0;
    const direct = () =>
      new Promise<void>((resolve) => {
        const id = `c${++seq}`;
        waiting.set(id, () => {
          waiting.delete(id);
          resolve();
        });
        const call = { t: 'call', v: SATELLITE_PROTOCOL, id, tool: 'echo', input: { text: 'hi' }, run_id: id, trace_id: id, timeout_ms: 30_000 };
        nc.publish(subject, encodeMessage(call), { reply: `${inbox}.${id}` });
      });
    const ctx = (): ProviderCallContext => ({ signal: new AbortController().signal, timeoutMs: 30_000, runId: 'r', traceId: 't' });
    const viaProvider = async () => {
      const outcome = await provider.call('echo', { text: 'hi' }, ctx());
      if (!outcome.ok) throw new Error(`provider call failed: ${outcome.message}`);
    };
    const times = { direct: [] as number[], provider: [] as number[] };
    const time = async (into: number[], fn: () => Promise<void>) => {
      for (let i = 0; i < perRound; i++) {
        const t0 = performance.now();
        await fn();
        into.push(performance.now() - t0);
      }
    };
    // Warm both paths, then alternate rounds so that drift of the machine falls on both alike.
    await time([], direct);
    await time([], viaProvider);
    for (let r = 0; r < rounds; r++) {
      await time(times.direct, direct);
      await time(times.provider, viaProvider);
    }
    const directMedian = median(times.direct);
    const providerMedian = median(times.provider);
    return {
      calls: rounds * perRound,
      direct_median_us: us(directMedian),
      direct_p99_us: us(percentile(times.direct, 0.99)),
      provider_median_us: us(providerMedian),
      provider_p99_us: us(percentile(times.provider, 0.99)),
      overhead_median_us: us(providerMedian - directMedian),
      target_us: 1000,
    };
  } finally {
    await provider.close();
    await nc.close();
    // The satellite leaves while the server is up (its last heartbeat says so), then the server stops.
    const exited = new Promise((done) => satellite.once('exit', done));
    satellite.kill('SIGTERM');
    await exited;
    await nats.stop();
  }
}
