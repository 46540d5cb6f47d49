import { mkdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { daemonPaths } from '../src/daemon/paths.js';
import { createGateway } from '../src/surfaces/http/gateway.js';

/**
 * The daemon bench/daemon-cli.ts measures against: a gateway served on the workspace's socket, as the
 * daemon serves it. `node daemon-cli-host.js <workspace> <project>`; prints `ready` once it listens,
 * stops when its stdin ends. XDG_RUNTIME_DIR places the socket, as for the `arium` command.
 */
const [workspace, project] = process.argv.slice(2) as [string, string];
const paths = daemonPaths(workspace, process.env);
mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
rmSync(paths.socket, { force: true });
const gateway = await createGateway({ workspace, project, inspector: false });
await gateway.app.ready();
// Opened before the first command, as a daemon that has served a client has it.
await gateway.project(project);
const server = createServer((req, res) => gateway.app.routing(req, res));
await new Promise<void>((resolve) => server.listen(paths.socket, resolve));
process.stdout.write('ready\n');
process.stdin.resume();
process.stdin.on('end', async () => {
  server.closeAllConnections();
  server.close();
  await gateway.close();
  rmSync(paths.socket, { force: true });
  process.exit(0);
});
