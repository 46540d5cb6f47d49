import { ToolFailure } from '../../../src/errors.js';
import type { RunContext } from '../../../src/runner.js';
import type { ToolVfs } from '../../../src/tool-vfs.js';
import { isWithin } from '../../../src/vfs/path.js';
import type { TreeView } from '../../../src/vfs/read-view.js';
import { diffFiles } from '../../../src/vfs/text-diff.js';
import type { EntryType } from '../../../src/vfs/vfs.js';
import { endsCall } from '../../shared/vfs-ops.js';
import { DEFAULT_COMMANDS, DEFAULT_LOOP_ITERATIONS } from '../shell-tool.js';
import type { FsAnswerError, ShellDone, ShellOutput, ShellPool } from './pool.js';

/**
 * One `shell.run` call on the engine's thread: the script runs in a child process (pool.ts), and each
 * of its file-system requests comes back here, where the call's ToolVfs serves it: the same permission
 * checks, the same transaction, as any tool. A denial ends the call (DENIED, nothing written), as it
 * does for a JS or Python tool. When the script has run, the result lists what it changed, with diffs.
 */

export interface ShellInput {
  script: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  diff?: boolean;
  require_success?: boolean;
  max_loop_iterations?: number;
  max_commands?: number;
}

export interface ShellChange {
  path: string;
  type: EntryType;
  change: 'created' | 'modified' | 'deleted';
  size?: number;
  diff?: string | null;
  added?: number;
  removed?: number;
  diff_note?: string;
}

/** Bytes kept back from `output_bytes` for the fields around stdout, stderr and the changes. */
const ENVELOPE_BYTES = 1024;
/** The shell's own cap on what a script prints in all (its memory), whatever the output limit. */
const MAX_SCRIPT_OUTPUT = 32 * 1024 * 1024;
/** Beyond the call's timeout, the shell's own deadline (the engine's TIMEOUT comes first; this is a backstop). */
const SHELL_DEADLINE_SLACK_MS = 5_000;

/** Node's code and text for each VFS failure, so that just-bash's commands print what bash would. */
const ERRNO: Readonly<Record<string, [string, string]>> = {
  NOT_FOUND: ['ENOENT', 'no such file or directory'],
  ALREADY_EXISTS: ['EEXIST', 'file already exists'],
  NOT_A_DIRECTORY: ['ENOTDIR', 'not a directory'],
  IS_A_DIRECTORY: ['EISDIR', 'illegal operation on a directory'],
  NOT_EMPTY: ['ENOTEMPTY', 'directory not empty'],
  QUOTA_EXCEEDED: ['ENOSPC', 'no space left on device'],
  INVALID_PATH: ['EINVAL', 'invalid argument'],
  DENIED: ['EACCES', 'permission denied'],
};
const SYSCALL: Readonly<Record<string, string>> = {
  read: 'open',
  write: 'open',
  stat: 'stat',
  exists: 'access',
  probe: 'access',
  list: 'scandir',
  mkdir: 'mkdir',
  delete: 'rm',
  move: 'rename',
  copy: 'cp',
};

/**
 * The messages of just-bash's execution limits (it ends the script with exit status 126): the bash
 * loops, the command count, recursion and the output total name the option to raise; the others (awk's
 * and seq's iterations, string and array sizes, traversals) say "limit exceeded".
 */
const LIMIT_MESSAGE = /executionLimits\.\w+|limit exceeded|exceeded maximum iterations|too many iterations/;
const LIMIT_OPTION = /executionLimits\.(\w+)/;
/** The count a limit message names, "limit exceeded (100000)". */
const LIMIT_COUNT = /limit exceeded \((\d+)\)/;
/** just-bash's option → the input that raises it, when there is one. */
const LIMIT_INPUT: Readonly<Record<string, string>> = { maxLoopIterations: 'max_loop_iterations', maxCommandCount: 'max_commands' };

function str(value: unknown): string {
  if (typeof value !== 'string') throw new ToolFailure('execution', 'INTERNAL', 'shell worker: a path was not a string');
  return value;
}

/**
 * Serves one file-system request of the script on the call's VFS. The paths come normalized from the
 * shell's process, and ToolVfs normalizes and checks them again: it is not trusted to have done it.
 */
