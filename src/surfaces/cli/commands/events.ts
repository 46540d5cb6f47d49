import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { rotatedPath } from '../../../audit.js';
import { auditSettings, loadProjectConfig, ProjectConfigError } from '../../../config.js';
import { DEFAULT_CATALOG } from '../../../defaults.js';
import { ENGINE_EVENT_TYPES } from '../../../events.js';
import { EngineConfigError, type EngineEvent } from '../../../index.js';
import { bool, int, maxPositionals } from '../args.js';
import type { CommandSpec } from '../command.js';
import type { Context } from '../context.js';
import { clip, formatEvent } from '../format.js';
import { EXIT } from '../io.js';

/**
 * `arium events` reads the project's audit log instead of opening an engine: the events worth watching
 * come from other processes (CLI calls, a server), an engine only sees its own calls, and an open engine
 * would hold the project's lock and shut every other process out.
 */

const POLL_MS = 250;
/** The backlog is read from the file's tail, so a log of many megabytes starts as fast as a small one. */
const TAIL_BYTES = 1 << 20;
const EVENT_TYPES: ReadonlySet<string> = new Set(ENGINE_EVENT_TYPES);

function auditPath(ctx: Context): string {
  const dir = join(ctx.workspace, ctx.project);
  if (!existsSync(dir))
    throw new EngineConfigError(`Project "${ctx.project}" not found: ${dir} is not a folder (create it with \`arium init ${ctx.project}\`)`);
  let settings: ReturnType<typeof auditSettings>;
  try {
    settings = auditSettings(loadProjectConfig(dir, DEFAULT_CATALOG).audit_log, dir, dir);
  } catch (error) {
    if (error instanceof ProjectConfigError) throw new EngineConfigError(error.message, 'arium.json');
    throw error;
  }
  if (!settings) {
    throw new EngineConfigError(
      `Project "${ctx.project}" keeps no audit log, so there are no events to show. Set "audit_log": true in ${join(dir, 'arium.json')}: ` +
        'every engine on the project (CLI calls, servers) then appends its events to .arium/audit.jsonl',
      'audit_log',
    );
  }
  return settings.path;
}

/** Bytes [from, to) of an open file. */
function readFd(fd: number, from: number, to: number): string {
  const buffer = Buffer.alloc(to - from);
  const n = readSync(fd, buffer, 0, buffer.length, from);
  return buffer.subarray(0, n).toString('utf8');
}

/** The whole lines of the last TAIL_BYTES of a file (a torn last line is left out) and where they end. */
function tailLines(path: string): { lines: string[]; end: number; complete: boolean } {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const start = Math.max(0, size - TAIL_BYTES);
    const lines = readFd(fd, start, size).split('\n');
    // A torn last line (a writer mid-append) is read again once it is whole.
    const tail = lines.pop() ?? '';
    if (start > 0) lines.shift();
    return { lines, end: size - Buffer.byteLength(tail), complete: start === 0 };
  } finally {
    closeSync(fd);
  }
}

function parse(line: string): EngineEvent | null {
  try {
    const value = JSON.parse(line) as { type?: unknown; at?: unknown };
    return EVENT_TYPES.has(String(value?.type)) && typeof value.at === 'string' ? (value as EngineEvent) : null;
  } catch {
    return null;
  }
}

/**
 * Follows the log across rotations: the file being read stays open, so what its writer still adds
 * under its rotated name is read; once a new log has its first line (the writer finishes a file before
 * starting the next), the files rotated since are read in order, then the new one.
 */
class Follower {
  readonly #path: string;
  readonly #print: (line: string) => void;
  #fd: number | null = null;
  #offset = 0;

  constructor(path: string, print: (line: string) => void, at: number) {
    this.#path = path;
    this.#print = print;
    if (existsSync(path)) {
      this.#fd = openSync(path, 'r');
      this.#offset = at;
    }
  }

