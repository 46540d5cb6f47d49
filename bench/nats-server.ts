// A nats-server on loopback for the remote-runner tests and benchmark (Debian installs it in /usr/sbin).
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

/** nats-server: on PATH, else Debian's /usr/sbin (not on every user's PATH). */
export function natsServerPath(): string | null {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin']) {
    if (dir && existsSync(join(dir, 'nats-server'))) return join(dir, 'nats-server');
  }
  return null;
}

/** A TCP port free on loopback now (the soak's gateway takes one too). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
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

export interface NatsServer {
  readonly port: number;
  readonly url: string;
  stop(): Promise<void>;
  /** Starts it again on the same port (after stop). */
  start(): Promise<void>;
}

/** A nats-server on loopback on a free port, with `--user/--pass`, `--auth`, or a config file admitting one nkey user when given. */
export async function startNats(
  auth: { user?: string; pass?: string; token?: string; nkey?: string; tls?: { cert: string; key: string } } = {},
): Promise<NatsServer> {
  const binary = natsServerPath();
  if (!binary) throw new Error('nats-server is not installed (apt-get install nats-server)');
  const port = await freePort();
  const args = ['-a', '127.0.0.1', '-p', String(port)];
  if (auth.user) args.push('--user', auth.user, '--pass', auth.pass ?? '');
  if (auth.token) args.push('--auth', auth.token);
  if (auth.tls) args.push('--tls', '--tlscert', auth.tls.cert, '--tlskey', auth.tls.key);
  let child: ChildProcess | null = null;
  const start = async () => {
    // The nkey config is written for each start and removed once the server has read it (it listens).
    const config = auth.nkey ? mkdtempSync(join(tmpdir(), 'arium-nats-')) : null;
    if (config) writeFileSync(join(config, 'nkey.conf'), `authorization { users = [ { nkey: "${auth.nkey}" } ] }\n`);
    child = spawn(binary, config ? [...args, '-c', join(config, 'nkey.conf')] : args, { stdio: 'ignore' });
    try {
      for (let i = 0; i < 200; i++) {
        if (await listening(port)) return;
        await new Promise((r) => setTimeout(r, 25));
      }
      throw new Error(`nats-server did not listen on ${port}`);
    } finally {
      if (config) rmSync(config, { recursive: true, force: true });
    }
  };
  const stop = async () => {
    const running = child;
    child = null;
    if (!running || running.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      running.once('exit', () => resolve());
      running.kill('SIGKILL');
    });
  };
  await start();
  return { port, url: `nats://127.0.0.1:${port}`, stop, start };
}
