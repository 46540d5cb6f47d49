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

export async function run(file: string, args: string[], timeoutMs = PROBE_TIMEOUT_MS): Promise<ProbeRun> {
  // execa: a missing binary, a timeout and a non-zero exit all come back as one result (reject: false),
  // and the child is killed with SIGKILL when the timeout passes. Imported here, not at the top: only
  // `arium doctor` probes, and every engine start would pay for loading it (~100 ms).
  const { execa } = await import('execa');
  const r = await execa(file, args, { timeout: timeoutMs, killSignal: 'SIGKILL', reject: false, stdin: 'ignore', encoding: 'utf8' });
  const stdout = typeof r.stdout === 'string' ? r.stdout : '';
  const stderr = typeof r.stderr === 'string' ? r.stderr : '';
  if (r.timedOut) return { code: null, stdout, stderr, error: `no answer within ${timeoutMs} ms` };
  const code = (r as { code?: string }).code;
  if (r.failed && r.exitCode === undefined) {
    return { code: null, stdout, stderr, error: code === 'ENOENT' ? 'not found on PATH' : (code ?? r.shortMessage) };
  }
  return { code: r.exitCode ?? null, stdout, stderr };
}

export function firstLine(s: string): string {
  return s.trim().split('\n')[0] ?? '';
}
