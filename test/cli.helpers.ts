import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CliIo } from '../src/surfaces/cli/io.js';
import { main } from '../src/surfaces/cli/main.js';

/** What one in-process run of the CLI printed and returned. */
export interface CliRun {
  code: number;
  out: string;
  err: string;
}

export interface CliOptions {
  stdin?: string;
  env?: Record<string, string>;
  isTTY?: boolean;
  /** Aborts the run's interrupt signal (Ctrl-C) when this signal aborts. */
  interrupt?: AbortSignal;
  /** Answers the questions a terminal would be asked (absent: not a terminal); each question is recorded. */
  answer?: (question: string) => string;
}

/** A temporary folder holding a workspace `ws` with an empty project `p`; `cleanup` removes it. */
export function tempWorkspace(): { root: string; workspace: string; cleanup: () => void } {
  const root = mkdtempSync(join(tmpdir(), 'arium-cli-'));
  const workspace = join(root, 'ws');
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
  return { root, workspace, cleanup: () => rmSync(root, { recursive: true, force: true }) };
}

/** Runs `main` in-process with captured stdout and stderr, from `cwd`. */
export async function runCli(cwd: string, args: string[], options: CliOptions = {}): Promise<CliRun> {
  let out = '';
  let err = '';
  const answer = options.answer;
  const io: CliIo = {
    stdout: { write: (t: string) => (out += t) },
    stderr: { write: (t: string) => (err += t) },
    readStdin: async () => options.stdin ?? '',
    env: options.env ?? {},
    isTTY: options.isTTY ?? false,
    cwd,
    interrupt: () => options.interrupt ?? new AbortController().signal,
    user: 'tester',
    ...(answer
      ? {
          ask: async (question: string) => {
            err += question;
            return answer(question);
          },
        }
      : {}),
  };
  const code = await main(args, io);
  return { code, out, err };
}

// biome-ignore lint/suspicious/noExplicitAny: the tests read arbitrary JSON documents and assert their shape with expect
export type Json = any;

/** The --json output, which must be exactly one JSON document (JSON.parse refuses two). */
export function parseJson(run: CliRun): Json {
  return JSON.parse(run.out);
}
