import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { ToolFailure } from '../../../src/errors.js';
import type { RunContext } from '../../../src/runner.js';
import { bwrapProblem, privileged } from '../../shared/bwrap.js';
import { execFilter } from '../../shared/seccomp.js';
import { copyBack, parseListing } from './copy-back.js';
import { type Lease, Mirror } from './mirror.js';
import { listMerged, runSandboxed, type SandboxRun } from './sandbox.js';
import { allowedProgram, type ExecSettings, resolveProgram } from './settings.js';

/**
 * Calls of system.exec for one engine: its settings (allowlist, limits), the mirror of the VFS its
 * programs see, and the uids they run as.
 */

/**
 * Each call runs as a uid of its own, from this range (the Python runner's calls use 1,700,000,000 and
 * up): RLIMIT_NPROC counts per uid, so one call's fork bomb cannot starve another's, and no call can
 * signal or ptrace another's processes.
 */
export const EXEC_UID_BASE = 1_690_000_000;
export const EXEC_UID_SLOTS = 256;
const freeSlots: number[] = Array.from({ length: EXEC_UID_SLOTS }, (_, i) => EXEC_UID_SLOTS - 1 - i);

/** What the environment of a call may set besides PATH, HOME and LANG: nothing that changes what is loaded or run. */
export const SAFE_ENV = [
  'LANG',
  'LC_ALL',
  'LC_CTYPE',
  'TZ',
  'TERM',
  'NO_COLOR',
  'SOURCE_DATE_EPOCH',
  'PYTHONHASHSEED',
  'PYTHONDONTWRITEBYTECODE',
  'PYTHONUNBUFFERED',
  'PYTHONIOENCODING',
  'GIT_AUTHOR_NAME',
  'GIT_AUTHOR_EMAIL',
  'GIT_AUTHOR_DATE',
  'GIT_COMMITTER_NAME',
  'GIT_COMMITTER_EMAIL',
  'GIT_COMMITTER_DATE',
] as const;

export interface ExecInput {
  argv: string[];
  cwd?: string;
  read?: string[];
  stdin?: string;
  env?: Record<string, string>;
  check?: boolean;
  diff?: boolean;
}

type Tools = SandboxRun['tools'] & { find: string };

/** The machine cannot run system.exec safely: MISCONFIGURED, not UNAVAILABLE, since retrying does not help. */
function refusal(message: string, reason: string, fix: string): ToolFailure {
  return new ToolFailure('execution', 'MISCONFIGURED', message, { details: { reason, fix } });
}

export class ExecService {
  readonly settings: ExecSettings;
  #mirror: Mirror | null = null;
  #tools: Tools | null = null;

  constructor(settings: ExecSettings) {
    this.settings = settings;
  }

  /** Null when system.exec can run here; otherwise why not (for the call's error and `arium doctor`). */
  async problem(): Promise<{ message: string; reason: string; fix: string } | null> {
    const bwrap = await bwrapProblem(this.settings.bwrap);
    if (bwrap) {
      return {
        message: `system.exec needs bubblewrap and will not run programs in a weaker sandbox: ${bwrap}`,
        reason: 'no-bubblewrap',
        fix: 'install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap), or set "exec": {"bwrap": "<path>"} in arium.json',
      };
    }
    if (!privileged()) {
      return {
        message: 'system.exec runs only when the engine runs as root: it mounts each call’s overlay and runs the program as a uid of its own',
        reason: 'not-root',
        fix: 'run the engine as root (in a container, say)',
      };
    }
    if (execFilter() === null) {
      return {
        message: `system.exec has no seccomp filter for this machine's architecture (${process.arch}; it knows x64 and arm64), and will not run programs that could make namespaces of their own`,
        reason: 'no-seccomp',
        fix: 'run the engine on x86-64 or arm64',
      };
    }
    if (!this.#findTools()) {
      return {
        message: 'system.exec needs unshare, prlimit and setpriv (util-linux) and find (findutils) on the host',
        reason: 'no-util-linux',
        fix: 'apt-get install util-linux findutils',
      };
    }
    return null;
  }

  #findTools(): Tools | null {
    if (this.#tools) return this.#tools;
    const found: Record<string, string> = {};
    for (const name of ['unshare', 'prlimit', 'setpriv', 'find']) {
      const program = resolveProgram(name, '/');
      if (program.path === null) return null;
      found[name] = program.path;
    }
    const bwrap = resolveProgram(this.settings.bwrap, '/');
    if (bwrap.path === null) return null;
    this.#tools = { bwrap: bwrap.path, unshare: found.unshare, prlimit: found.prlimit, setpriv: found.setpriv, find: found.find } as Tools;
    return this.#tools;
  }

