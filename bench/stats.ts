import { readdirSync, readFileSync } from 'node:fs';
import { descendants } from './soak-procs.js';

/** Small statistics helpers shared by the benchmarks. Times are in milliseconds. */

/** One clock tick of /proc's CPU times (USER_HZ is 100 on Linux). */
const TICK_MS = 1000 / 100;

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** The value below which a fraction `p` of `values` lies (0.99: the 99th percentile). */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;
}

/** Runs `fn` `perBatch` times in each of `batches` batches; returns each batch's total time. */
export function timeBatches(batches: number, perBatch: number, fn: () => void): number[] {
  const out: number[] = [];
  for (let b = 0; b < batches; b++) {
    const t0 = performance.now();
    for (let i = 0; i < perBatch; i++) fn();
    out.push(performance.now() - t0);
  }
  return out;
}

/** Median time of one operation, from batch totals. */
export function perOp(batchTimes: readonly number[], perBatch: number): number {
  return median(batchTimes) / perBatch;
}

/** A process's own CPU time (ms) and that of the children it has reaped, from /proc; null once it has ended. */
function processCpu(pid: number): { own: number; reaped: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After "pid (comm) ": utime, stime, cutime and cstime are the 12th to 15th fields.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { own: (Number(fields[11]) + Number(fields[12])) * TICK_MS, reaped: (Number(fields[13]) + Number(fields[14])) * TICK_MS };
  } catch {
    return null;
  }
}

/**
 * CPU time (ms) used so far by the process `pid` and by each process below it, from /proc (Linux only;
 * zeros elsewhere): `self` is the process's own, threads that ended included; `below` its live
 * descendants', each with the children it has reaped (a fork server's finished call processes). A
 * descendant that ended between two readings is missing from the second: compare readings of a tree
 * that keeps its members.
 */
export function treeCpu(pid: number): { self: number; below: number } {
  let below = 0;
  let procs: ReturnType<typeof descendants>;
  try {
    procs = descendants(pid);
  } catch {
    return { self: 0, below: 0 };
  }
  for (const proc of procs) {
    const cpu = processCpu(proc.pid);
    if (cpu) below += cpu.own + cpu.reaped;
  }
  return { self: processCpu(pid)?.own ?? 0, below };
}

/** CPU time each thread of a process has used so far, from /proc (Linux only; empty elsewhere): thread id → name and ms. */
export function threadCpu(pid: number): Map<string, { name: string; ms: number }> {
  const out = new Map<string, { name: string; ms: number }>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      // The main thread's id is the process id; the others go by their name (`node` for Node's and isolated-vm's pool threads).
      const name = tid === String(pid) ? 'main' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      // After "pid (comm) ": utime and stime are the 12th and 13th fields.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(tid, { name, ms: (Number(fields[11]) + Number(fields[12])) * TICK_MS });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return out;
}

/**
 * CPU per operation (µs) by thread name between two threadCpu readings. A thread that ended between
 * them is not counted (the bench's threads live as long as the process).
 */
export function cpuPerOp(
  before: Map<string, { name: string; ms: number }>,
  after: Map<string, { name: string; ms: number }>,
  ops: number,
): Record<string, number> {
  const used = new Map<string, number>();
  for (const [tid, now] of after) used.set(now.name, (used.get(now.name) ?? 0) + now.ms - (before.get(tid)?.ms ?? 0));
  const out: Record<string, number> = {};
  for (const [name, ms] of used) if (ms > 0) out[name] = Math.round((ms * 1000) / ops);
  return out;
}

/** Busy CPU time of the whole machine so far (all cores, ms), from /proc/stat; NaN where there is none. */
export function machineCpu(): number {
  try {
    const fields = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    const busy = (fields[0] ?? 0) + (fields[1] ?? 0) + (fields[2] ?? 0) + (fields[5] ?? 0) + (fields[6] ?? 0) + (fields[7] ?? 0);
    return busy * TICK_MS;
  } catch {
    return Number.NaN;
  }
}