  poll(): void {
    if (this.#fd === null) {
      if (!existsSync(this.#path)) return;
      this.#fd = openSync(this.#path, 'r');
      this.#offset = 0;
    }
    this.#drain();
    let current: ReturnType<typeof statSync> | null = null;
    try {
      current = statSync(this.#path);
    } catch {}
    const own = fstatSync(this.#fd);
    if (current === null || current.ino === own.ino) {
      if (own.size < this.#offset) this.#offset = 0; // truncated or replaced in place: start it over
      return;
    }
    if (current.size === 0) return; // a new log without a line yet: the rotated one may still grow
    this.#drain();
    let n = 1;
    while (existsSync(rotatedPath(this.#path, n)) && statSync(rotatedPath(this.#path, n)).ino !== own.ino) n++;
    // Files rotated after this one (newer, so lower numbers), oldest first.
    for (let k = n - 1; k >= 1; k--) this.#readWhole(rotatedPath(this.#path, k));
    closeSync(this.#fd);
    this.#fd = openSync(this.#path, 'r');
    this.#offset = 0;
    this.#drain();
  }

  #drain(): void {
    const fd = this.#fd as number;
    const size = fstatSync(fd).size;
    if (size <= this.#offset) return;
    const lines = readFd(fd, this.#offset, size).split('\n');
    const tail = lines.pop() ?? '';
    for (const line of lines) this.#print(line);
    this.#offset = size - Buffer.byteLength(tail);
  }

  #readWhole(path: string): void {
    try {
      const lines = readFileSync(path, 'utf8').split('\n');
      lines.pop();
      for (const line of lines) this.#print(line);
    } catch {}
  }

  close(): void {
    if (this.#fd !== null) closeSync(this.#fd);
    this.#fd = null;
  }
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, eventsSpec.usage);
  const limit = int(ctx.parsed, 'limit', 0) ?? 20;
  const follow = bool(ctx.parsed, 'follow');
  const path = auditPath(ctx);
  const print = (line: string) => {
    if (line.trim() === '') return;
    const event = parse(line);
    if (ctx.json) ctx.out(event ? JSON.stringify(event) : JSON.stringify({ type: 'Unreadable', line: clip(line, 200) }));
    else ctx.out(event ? formatEvent(event, ctx.c) : ctx.c.red(`unreadable audit line: ${clip(line, 120)}`));
  };

  let end = 0;
  if (existsSync(path)) {
    const current = tailLines(path);
    end = current.end;
    // The latest events may reach back into the rotated files: newest first, until there are enough.
    let backlog = current.lines.filter((l) => l.trim() !== '');
    let complete = current.complete;
    for (let n = 1; complete && backlog.length < limit && existsSync(rotatedPath(path, n)); n++) {
      const older = tailLines(rotatedPath(path, n));
      backlog = [...older.lines.filter((l) => l.trim() !== ''), ...backlog];
      complete = older.complete;
    }
    for (const line of limit === 0 ? [] : backlog.slice(-limit)) print(line);
  } else if (!ctx.json) {
    ctx.io.stderr.write(ctx.c.dim(`no events yet: ${path} does not exist until an engine on the project emits one\n`));
  }
  if (!follow) return EXIT.ok;

  const signal = ctx.io.interrupt();
  if (!ctx.json) ctx.io.stderr.write(ctx.c.dim(`following ${path} (Ctrl-C to stop)\n`));
  const follower = new Follower(path, print, end);
  try {
    while (!signal.aborted) {
      await sleep(POLL_MS, undefined, { signal }).catch(() => {});
      if (!signal.aborted) follower.poll();
    }
  } finally {
    follower.close();
  }
  return EXIT.ok;
}

export const eventsSpec: CommandSpec = {
  name: 'events',
  usage: 'arium events [--follow] [--limit <n>]',
  summary: 'print the project’s events from its audit log; --follow streams new ones until Ctrl-C',
  details: `Reads the audit log every engine on the project appends to (turn it on with "audit_log": true
in arium.json), so it shows the calls of other processes too: run arium events --follow in one
terminal and arium call ... in another. With --json: one event per line (JSONL), as a stream.`,
  flags: {
    follow: { help: 'keep printing new events as they are appended, until Ctrl-C' },
    limit: { value: true, arg: '<n>', help: 'how many of the latest events to print first (default 20; 0 with --follow: only new ones)' },
  },
  run,
};
