import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsServerPath } from '../bench/nats-server.js';
import { JetStreamStore } from '../src/store/jetstream-store.js';
import { type JetStreamCluster, startJetStream } from './support/jetstream.js';

// A cluster still forming refuses three replicas ("no suitable peers for placement") until its third
// server has joined: opening a project then waits for it, as for a leader election, instead of failing.
describe.skipIf(!natsServerPath() && !process.env.CI)('JetStream store on a cluster still forming', () => {
  let cluster: JetStreamCluster;
  let late: ChildProcess | null = null;
  beforeAll(async () => {
    // Two servers of three, the third never seen yet by the others.
    cluster = await startJetStream(3, 2);
  });
  afterAll(async () => {
    late?.kill('SIGKILL');
    await cluster?.remove();
  });

  it('opens a three-replica project once the third server joins, not before', async () => {
    // The opening blocks this thread, so the third server is started by a process of its own a moment later.
    const [binary, ...args] = cluster.command(2);
    late = spawn('sh', ['-c', 'sleep 1.5; exec "$0" "$@"', binary as string, ...args], { stdio: 'ignore' });
    const store = new JetStreamStore({ servers: cluster.urls.slice(0, 2), name: 'forming', replicas: 3, leaseMs: 1500, timeoutMs: 20_000 });
    try {
      expect(store.location).toBe('nats:forming');
      expect(late.exitCode).toBe(null);
    } finally {
      store.close();
    }
  });
});
