import { execFile } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { platform } from 'node:os';
import { join } from 'node:path';

/**
 * Which cores each member of a sandbox pool runs on. A member left to the scheduler has its relay
 * thread and isolate threads moved between cores, next to the other members' threads: on two cores,
 * one engine with two floating members did 1.52-1.67x its one-core JS calls/s at 32 callers, with more
 * CPU per call than on one core, while two engines each pinned to a core did 1.88x (BENCHMARKS.md,
 * "Each sandbox process on cores of its own"). With each member on cores of its own, its threads stay where
 * their caches are, and the pool scales as the pinned engines do.
 *
 * The cores the engine may use are split into one group per member the pool may grow to; a new member
 * takes the group the fewest running members hold, so a member that replaces one that ended takes its
 * cores. Members are pinned only while two or more run: a lone member keeps every core, since one
 * caller on two cores did 1.09-1.35x its one-core calls/s with its only process pinned against
 * 1.26-1.53x with it free (its relay thread and isolate thread hand each call over, and each gets a
 * core of its own unpinned). Pinning is done with
 * util-linux's `taskset` (Node has no call for it): a member started beside others starts under it, so
 * its every thread, from its first, runs on its group; a running member is moved with `taskset -a -p`,
 * which moves its threads, and the threads they start later inherit it.
 */

/** Whether a pool pins its members, and why (for status() and arium doctor). */
export interface Pinning {
  on: boolean;
  reason: string;
}

/** The places taskset is looked for: the sandbox processes start with no environment, so no PATH either. */
const TASKSET_DIRS = ['/usr/bin', '/bin', '/usr/local/bin', '/usr/sbin', '/sbin'];

let tasksetFound: string | null | undefined;

/** The taskset binary, or null where there is none (macOS, or a Linux without util-linux). */
export function tasksetPath(): string | null {
  if (tasksetFound !== undefined) return tasksetFound;
  tasksetFound = null;
  if (platform() === 'linux') {
    const dirs = [...TASKSET_DIRS, ...(process.env.PATH ?? '').split(':').filter((d) => d.startsWith('/'))];
    for (const dir of dirs) {
      try {
        accessSync(join(dir, 'taskset'), constants.X_OK);
        tasksetFound = join(dir, 'taskset');
        break;
      } catch {
        // Not here.
      }
    }
  }
  return tasksetFound;
}

/**
 * Parses a CPU list as the kernel writes it (`0-3,8,10-11`) into core numbers, ascending; null when it
 * is not one.
 */
export function parseCpuList(text: string): number[] | null {
  const cores = new Set<number>();
  for (const part of text.trim().split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) return null;
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    if (to < from || to - from > 65_536) return null;
    for (let c = from; c <= to; c++) cores.add(c);
  }
  return cores.size > 0 ? [...cores].sort((a, b) => a - b) : null;
}

/** The cores this process may run on (its affinity, which taskset and cgroup cpusets set), or null where that cannot be read. */
export function allowedCores(): number[] | null {
  return coresOf('self');
}

