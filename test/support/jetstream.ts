// nats-server with JetStream on loopback for the JetStream store's tests: one server, or a cluster of three.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { freePort, natsServerPath } from '../../bench/nats-server.js';

export interface JetStreamCluster {
  /** Client URLs, one a server. */
  readonly urls: string[];
  /** Kills server `i` outright (SIGKILL). */
  kill(i: number): Promise<void>;
  /** Starts server `i` again, on its port and storage. */
  start(i: number): Promise<void>;
  /** The command line that starts server `i` (for a process that starts it later by itself). */
  command(i: number): string[];
  /** Stops every server and removes their storage. */
  remove(): Promise<void>;
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.connect(port, '127.0.0.1');
  });
}

/** Waits until JetStream answers (a cluster elects its meta leader first). */
export async function jetStreamReady(urls: string[]): Promise<void> {
  const nc = await connect({ servers: urls });
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await (await jetstreamManager(nc, { timeout: 1000 })).getAccountInfo();
        return;
      } catch (error) {
        if (attempt > 120) throw error;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  } finally {
    await nc.close();
  }
}

/**
 * `size` servers (1, or 3 routed as one cluster), each with JetStream and its own storage folder; only
 * the first `started` of them run (the others can be started later, as a cluster still forming).
 */
export async function startJetStream(size: 1 | 3 = 1, started: number = size): Promise<JetStreamCluster> {
  const binary = natsServerPath();
  if (!binary) throw new Error('nats-server is not installed (apt-get install nats-server)');
  const root = mkdtempSync(join(tmpdir(), 'arium-jetstream-'));
  const ports = await Promise.all(Array.from({ length: size }, () => freePort()));
  const routes = await Promise.all(Array.from({ length: size }, () => freePort()));
  const children: (ChildProcess | null)[] = Array.from({ length: size }, () => null);
  const args = (i: number): string[] => {
    const base = ['-a', '127.0.0.1', '-p', String(ports[i]), '-js', '-sd', join(root, `s${i}`), '-n', `s${i}`];
    if (size === 1) return base;
    const others = routes.filter((_, j) => j !== i).map((p) => `nats://127.0.0.1:${p}`);
    return [...base, '--cluster_name', 'arium', '--cluster', `nats://127.0.0.1:${routes[i]}`, '--routes', others.join(',')];
  };
  const start = async (i: number) => {
    children[i] = spawn(binary, args(i), { stdio: 'ignore' });
    for (let t = 0; t < 400; t++) {
      if (await listening(ports[i] as number)) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`nats-server ${i} did not listen on ${ports[i]}`);
  };
  const kill = async (i: number) => {
    const child = children[i];
    children[i] = null;
    if (!child || child.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  };
  await Promise.all(ports.slice(0, started).map((_, i) => start(i)));
  await jetStreamReady(ports.slice(0, started).map((p) => `nats://127.0.0.1:${p}`));
  return {
    urls: ports.map((p) => `nats://127.0.0.1:${p}`),
    kill,
    start,
    command: (i) => [binary, ...args(i)],
    remove: async () => {
      await Promise.all(ports.map((_, i) => kill(i)));
      rmSync(root, { recursive: true, force: true });
    },
  };
}
