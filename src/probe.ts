import { execFile } from 'node:child_process';

/**
 * What `arium doctor` asks the machine. Each probe runs a real command in a child process with a
 * timeout, because "installed" is not "usable": a binary may exist but be refused namespaces, and a
 * native module may exist but be built for another Node. A missing binary or a hang is an answer,
 * never an exception. Each runner's definition brings its own probes (`RunnerDefinition.probe`).
 */

export type { Check } from './runner.js';

export interface ProbeRun {
  code: number | null;
  stdout: string;
  stderr: string;
  error?: string;
}

export const PROBE_TIMEOUT_MS = 10_000;

export function run(file: string, args: string[], timeoutMs = PROBE_TIMEOUT_MS): Promise<ProbeRun> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: timeoutMs, encoding: 'utf8', killSignal: 'SIGKILL' }, (error, stdout, stderr) => {
      const err = error as (NodeJS.ErrnoException & { code?: number | string; killed?: boolean }) | null;
      if (err && typeof err.code === 'string') resolve({ code: null, stdout, stderr, error: err.code === 'ENOENT' ? 'not found on PATH' : err.code });
      else if (err?.killed) resolve({ code: null, stdout, stderr, error: `no answer within ${timeoutMs} ms` });
      else resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

export function firstLine(s: string): string {
  return s.trim().split('\n')[0] ?? '';
}
