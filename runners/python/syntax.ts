import { execFile } from 'node:child_process';
import { relative } from 'node:path';
import type { CodeProblem } from '../../src/runner.js';

// node:child_process, not execa: one short syntax check per batch of tools, as tools load. Importing execa takes 0.1-0.4 s on the
// 2-core development machine, which every engine start would pay (ARCHITECTURE.md, "What a start costs").

/** How long one check of a batch of files may take before it gives up (it then reports nothing). */
const CHECK_MS = 10_000;

/**
 * Compiles (never runs) each file named on the command line with the interpreter Python tools run on,
 * in a process of its own: a file that crashes the compiler (a megabyte of nested brackets) takes
 * nothing else down. Prints one JSON line per file: {} or where its syntax error is.
 */
const SCRIPT = `import json, sys
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            compile(f.read(), path, "exec", dont_inherit=True)
        found = {}
    except SyntaxError as e:
        found = {"line": e.lineno or 1, "column": e.offset or 1, "message": type(e).__name__ + ": " + str(e.msg)}
    except (RecursionError, MemoryError, ValueError, OSError) as e:
        found = {"line": 1, "column": 1, "message": type(e).__name__ + ": " + str(e)}
    print(json.dumps(found), flush=True)
`;

interface Waiting {
  entry: string;
  toolsDir: string;
  done: (problem: CodeProblem | null) => void;
}

/**
 * Checks Python files for syntax errors. The files asked for in one turn of the event loop are compiled
 * by one interpreter process: an engine starting with fifty Python tools starts one process, not fifty.
 */
export class PythonSyntaxChecker {
  readonly #executable: () => Promise<string | null>;
  #batch: Waiting[] = [];

  /** `executable` finds the interpreter (null when there is none: then nothing is reported). */
  constructor(executable: () => Promise<string | null>) {
    this.#executable = executable;
  }

  check(entry: string, toolsDir: string): Promise<CodeProblem | null> {
    return new Promise((done) => {
      if (this.#batch.length === 0) setImmediate(() => void this.#run());
      this.#batch.push({ entry, toolsDir, done });
    });
  }

  async #run(): Promise<void> {
    const batch = this.#batch;
    this.#batch = [];
    const executable = await this.#executable().catch(() => null);
    if (!executable) {
      for (const w of batch) w.done(null);
      return;
    }
    const files = batch.map((w) => w.entry);
    execFile(executable, ['-I', '-B', '-c', SCRIPT, ...files], { timeout: CHECK_MS, env: {}, maxBuffer: 1024 * 1024 }, (_error, stdout) => {
      const lines = String(stdout ?? '').split('\n');
      for (const [i, w] of batch.entries()) {
        let found: { line?: number; column?: number; message?: string } = {};
        try {
          found = JSON.parse(lines[i] ?? '');
        } catch {
          // Not checked (the process was stopped, say): the call will tell.
        }
        w.done(
          typeof found.message === 'string'
            ? { file: relative(w.toolsDir, w.entry), line: Number(found.line) || 1, column: Number(found.column) || 1, message: found.message }
            : null,
        );
      }
    });
  }
}
