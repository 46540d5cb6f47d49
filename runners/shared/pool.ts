import { availableParallelism } from 'node:os';
import type { PoolsConfig } from '../../src/config.js';
import { POOL_LIMITS } from '../../src/limits.js';
import type { Check } from '../../src/runner.js';
import { CorePlan } from './affinity.js';

export type { PoolsConfig };

/**
 * How large a runner's pool of processes grows, and when an idle member ends: the part the JS runner
 * (sandbox processes) and the Python runner (fork servers per tools folder) share. Members start when
 * load needs them (a call finds every member busy) and end after POOL_LIMITS.idle_ms without a call,
 * down to one, so an idle engine holds one process per pool whatever the machine's size.
 */

/** What a runner was told: a size, or none (one member per core), and how long a member may idle. */
export interface PoolSetting {
  /** Members at most; default one per available core. */
  size?: number;
  /** A member with no call for this long ends (never the last one). Default POOL_LIMITS.idle_ms. */
  idleMs?: number;
  /** The cores to size from instead of os.availableParallelism() (tests, and hosts that share the machine). */
  cores?: number;
}

/** What a runner chose, as `engine.status()` and `arium doctor` show it. */
export interface PoolSizing {
  /** Members at most. */
  size: number;
  chosen_by: 'setting' | 'cores';
  /** Why this size, in words. */
  reason: string;
  idle_ms: number;
}

/** A setting that cannot be used: names the option, what it got and what it takes. */
export function poolSettingProblem(name: string, value: unknown, min: number, max: number): string | null {
  if (value === undefined) return null;
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return null;
  return `${name} must be an integer from ${min} to ${max} (got ${JSON.stringify(value) ?? String(value)})`;
}

/** Checks a setting (throws a RangeError naming `where`) and decides the pool's size. */
export function poolSizing(setting: PoolSetting, where: string, member: string): PoolSizing {
  const max = POOL_LIMITS.max_members;
  for (const [key, value, min, top] of [
    ['size', setting.size, 1, max],
    ['idleMs', setting.idleMs, 1, 24 * 3600 * 1000],
    ['cores', setting.cores, 1, 4096],
  ] as const) {
    const problem = poolSettingProblem(`${where}.${key}`, value, min, top);
    if (problem) throw new RangeError(problem);
  }
  const idle_ms = setting.idleMs ?? POOL_LIMITS.idle_ms;
  if (setting.size !== undefined) {
    return { size: setting.size, chosen_by: 'setting', reason: "as set (pools in arium.json or createEngine, or the runner's own option)", idle_ms };
  }
  const given = setting.cores !== undefined;
  const cores = setting.cores ?? availableParallelism();
  const size = Math.min(cores, max);
  const source = given ? 'as given to the runner' : 'available to this process (os.availableParallelism(), which follows taskset and cgroups)';
  const capped = cores > max ? ` (capped at ${max})` : '';
  return {
    size,
    chosen_by: 'cores',
    reason: `one ${member} per core: ${cores} core${cores === 1 ? '' : 's'} ${source}${capped}`,
    idle_ms,
  };
}

/**
 * Of `members`, the one a call should go to: a ready one with the fewest calls in flight (ties to the
 * earliest, so back-to-back calls keep one member's caches warm), a starting one only when none is ready.
 */
export function leastLoaded<M>(members: readonly M[], load: (m: M) => number, ready: (m: M) => boolean): M | null {
  let best: M | null = null;
  let bestRank = Number.POSITIVE_INFINITY;
  for (const member of members) {
    const rank = (ready(member) ? 0 : 1e9) + load(member);
    if (rank < bestRank) {
      best = member;
      bestRank = rank;
    }
  }
  return best;
}

/** The options arium.json's `pools.js` or `pools.wasm` (with createEngine's `pools` over it) gives a sandbox runner. */
export function sandboxPoolOptions(
  config: Readonly<Record<string, unknown>>,
  runner: 'js' | 'wasm',
): { processes?: number; idleMs?: number; pinCores?: boolean } {
  const pool = (config.pools as PoolsConfig | undefined)?.[runner];
  return {
    ...(pool?.processes !== undefined ? { processes: pool.processes } : {}),
    ...(pool?.idle_ms !== undefined ? { idleMs: pool.idle_ms } : {}),
    ...(pool?.pin_cores !== undefined ? { pinCores: pool.pin_cores } : {}),
  };
}

/** `arium doctor`'s line for a pool: its size and why (a bad setting fails, with how to fix it). */
export function poolCheck(
  name: string,
  setting: { processes?: number; servers?: number; idleMs?: number; pinCores?: boolean },
  member: string,
  per = '',
  pins = false,
): Check {
  try {
    const sizing = poolSizing({ size: setting.processes ?? setting.servers, idleMs: setting.idleMs }, name, member);
    const pinning = pins ? `; pinning ${new CorePlan(sizing.size, { pin: setting.pinCores }).pinning.reason}` : '';
    return {
      name,
      ok: true,
      detail: `up to ${sizing.size} ${plural(sizing.size, member)}${per}, ${sizing.reason}; one idle for ${sizing.idle_ms} ms ends, down to one${pinning}`,
    };
  } catch (error) {
    return { name, ok: false, detail: (error as Error).message, fix: `set pools in arium.json to integers from 1 to ${POOL_LIMITS.max_members}` };
  }
}

function plural(n: number, noun: string): string {
  return n === 1 ? noun : noun.endsWith('s') ? `${noun}es` : `${noun}s`;
}