/** The cores process `pid` (its main thread) may run on now, or null where that cannot be read (not Linux). */
export function coresOf(pid: number | 'self'): number[] | null {
  if (platform() !== 'linux') return null;
  try {
    const line = /^Cpus_allowed_list:\s*(.+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return line?.[1] ? parseCpuList(line[1]) : null;
  } catch {
    return null;
  }
}

const trials = new Map<string, Promise<string | null>>();

/**
 * Has taskset pin itself to `core` and print its version, once per taskset and core: a sandbox or
 * container that refuses sched_setaffinity would otherwise fail every member started under taskset.
 * Null when it worked, else the first line of why not.
 */
function trial(taskset: string, core: number): Promise<string | null> {
  const key = `${taskset}\u0000${core}`;
  let found = trials.get(key);
  if (!found) {
    found = new Promise((resolve) => {
      execFile(taskset, ['--cpu-list', String(core), taskset, '--version'], { timeout: 10_000 }, (error, _out, err) => {
        resolve(
          error
            ? (String(err || error.message)
                .trim()
                .split('\n')[0] ?? 'failed')
            : null,
        );
      });
    });
    trials.set(key, found);
  }
  return found;
}

/** Splits `cores` into `groups` groups as even as they can be, in order; with fewer cores than groups, one core each, reused in turn. */
export function coreGroups(cores: readonly number[], groups: number): number[][] {
  if (cores.length === 0 || groups < 1) return [];
  if (cores.length <= groups) return Array.from({ length: groups }, (_, i) => [cores[i % cores.length] as number]);
  const out: number[][] = [];
  let at = 0;
  for (let g = 0; g < groups; g++) {
    const take = Math.floor(cores.length / groups) + (g < cores.length % groups ? 1 : 0);
    out.push(cores.slice(at, at + take));
    at += take;
  }
  return out;
}

/** What a pool is told about pinning: off, or on (the default) with the cores to pin to (a test's) instead of the process's own. */
export interface PinSetting {
  pin?: boolean;
  /** The cores the members may use; default allowedCores(). */
  cores?: readonly number[];
  /** For tests: the taskset to use instead of the one found. */
  taskset?: string;
}

/**
 * The core groups of a pool of up to `size` members, handed out as members start and given back as
 * they end. Off (every member floats over all the cores) when pinning is turned off, when the pool has
 * one member (it should use every core the engine has), when fewer than two cores are known, without
 * taskset, or where taskset cannot pin (tried once before anything is pinned).
 */
export class CorePlan {
  #pinning: Pinning;
  /** Settles once taskset has been tried here; until it has worked, nothing is pinned. */
  readonly tried: Promise<void>;
  #works = false;
  readonly #groups: number[][];
  /** Running members per group. */
  readonly #held: number[];
  readonly #taskset: string | null;
  readonly #all: readonly number[];
  readonly #moving = new Map<number, Promise<void>>();

  constructor(size: number, setting: PinSetting = {}) {
    const cores = setting.cores ?? allowedCores();
    this.#taskset = setting.taskset ?? tasksetPath();
    const off = (reason: string) => ({ on: false, reason });
    if (setting.pin === false) this.#pinning = off('off, as set');
    else if (size < 2) this.#pinning = off('off: one member uses every core the engine has');
    else if (cores === null) this.#pinning = off('off: the cores this process may use cannot be read here (Linux only)');
    else if (cores.length < 2) this.#pinning = off(`off: this process may use one core (${cores.join(',')})`);
    else if (this.#taskset === null) this.#pinning = off('off: taskset (util-linux) is not installed');
    else this.#pinning = { on: true, reason: `on while two or more members run: ${cores.length} cores in ${Math.min(size, cores.length)} groups` };
    this.#all = cores ?? [];
    this.#groups = this.#pinning.on && cores ? coreGroups(cores, size) : [];
    this.#held = this.#groups.map(() => 0);
    this.tried = this.#try(cores?.[0]);
  }

  get pinning(): Pinning {
    return this.#pinning;
  }

  /** Whether taskset has been seen to pin here: until then, nothing is pinned or moved. */
  get working(): boolean {
    return this.#works;
  }

  #try(core: number | undefined): Promise<void> {
    const taskset = this.#taskset;
    if (!this.#pinning.on || taskset === null || core === undefined) return Promise.resolve();
    return trial(taskset, core).then((problem) => {
      if (problem === null) this.#works = true;
      else this.#pinning = { on: false, reason: `off: taskset cannot pin here (${problem})` };
    });
  }

  /**
   * The group a starting member takes (the one fewest running members hold, the lowest on a tie) and
   * the command prefix that pins it (null until taskset has been seen to work), or null when the plan
   * is off.
   */
  take(): { group: number; cores: number[]; prefix: string[] | null } | null {
    if (!this.#pinning.on || this.#taskset === null) return null;
    let group = 0;
    for (let g = 1; g < this.#held.length; g++) if ((this.#held[g] as number) < (this.#held[group] as number)) group = g;
    this.#held[group] = (this.#held[group] as number) + 1;
    const cores = this.#groups[group] as number[];
    return { group, cores, prefix: this.#works ? [this.#taskset, '--cpu-list', cores.join(',')] : null };
  }

  /** Every core the members may use: where a lone member runs. */
  get all(): readonly number[] {
    return this.#all;
  }

  /**
   * Moves every thread of running process `pid` onto `cores`. Not waited on: a member that has just
   * ended cannot be moved, and a move that fails leaves the process where it was, which costs speed only.
   */
  move(pid: number, cores: readonly number[]): void {
    const taskset = this.#taskset;
    if (taskset === null || !this.#works || cores.length === 0) return;
    // One move of a process at a time, in order: an unpin and the pin right after it must land in that order.
    const before = this.#moving.get(pid) ?? Promise.resolve();
    const done: Promise<void> = before.then(
      () =>
        new Promise<void>((resolve) => {
          execFile(taskset, ['--all-tasks', '--pid', '--cpu-list', cores.join(','), String(pid)], { timeout: 10_000 }, () => resolve());
        }),
    );
    this.#moving.set(pid, done);
    void done.then(() => {
      if (this.#moving.get(pid) === done) this.#moving.delete(pid);
    });
  }

  /** A member of `group` has ended. */
  give(group: number): void {
    if (group >= 0 && group < this.#held.length) this.#held[group] = Math.max(0, (this.#held[group] as number) - 1);
  }
}