function serveOp(vfs: ToolVfs, op: string, a: Record<string, unknown>): unknown {
  switch (op) {
    case 'read':
      return vfs.read(str(a.path));
    case 'stat': {
      const st = vfs.stat(str(a.path));
      return { type: st.type, size: st.size, mtime: st.mtime };
    }
    case 'exists':
      return vfs.exists(str(a.path));
    case 'probe': {
      // just-bash looks for a command in /usr/bin and /bin before running it: a caller who may not
      // read there still runs commands, and the probe is no denial (it learns nothing: the answer is no).
      const path = vfs.resolve(str(a.path));
      return vfs.allows('vfs.read', path) ? vfs.exists(path) : false;
    }
    case 'list': {
      // With each entry the caller may read, its stat: \`grep -r\` and \`find\` stat every entry they
      // list, and this saves the worker a request for each (it keeps them until the script changes
      // something). An entry the caller may not read comes without: a stat of it is asked, and denied.
      const entries = vfs.list(str(a.path)).entries;
      return entries.map((e) => {
        if (!vfs.allows('vfs.read', e.path)) return { name: e.name, type: e.type };
        const st = vfs.stat(e.path);
        return { name: e.name, type: e.type, size: st.size, mtime: st.mtime };
      });
    }
    case 'write': {
      const data = a.data;
      if (!(data instanceof Uint8Array)) throw new ToolFailure('execution', 'INTERNAL', 'shell worker: write without bytes');
      // Missing folders are made, as just-bash's own file system does: its redirections do not expect a
      // write to fail for want of a folder (bash would say "No such file or directory").
      vfs.write(str(a.path), Buffer.from(data.buffer, data.byteOffset, data.byteLength), { append: a.append === true, parents: true });
      return null;
    }
    case 'mkdir':
      return { created: vfs.mkdir(str(a.path), { parents: a.recursive === true }).created };
    case 'delete':
      vfs.delete(str(a.path), { recursive: a.recursive === true });
      return null;
    case 'move':
      vfs.move(str(a.from), str(a.to), { overwrite: true });
      return null;
    case 'copy':
      copy(vfs, str(a.from), str(a.to), a.recursive === true);
      return null;
    default:
      throw new ToolFailure('execution', 'INTERNAL', `shell worker: unknown operation ${JSON.stringify(op).slice(0, 40)}`);
  }
}

/** `cp`: a file, or with `recursive` a folder and all below it; every path read and written is checked. */
function copy(vfs: ToolVfs, rawFrom: string, rawTo: string, recursive: boolean): void {
  const from = vfs.resolve(rawFrom);
  const to = vfs.resolve(rawTo);
  const type = vfs.stat(from).type;
  if (type === 'file') {
    vfs.write(to, Buffer.from(vfs.read(from)), { parents: false });
    return;
  }
  if (!recursive) throw new ToolFailure('execution', 'IS_A_DIRECTORY', `Is a directory: ${from}`, { details: { path: from } });
  if (isWithin(to, from)) throw new ToolFailure('execution', 'INVALID_PATH', `Cannot copy ${from} into itself (${to})`, { details: { path: to } });
  const { entries } = vfs.list(from, { recursive: true });
  vfs.mkdir(to, { parents: false });
  for (const entry of entries) {
    const dest = (to === '/' ? '' : to) + entry.path.slice(from === '/' ? 0 : from.length);
    if (entry.type === 'directory') vfs.mkdir(dest, { parents: false });
    else vfs.write(dest, Buffer.from(vfs.read(entry.path)), { parents: false });
  }
}

/** The answer the script's file system gets for a failure. */
function answerError(op: string, args: Record<string, unknown>, error: unknown): FsAnswerError {
  const path = typeof args.path === 'string' ? args.path : typeof args.from === 'string' ? args.from : '';
  const syscall = SYSCALL[op] ?? op;
  if (error instanceof ToolFailure) {
    const errno = ERRNO[error.code];
    if (errno) return { code: errno[0], message: `${errno[0]}: ${errno[1]}, ${syscall} '${path}'` };
  }
  return { code: 'EIO', message: `EIO: i/o error, ${syscall} '${path}'` };
}

/** JSON bytes of a string as it will sit in the output. */
function jsonBytes(text: string): number {
  return Buffer.byteLength(JSON.stringify(text), 'utf8');
}

/** The longest start of `text` whose JSON takes at most `max` bytes (never a lone half of a surrogate pair). */
function cutToJson(text: string, max: number): string {
  if (jsonBytes(text) <= max) return text;
  let lo = 0;
  let hi = Math.min(text.length, max);
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (jsonBytes(text.slice(0, mid)) <= max) lo = mid;
    else hi = mid - 1;
  }
  let end = lo;
  const last = text.charCodeAt(end - 1);
  if (end > 0 && last >= 0xd800 && last <= 0xdbff) end--;
  return text.slice(0, end);
}

/** Every path at or below `root` in `tree`, `root` first. */
function pathsUnder(tree: TreeView | ToolVfs['transaction'], root: string, into: Set<string>): void {
  const type = tree.typeOf(root);
  if (type === null) return;
  into.add(root);
  if (type === 'directory') for (const e of tree.list(root, { recursive: true }).entries) into.add(e.path);
}

