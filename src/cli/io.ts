/** Where the CLI reads and writes: the process in real use, buffers in tests. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  /** Reads all of standard input (for `arium call <id> -`). */
  readStdin(): Promise<string>;
  env: Readonly<Record<string, string | undefined>>;
  isTTY: boolean;
  cwd: string;
}

export const EXIT = { ok: 0, toolFailed: 1, usage: 2, engine: 3 } as const;

/** ANSI colours, off for --no-color, NO_COLOR, --json and output that is not a terminal. */
export interface Paint {
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
}

export function paint(enabled: boolean): Paint {
  const wrap = (open: number, close: number) => (s: string) => (enabled ? `\u001b[${open}m${s}\u001b[${close}m` : s);
  return { bold: wrap(1, 22), dim: wrap(2, 22), red: wrap(31, 39), green: wrap(32, 39), yellow: wrap(33, 39), cyan: wrap(36, 39) };
}

export function processIo(): CliIo {
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    env: process.env,
    isTTY: process.stdout.isTTY === true,
    cwd: process.cwd(),
  };
}
