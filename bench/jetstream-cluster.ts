// nats-servers with JetStream on loopback for the store benchmark: one, or three routed as one cluster.
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { freePort, natsServerPath } from './nats-server.js';

export interface Servers {
  urls: string[];
  stop(): void;
}

/** `size` servers storing under `dir`, once JetStream answers (a cluster elects its meta leader first). */
export async function startServers(dir: string, size: 1 | 3): Promise<Servers> {
  const binary = natsServerPath();
  if (!binary) throw new Error('nats-server is not installed (apt-get install nats-server)');
  const ports = await Promise.all(Array.from({ length: size }, () => freePort()));
  const routes = await Promise.all(Array.from({ length: size }, () => freePort()));
  const children: ChildProcess[] = ports.map((port, i) => {
    const args = ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(dir, `s${size}-${i}`), '-n', `s${i}`];
    if (size === 3) {
      const others = routes.filter((_, j) => j !== i).map((p) => `nats://127.0.0.1:${p}`);
      args.push('--cluster_name', 'bench', '--cluster', `nats://127.0.0.1:${routes[i]}`, '--routes', others.join(','));
    }
    return spawn(binary, args, { stdio: 'ignore' });
  });
  const urls = ports.map((p) => `nats://127.0.0.1:${p}`);
  const stop = () => {
    for (const child of children) child.kill('SIGKILL');
  };
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        const nc = await connect({ servers: urls, timeout: 1000 });
        try {
          await (await jetstreamManager(nc, { timeout: 1000 })).getAccountInfo();
          return { urls, stop };
        } finally {
          await nc.close();
        }
      } catch (error) {
        if (attempt > 120) throw error;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  } catch (error) {
    stop();
    throw error;
  }
}
