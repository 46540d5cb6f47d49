/** Small statistics helpers shared by the benchmarks. Times are in milliseconds. */

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
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
