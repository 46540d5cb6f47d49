import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { daemonPaths } from '../src/daemon/paths.js';
import { median } from './stats.js';

/**
 * The `arium` command through a running workspace daemon: the wall time from spawning the process to its
 * exit, min / median / max over interleaved rounds, beside `node -e 0`, for `arium call fs.read` and
 * `arium tools`. Where the time goes: Node's start (`node -e 0`), loading the thin client
 * (`bin/arium.js` and src/daemon/thin-cli.ts, on `node -e 0`), a round trip on the socket (`GET
 * /healthz` from a warm process), and the daemon's work (the same `POST /v1/cli` from a warm process:
 * the route, the CLI's main and the call). The same commands in-process (`--no-daemon`, on a project no
 * daemon holds) for comparison. Each answer is checked.
 */
const ROUNDS = 15;
const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const arium = join(root, 'bin', 'arium.js');
const thin = join(root, 'dist', 'src', 'daemon', 'thin-cli.js');

const round1 = (n: number) => Math.round(n * 10) / 10;
function summary(values: number[]): Record<string, number> {
  return { min_ms: round1(Math.min(...values)), median_ms: round1(median(values)), max_ms: round1(Math.max(...values)) };
}

function wall(args: string[], env: NodeJS.ProcessEnv, check: (stdout: string) => boolean): number {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', env: { ...env, NO_COLOR: '1' } });
  const ms = performance.now() - t0;
  if (r.status !== 0 || !check(r.stdout)) throw new Error(`node ${args.join(' ')} failed (${r.status}): ${r.stdout} ${r.stderr}`);
  return ms;
}

/** One request on a new connection to the socket (as the thin client makes it); resolves with its time once the answer has ended. */
function timed(socket: string, method: string, path: string, body?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const headers: Record<string, string | number> = { host: 'localhost', 'x-arium-client': 'cli' };
    if (body !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    const req = request({ socketPath: socket, method, path, agent: false, headers }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString()));
      res.on('end', () =>
        res.statusCode === 200 && (body === undefined || text.endsWith('{"exit":0}\n')) ? resolve(performance.now() - t0) : reject(new Error(text)),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** `arium daemon start` (detached, as a client starts it) or `stop`, to its end: its wall time. */
function daemon(action: 'start' | 'stop', workspace: string, env: NodeJS.ProcessEnv): number {
  return wall(['--no-node-snapshot', arium, '--workspace', workspace, 'daemon', action], env, () => true);
}

export async function benchDaemonCli(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-daemon-cli-'));
  const workspace = join(dir, 'workspace');
  const alone = join(dir, 'alone');
  const xdg = join(dir, 'run');
  mkdirSync(xdg, { mode: 0o700 });
  for (const ws of [workspace, alone]) mkdirSync(join(ws, 'demo', 'tools'), { recursive: true });
  const env = { ...process.env, XDG_RUNTIME_DIR: xdg };
  const write = JSON.stringify({ path: '/README.md', content: '# bench\n' });
  for (const ws of [workspace, alone]) wall([arium, '--workspace', ws, 'call', 'fs.write', write], env, () => true);
  // A daemon's first start, from nothing to answering (`arium daemon start` waits for it), against the
  // in-process engine's start that every command paid before (`arium tools --no-daemon`).
  const coldStarts: number[] = [];
  const engineStarts: number[] = [];
  for (let round = 0; round < 5; round++) {
    coldStarts.push(daemon('start', workspace, env));
    daemon('stop', workspace, env);
    engineStarts.push(wall([arium, '--workspace', workspace, 'tools', '--no-daemon'], env, (out) => out.includes('fs.read')));
  }
  daemon('start', workspace, env);
  try {
    const socket = daemonPaths(workspace, env).socket;
    const read = ['call', 'fs.read', '{"path":"/README.md"}'];
    const kinds: Array<[string, () => number]> = [
      ['node_e0', () => wall(['-e', '0'], env, () => true)],
      ['load_thin_client', () => wall(['--input-type=module', '-e', `await import(${JSON.stringify(thin)})`], env, () => true)],
      ['daemon_call_fs_read', () => wall([arium, '--workspace', workspace, ...read], env, (out) => out.includes('# bench'))],
      ['daemon_tools', () => wall([arium, '--workspace', workspace, 'tools'], env, (out) => out.includes('fs.read'))],
      ['in_process_call_fs_read', () => wall([arium, '--workspace', alone, ...read], env, (out) => out.includes('# bench'))],
      ['in_process_tools', () => wall([arium, '--workspace', alone, 'tools'], env, (out) => out.includes('fs.read'))],
    ];
    const cliBody = (argv: string[]) =>
      JSON.stringify({ argv: ['--workspace', workspace, ...argv], cwd: dir, env: {}, stdout_tty: false, stderr_tty: false });
    const inDaemon: Array<[string, () => Promise<number>]> = [
      ['socket_round_trip', () => timed(socket, 'GET', '/healthz')],
      ['daemon_work_call_fs_read', () => timed(socket, 'POST', '/v1/cli', cliBody(read))],
      ['daemon_work_tools', () => timed(socket, 'POST', '/v1/cli', cliBody(['tools']))],
    ];
    // Warm the page cache, the compile caches and the daemon's first load of the CLI.
    for (const [, once] of kinds) once();
    for (const [, once] of inDaemon) await once();
    const samples = new Map<string, number[]>([...kinds, ...inDaemon].map(([name]) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, once] of kinds) samples.get(name)?.push(once());
      for (const [name, once] of inDaemon) samples.get(name)?.push(await once());
    }
    const out: Record<string, unknown> = {
      rounds: ROUNDS,
      daemon_first_start: summary(coldStarts),
      in_process_engine_start_tools: summary(engineStarts),
    };
    for (const [name, values] of samples) out[name] = summary(values);
    const med = (name: string) => median(samples.get(name) ?? []);
    out.call_fs_read_breakdown_median_ms = {
      node_start: round1(med('node_e0')),
      thin_client_load: round1(med('load_thin_client') - med('node_e0')),
      daemon_work_with_round_trip: round1(med('daemon_work_call_fs_read')),
      rest: round1(med('daemon_call_fs_read') - med('load_thin_client') - med('daemon_work_call_fs_read')),
    };
    return out;
  } finally {
    daemon('stop', workspace, env);
    rmSync(dir, { recursive: true, force: true });
  }
}
