import { closeSync, existsSync, openSync, readSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadProjectConfig, ProjectConfigError } from '../../config.js';
import { EngineConfigError, type EngineEvent } from '../../index.js';
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
const EVENT_TYPES = new Set(['ToolInvocationEvent', 'ToolResultEvent', 'ToolErrorEvent', 'SecurityEvent', 'RegistryChangeEvent']);

function auditPath(ctx: Context): string {
  const dir = join(ctx.workspace, ctx.project);
  if (!existsSync(dir))
    throw new EngineConfigError(`Project "${ctx.project}" not found: ${dir} is not a folder (create it with \`arium init ${ctx.project}\`)`);
  let setting: boolean | string | undefined;
  try {
    setting = loadProjectConfig(dir).audit_log;
  } catch (error) {
    if (error instanceof ProjectConfigError) throw new EngineConfigError(error.message, 'arium.json');
    throw error;
  }
  if (!setting) {
    throw new EngineConfigError(
      `Project "${ctx.project}" keeps no audit log, so there are no events to show. Set "audit_log": true in ${join(dir, 'arium.json')}: ` +
        'every engine on the project (CLI calls, servers) then appends its events to .arium/audit.jsonl',
      'audit_log',
    );
  }
  return typeof setting === 'string' ? resolve(dir, setting) : join(dir, '.arium', 'audit.jsonl');
}

/** Reads bytes [from, to) of the file. */
function readRange(path: string, from: number, to: number): string {
  const fd = openSync(path, 'r');
  try {
    const buffer = Buffer.alloc(to - from);
    const n = readSync(fd, buffer, 0, buffer.length, from);
    return buffer.subarray(0, n).toString('utf8');
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

  let offset = 0;
  if (existsSync(path)) {
    const size = statSync(path).size;
    const start = Math.max(0, size - TAIL_BYTES);
    const lines = readRange(path, start, size).split('\n');
    // A torn last line (a writer mid-append) is read again once it is whole.
    const tail = lines.pop() ?? '';
    if (start > 0) lines.shift();
    for (const line of limit === 0 ? [] : lines.slice(-limit)) print(line);
    offset = size - Buffer.byteLength(tail);
  } else if (!ctx.json) {
    ctx.io.stderr.write(ctx.c.dim(`no events yet: ${path} does not exist until an engine on the project emits one\n`));
  }
  if (!follow) return EXIT.ok;

  const signal = ctx.io.interrupt();
  if (!ctx.json) ctx.io.stderr.write(ctx.c.dim(`following ${path} (Ctrl-C to stop)\n`));
  while (!signal.aborted) {
    await sleep(POLL_MS, undefined, { signal }).catch(() => {});
    if (!existsSync(path)) continue;
    const size = statSync(path).size;
    if (size < offset) offset = 0; // the log was truncated or replaced: start it over
    if (size === offset) continue;
    const lines = readRange(path, offset, size).split('\n');
    const tail = lines.pop() ?? '';
    for (const line of lines) print(line);
    offset = size - Buffer.byteLength(tail);
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