/**
 * What the call changed, path by path, against the tree as it was when the call began: files and
 * folders created, modified (files whose bytes differ) or deleted. A file written and deleted again, or
 * rewritten with its old bytes, is not a change.
 */
function changesOf(vfs: ToolVfs): ShellChange[] {
  const txn = vfs.transaction;
  const before = txn.view;
  // The transaction's own log: it also holds the folders a write or `mkdir -p` made on the way.
  const roots = new Set<string>(txn.ops.flatMap((op) => (op.op === 'move' ? [op.from, op.to] : [op.path])));
  const paths = new Set<string>();
  for (const root of roots) {
    paths.add(root);
    if (before) pathsUnder(before, root, paths);
    pathsUnder(txn, root, paths);
  }
  const out: ShellChange[] = [];
  for (const path of [...paths].sort()) {
    const was = before ? before.typeOf(path) : null;
    const is = txn.typeOf(path);
    if (was === is) {
      if (is !== 'file') continue;
      const after = txn.read(path);
      if (before?.read(path).equals(after)) continue;
      out.push({ path, type: 'file', change: 'modified', size: after.length });
      continue;
    }
    if (was !== null) out.push({ path, type: was, change: 'deleted' });
    if (is !== null)
      out.push(is === 'file' ? { path, type: is, change: 'created', size: txn.read(path).length } : { path, type: is, change: 'created' });
  }
  return out;
}

/** The diffs of file changes, as many as fit in `budget` JSON bytes, in path order; the others say why not. */
function addDiffs(vfs: ToolVfs, changes: ShellChange[], budget: number): { spent: number; omitted: number } {
  const txn = vfs.transaction;
  const before = txn.view;
  let spent = 0;
  let omitted = 0;
  for (const change of changes) {
    if (change.type !== 'file') continue;
    // The diff shows the old content: only callers who may read the file see it (as fs.write).
    if (!vfs.callerMay('vfs.read', change.path)) {
      change.diff = null;
      change.diff_note = 'diff omitted: no vfs.read permission for this path';
      continue;
    }
    if (spent >= budget) {
      change.diff = null;
      change.diff_note = 'diff omitted: the output limit was reached';
      omitted++;
      continue;
    }
    const old = change.change === 'created' || !before ? null : before.read(change.path);
    const now = change.change === 'deleted' ? null : txn.read(change.path);
    const diff = diffFiles(change.path, old, now);
    const cost = diff.patch === null ? 0 : jsonBytes(diff.patch);
    if (spent + cost > budget) {
      change.diff = null;
      change.diff_note = 'diff omitted: the output limit was reached';
      omitted++;
      continue;
    }
    spent += cost;
    change.diff = diff.patch;
    change.added = diff.added;
    change.removed = diff.removed;
    if (diff.omitted) change.diff_note = `diff omitted: ${diff.omitted}`;
  }
  return { spent, omitted };
}

function tail(text: string, chars: number): string {
  return text.length > chars ? `…${text.slice(-chars)}` : text;
}

/** Runs the script of one `shell.run` call. */
export async function runShell(input: ShellInput, ctx: RunContext, pool: ShellPool): Promise<Record<string, unknown>> {
  const { vfs, limits, signal } = ctx;
  const cwd = vfs.resolve(input.cwd ?? '/');
  // The root always exists: not stat'ed, so that a caller who may read only /docs can still start there.
  if (cwd !== '/' && vfs.stat(cwd).type !== 'directory') {
    throw new ToolFailure('execution', 'NOT_A_DIRECTORY', `cwd ${cwd} is not a folder`, { details: { path: cwd } });
  }
  const budget = Math.max(0, limits.output_bytes - ENVELOPE_BYTES);
  const shell = await pool.acquire(limits.memory_mb, signal);
  if (signal.aborted) {
    pool.release(shell, true);
    throw new ToolFailure('execution', 'CANCELLED', 'The call ended before its script started');
  }
  /** The failure that ends the call: a denial or an escape, reported once, whatever the script does next. */
  let fatal: ToolFailure | null = null;
  const serve = (op: string, args: Record<string, unknown>): unknown => {
    if (fatal) throw fatal;
    try {
      return serveOp(vfs, op, args);
    } catch (error) {
      if (error instanceof ToolFailure && endsCall(error)) {
        fatal = error;
        shell.stop();
      }
      throw error;
    }
  };
  const onAbort = () => void shell.terminate();
  signal.addEventListener('abort', onAbort, { once: true });
  const loops = input.max_loop_iterations ?? DEFAULT_LOOP_ITERATIONS;
  let healthy = false;
  let done: ShellDone;
  try {
    done = await shell.run(
      {
        script: input.script,
        cwd,
        env: input.env ?? {},
        stdin: input.stdin,
        limits: {
          loops,
          commands: input.max_commands ?? DEFAULT_COMMANDS,
          timeMs: limits.timeout_ms + SHELL_DEADLINE_SLACK_MS,
          outputBytes: MAX_SCRIPT_OUTPUT,
        },
        keep: budget,
      },
      serve,
      answerError,
    );
    healthy = true;
  } catch (error) {
    if (fatal) throw fatal;
    throw error;
  } finally {
    signal.removeEventListener('abort', onAbort);
    pool.release(shell, healthy && !signal.aborted);
  }
  if (fatal) throw fatal;
  return result(input, ctx, done, budget, loops);
}

