import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import type { Engine } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';

/**
 * The engine side of the soak benchmark (bench/soak.ts), in a process of its own so that the soak can
 * kill it with SIGKILL and start it again: the HTTP gateway (with `/mcp`) on a fixed loopback port,
 * and the library API over Node IPC: `call` runs `engine.call`, `read` reads paths of the live tree
 * (the soak's check of acknowledged writes), `status` answers the engine's status with this process's
 * RSS and open descriptors. Started as `node dist/bench/soak-host.js <workspace> <project> <port>`.
 */

type Request =
  | { id: number; op: 'call'; tool: string; input: Record<string, unknown> }
  | { id: number; op: 'read'; paths: string[] }
  | { id: number; op: 'status'; gc?: boolean };

const [workspace, project, port] = process.argv.slice(2);
if (!workspace || !project || !port || !process.send) {
  process.stderr.write('usage (as a forked child): soak-host.js <workspace> <project> <port>\n');
  process.exit(2);
}
const send = process.send.bind(process);

const gateway = await createGateway({ workspace, project, inspector: false, engineOptions: { watch: false } });
const address = await gateway.app.listen({ host: '127.0.0.1', port: Number(port) });
// The gateway opens a project on its first request: make it now, so the IPC calls share its engine.
await gateway.app.inject({ method: 'GET', url: '/v1/tools' });
const engine = gateway.engines().get(project) as Engine;

/** Socket inodes of TCP connections the gateway accepted (local port = its port), from /proc/net/tcp. */
function gatewayConnections(): Set<string> {
  const inodes = new Set<string>();
  const hex = Number(port).toString(16).toUpperCase().padStart(4, '0');
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is "IP:PORT" in hex; state 0A is LISTEN; the inode is the tenth field.
      if (fields[1]?.endsWith(`:${hex}`) && fields[3] !== '0A' && fields[9]) inodes.add(fields[9]);
    }
  }
  return inodes;
}

/**
 * Open descriptors by kind (socket, pipe, anon_inode, file), from /proc/self/fd; the gateway's
 * accepted connections apart (they are the clients' keep-alive connections), and the files by name.
 */
function descriptors(): Record<string, number | string[]> {
  const kinds: Record<string, number> = { total: 0 };
  const files: string[] = [];
  const accepted = gatewayConnections();
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // the descriptor readdir itself used, closed by now
    }
    let kind = /^([a-z_]+):/.exec(target)?.[1] ?? 'file';
    if (kind === 'socket' && accepted.has(/\[(\d+)\]/.exec(target)?.[1] ?? '')) kind = 'gateway_connection';
    if (kind === 'file') files.push(target.startsWith(workspace as string) ? target.slice((workspace as string).length) : target);
    kinds[kind] = (kinds[kind] ?? 0) + 1;
    kinds.total = (kinds.total ?? 0) + 1;
  }
  return { ...kinds, files: files.sort() };
}

async function answer(request: Request): Promise<unknown> {
  switch (request.op) {
    case 'call':
      return engine.call(request.tool, request.input, { caller: 'soak-library' });
    case 'read':
      return request.paths.map((path) => (engine.vfs.exists(path) ? engine.vfs.read(path).toString('utf8') : null));
    case 'status': {
      if (request.gc && globalThis.gc) globalThis.gc();
      return {
        pid: process.pid,
        rss: process.memoryUsage().rss,
        fds: descriptors(),
        engine: await engine.status(),
      };
    }
  }
}

process.on('message', (message: Request) => {
  answer(message).then(
    (value) => send({ id: message.id, value }),
    (error: Error) => send({ id: message.id, error: error.message }),
  );
});
process.once('disconnect', () => {
  void gateway.close().finally(() => process.exit(0));
});
send({ ready: true, address, pid: process.pid });
