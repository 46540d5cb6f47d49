import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { daemonPaths } from '../../src/daemon/paths.js';
import { socketFetch } from '../../src/daemon/socket-fetch.js';
import { type TempProject, tempProject } from './project.js';

/** Real daemons in temp workspaces, each with its own XDG_RUNTIME_DIR, always killed afterwards. */

export const BIN = join(import.meta.dirname, '..', '..', 'bin', 'arium.js');

export interface DaemonFixture {
  project: TempProject;
  /** The test's XDG_RUNTIME_DIR (0700, as mkdtemp makes it). */
  runtime: string;
  env: Record<string, string>;
  paths: ReturnType<typeof daemonPaths>;
}

const made: DaemonFixture[] = [];
const children: ChildProcess[] = [];

export function daemonFixture(files: Record<string, string> = {}): DaemonFixture {
  const project = tempProject(files, 'arium-daemon-');
  const runtime = mkdtempSync(join(tmpdir(), 'arium-daemon-run-'));
  const env = { PATH: process.env.PATH ?? '', XDG_RUNTIME_DIR: runtime };
  const fixture = { project, runtime, env, paths: daemonPaths(project.workspace, env) };
  made.push(fixture);
  return fixture;
}

function kill(pid: unknown): void {
  // A test may name itself as a fake daemon's pid.
  if (typeof pid !== 'number' || pid === process.pid) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pids of the daemon record and lock of every fixture, killed; their folders removed. */
export function cleanUpDaemons(): void {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  for (const fixture of made.splice(0)) {
    for (const file of [fixture.paths.record, fixture.paths.lock]) {
      try {
        kill(JSON.parse(readFileSync(file, 'utf8')).pid);
      } catch {}
    }
    fixture.project.remove();
    rmSync(fixture.runtime, { recursive: true, force: true });
  }
}

/** Runs `arium …` to its end, with the fixture's environment. */
export function arium(
  fixture: DaemonFixture,
  args: string[],
  options: { env?: Record<string, string> } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--no-node-snapshot', BIN, '--workspace', fixture.project.workspace, ...args], {
      env: { ...fixture.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr?.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

export async function waitFor(condition: () => boolean | Promise<boolean>, ms = 30_000, what = 'condition'): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`${what} not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function readLog(fixture: DaemonFixture): string {
  return existsSync(fixture.paths.log) ? readFileSync(fixture.paths.log, 'utf8') : '';
}

/** Runs a tool of project `p` over the daemon's socket. */
export async function runOverSocket(
  fixture: DaemonFixture,
  tool: string,
  input: unknown,
  headers: Record<string, string> = {},
): Promise<Record<string, unknown>> {
  const response = await socketFetch(fixture.paths.socket, { connection: 'close', ...headers })(`/p/p/v1/tools/${tool}:run`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input }),
  });
  return { status: response.status, ...((await response.json()) as Record<string, unknown>) };
}