function result(input: ShellInput, ctx: RunContext, done: ShellDone, budget: number, loops: number): Record<string, unknown> {
  const { vfs } = ctx;
  const stderrTail = tail(done.stderr.text, 2000);
  if (done.exitCode === 126) {
    const lastLine = done.stderr.text.trimEnd().split('\n').pop() ?? '';
    if (LIMIT_MESSAGE.test(lastLine)) {
      const option = LIMIT_OPTION.exec(lastLine)?.[1] ?? null;
      // A command bounded by the loop count (seq, cut, od, awk) names only the number it reached.
      const raise = option ? LIMIT_INPUT[option] : LIMIT_COUNT.exec(lastLine)?.[1] === String(loops) ? 'max_loop_iterations' : undefined;
      throw new ToolFailure(
        'execution',
        'TOOL_ERROR',
        `The script hit one of the shell's execution limits and was stopped; nothing it wrote was kept: ${lastLine}${raise ? ` (raise it with "${raise}")` : ''}`,
        { details: { limit: option ?? 'execution limit', exit_code: done.exitCode, stderr: stderrTail, ...(raise ? { input: raise } : {}) } },
      );
    }
  }
  if (input.require_success === true && done.exitCode !== 0) {
    throw new ToolFailure('execution', 'TOOL_ERROR', `The script exited with status ${done.exitCode}; nothing it wrote was kept (require_success)`, {
      details: { exit_code: done.exitCode, stdout: tail(done.stdout.text, 2000), stderr: stderrTail },
    });
  }

  const notes: string[] = [];
  let changes = changesOf(vfs);
  // The list of changes first (paths, kinds, sizes): at most an eighth of the budget.
  let listBytes = 0;
  let listed = 0;
  for (const change of changes) {
    const cost = Buffer.byteLength(JSON.stringify(change), 'utf8') + 1;
    if (listBytes + cost > budget / 8) break;
    listBytes += cost;
    listed++;
  }
  const changesTruncated = listed < changes.length;
  if (changesTruncated) {
    notes.push(`changes: the first ${listed} of ${changes.length} are listed (output limit)`);
    changes = changes.slice(0, listed);
  }
  // Then stderr (up to an eighth), the diffs (up to half of what is left), and stdout gets the rest.
  const stderr = fitOutput('stderr', done.stderr, Math.floor(budget / 8), notes);
  const diffBudget = Math.floor((budget - listBytes - jsonBytes(stderr)) / 2);
  let diffBytes = 0;
  if (input.diff !== false) {
    const { spent, omitted } = addDiffs(vfs, changes, diffBudget);
    diffBytes = spent;
    if (omitted > 0) notes.push(`diffs: ${omitted} omitted (output limit)`);
  }
  const stdout = fitOutput('stdout', done.stdout, budget - listBytes - jsonBytes(stderr) - diffBytes, notes);
  const out: Record<string, unknown> = {
    exit_code: done.exitCode,
    stdout,
    stderr,
    stdout_bytes: done.stdout.bytes,
    stderr_bytes: done.stderr.bytes,
    stdout_truncated: stdout.length < done.stdout.text.length || done.stdout.cut,
    stderr_truncated: stderr.length < done.stderr.text.length || done.stderr.cut,
    changes,
    changes_truncated: changesTruncated,
  };
  if (notes.length > 0) out.notes = notes;
  return out;
}

/** An output cut to `max` JSON bytes, with a note saying so when it was cut. */
function fitOutput(name: 'stdout' | 'stderr', output: ShellOutput, max: number, notes: string[]): string {
  const kept = cutToJson(output.text, Math.max(2, max));
  if (kept.length < output.text.length || output.cut) {
    const keptBytes = Buffer.byteLength(kept, 'utf8');
    notes.push(`${name}: the first ${keptBytes} of ${output.bytes} bytes are kept (output limit)`);
  }
  return kept;
}