  async run(input: ExecInput, ctx: RunContext): Promise<Record<string, unknown>> {
    const started = performance.now();
    const argv0 = input.argv[0] as string;
    const program = allowedProgram(this.settings, argv0);
    if (!program) {
      ctx.intrusion(`exec ${argv0}`, 'the program is not on the exec allowlist of arium.json');
      throw new ToolFailure(
        'permission',
        'DENIED',
        `system.exec: "${argv0}" is not on this project's exec allowlist; add it to "exec": {"allow": [...]} in arium.json`,
        { details: { program: argv0, allowed: this.settings.programs.map((p) => p.listed) } },
      );
    }
    if (program.path === null) {
      throw new ToolFailure('execution', 'MISCONFIGURED', `system.exec: "${argv0}" is on the exec allowlist but ${program.problem}`, {
        details: { program: argv0 },
      });
    }
    const problem = await this.problem();
    if (problem) throw refusal(problem.message, problem.reason, problem.fix);
    const tools = this.#findTools() as Tools;

    const cwd = ctx.vfs.resolve(input.cwd ?? '/');
    if (ctx.vfs.stat(cwd).type !== 'directory') {
      throw new ToolFailure('execution', 'NOT_A_DIRECTORY', `system.exec: cwd ${cwd} is not a folder of the VFS`, { details: { path: cwd } });
    }
    const inCwd = (path: string) => cwd === '/' || path === cwd || path.startsWith(`${cwd}/`);
    // A path under cwd is already there (and writable); the others are shown read-only.
    const reads = [...new Set((input.read ?? []).map((p) => ctx.vfs.resolve(p)))].filter((p) => !inCwd(p));
    for (const path of reads) ctx.vfs.stat(path);

    const slot = freeSlots.pop();
    if (slot === undefined) {
      throw new ToolFailure('execution', 'BUSY', `system.exec: ${EXEC_UID_SLOTS} programs are running already; try again when one ends`);
    }
    let lease: Lease | null = null;
    let callDir: string | null = null;
    try {
      this.#mirror ??= new Mirror();
      const mirror = this.#mirror;
      lease = mirror.lease(ctx.vfs, [cwd, ...reads]);
      callDir = mkdtempSync(join(mirror.calls, 'c'));
      const overlay = { lower: join(callDir, 'lower'), upper: join(callDir, 'upper'), work: join(callDir, 'work'), merged: join(callDir, 'merged') };
      for (const dir of [overlay.upper, overlay.work, overlay.merged]) mkdirSync(dir);
      // The overlay's root takes the upper folder's owner and mode: writable by the call's uid.
      chmodSync(overlay.upper, 0o777);
      // A link, so that the lowerdir= option never holds a VFS path (commas and colons would split it).
      symlinkSync(join(lease.root, cwd), overlay.lower);
      const outcome = await runSandboxed({
        tools,
        program: program.path,
        args: input.argv.slice(1),
        overlay,
        cwd,
        reads: reads.map((path) => [join(lease?.root as string, path), path]),
        env: input.env ?? {},
        stdin: input.stdin,
        uid: EXEC_UID_BASE + slot,
        limits: this.settings.limits,
        signal: ctx.signal,
      });
      if (ctx.signal.aborted) {
        throw new ToolFailure('execution', 'TIMEOUT', `system.exec: ${argv0} was stopped (timeout or cancel)`);
      }
      if (outcome.sandboxFailed) {
        throw new ToolFailure('execution', 'INTERNAL', `system.exec could not build the sandbox: ${outcome.stderr.text.trim().slice(-2000)}`);
      }
      const streams = {
        stdout: outcome.stdout.text,
        stderr: outcome.stderr.text,
        stdout_bytes: outcome.stdout.bytes,
        stderr_bytes: outcome.stderr.bytes,
        stdout_truncated: outcome.stdout.truncated,
        stderr_truncated: outcome.stderr.truncated,
      };
      if (input.check === true && outcome.exitCode !== 0) {
        throw new ToolFailure(
          'execution',
          'TOOL_ERROR',
          `system.exec: ${argv0} exited with code ${outcome.exitCode}; with check: true nothing it wrote was kept`,
          {
            details: { exit_code: outcome.exitCode, ...tails(streams) },
          },
        );
      }
      const back = await copyBack(ctx.vfs, cwd, overlay.upper, lease, this.settings.limits, input.diff !== false, async () =>
        parseListing(await listMerged(tools, overlay), cwd),
      );
      const result: Record<string, unknown> = {
        program: program.path,
        exit_code: outcome.exitCode,
        ...streams,
        cwd,
        changes: back.changes,
        skipped: back.skipped,
        bytes_copied_back: back.bytes,
        duration_ms: Math.round(performance.now() - started),
      };
      if (outcome.stdout.truncated || outcome.stderr.truncated) {
        result.output_note = `output cut at ${this.settings.limits.output_bytes} bytes per stream (exec.limits.output_bytes); *_bytes say how much there was`;
      }
      return result;
    } finally {
      lease?.release();
      if (callDir) rmSync(callDir, { recursive: true, force: true });
      freeSlots.push(slot);
    }
  }

  close(): void {
    this.#mirror?.dispose();
    this.#mirror = null;
  }
}

/** The last 4 KiB of each stream, for an error's details. */
function tails(streams: { stdout: string; stderr: string }): { stdout: string; stderr: string } {
  return { stdout: streams.stdout.slice(-4096), stderr: streams.stderr.slice(-4096) };
}
