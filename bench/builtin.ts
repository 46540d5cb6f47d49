import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Volume } from 'memfs';
import { createEngine } from '../src/index.js';
import { median, percentile, perOp, timeBatches } from './stats.js';

/**
 * The cost the pipeline (lookup, input copy and validation, permission gate, concurrency slot,
 * permission-checked VFS, output check, result) adds to a 1 KB `fs.read`, against the raw memfs read
 * measured in the same run, and sustained builtin calls per second on one core.
 */
export async function benchBuiltin(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-'));
  mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
  const engine = await createEngine({ workspace: dir, project: 'bench', watch: false });
  try {
    const content = `${'x'.repeat(1023)}\n`;
    engine.vfs.write('/data/a.txt', content);
    const vol = new Volume();
    vol.mkdirSync('/data');
    vol.writeFileSync('/data/a.txt', content);

    const rawBatches = timeBatches(200, 1000, () => {
      vol.readFileSync('/data/a.txt');
    });
    const rawUtf8Batches = timeBatches(200, 1000, () => {
      (vol.readFileSync('/data/a.txt') as Buffer).toString('utf8');
    });

    const input = { path: '/data/a.txt' };
    for (let i = 0; i < 20_000; i++) await engine.call('fs.read', input); // warm-up: JIT, caches
    const callTimes: number[] = [];
    for (let i = 0; i < 50_000; i++) {
      const t0 = performance.now();
      const r = await engine.call('fs.read', input);
      callTimes.push(performance.now() - t0);
      if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
    }

    let listened = 0;
    engine.events.on('event', () => {
      listened++;
    });
    const withEvents: number[] = [];
    for (let i = 0; i < 20_000; i++) {
      const t0 = performance.now();
      await engine.call('fs.read', input);
      withEvents.push(performance.now() - t0);
    }
    engine.events.removeAllListeners('event');

    // Throughput: sequential calls for ~2 s on the one core this process runs on.
    const tEnd = performance.now() + 2000;
    let calls = 0;
    const t0 = performance.now();
    while (performance.now() < tEnd) {
      for (let i = 0; i < 1000; i++) await engine.call('fs.read', input);
      calls += 1000;
    }
    const sequentialPerSec = calls / ((performance.now() - t0) / 1000);

    // Throughput with 64 calls in flight (what an HTTP or MCP surface sees).
    const t1 = performance.now();
    let concurrentCalls = 0;
    while (performance.now() - t1 < 2000) {
      await Promise.all(Array.from({ length: 64 }, () => engine.call('fs.read', input)));
      concurrentCalls += 64;
    }
    const concurrentPerSec = concurrentCalls / ((performance.now() - t1) / 1000);

    const writes = await benchWrites(content);

    const rawUs = perOp(rawBatches, 1000) * 1000;
    const rawUtf8Us = perOp(rawUtf8Batches, 1000) * 1000;
    const pipelineUs = median(callTimes) * 1000;
    return {
      raw_memfs_read_us: round(rawUs),
      raw_memfs_read_utf8_us: round(rawUtf8Us),
      pipeline_fs_read_median_us: round(pipelineUs),
      pipeline_added_us: round(pipelineUs - rawUtf8Us),
      pipeline_p99_us: round(percentile(callTimes, 0.99) * 1000),
      ratio_to_raw: round(pipelineUs / rawUtf8Us),
      with_event_listener_median_us: round(median(withEvents) * 1000),
      events_seen: listened,
      sequential_calls_per_sec: Math.round(sequentialPerSec),
      concurrent64_calls_per_sec: Math.round(concurrentPerSec),
      ...writes,
    };
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `fs.write` of 1 KB in memory: one call at a time (no other transaction open, so commits hand out no
 * pre-images), 64 in flight to 64 files (each commit hands its pre-images to the other open calls),
 * and 32 at once appending to one file (every call but one loses the race and runs again).
 */
async function benchWrites(content: string): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-'));
  mkdirSync(join(dir, 'bench', 'tools'), { recursive: true });
  const engine = await createEngine({ workspace: dir, project: 'bench', watch: false, persist: false });
  try {
    const input = { path: '/data/w.txt', content };
    for (let i = 0; i < 20_000; i++) await engine.call('fs.write', input);
    const times: number[] = [];
    for (let i = 0; i < 30_000; i++) {
      const t0 = performance.now();
      const r = await engine.call('fs.write', input);
      times.push(performance.now() - t0);
      if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
    }
    const inputs = Array.from({ length: 64 }, (_, i) => ({ path: `/data/many/${i}.txt`, content }));
    const t1 = performance.now();
    let spread = 0;
    while (performance.now() - t1 < 2000) {
      const results = await Promise.all(inputs.map((one) => engine.call('fs.write', one)));
      if (results.some((r) => !r.ok)) throw new Error('bench call failed');
      spread += 64;
    }
    const spreadPerSec = spread / ((performance.now() - t1) / 1000);
    let runs = 0;
    engine.events.on('result', (event) => {
      runs += (event as { attempts?: number }).attempts ?? 1;
    });
    const line = { path: '/data/log.txt', content: 'one more line\n', append: true };
    const t2 = performance.now();
    let appended = 0;
    while (performance.now() - t2 < 2000) {
      const results = await Promise.all(Array.from({ length: 32 }, () => engine.call('fs.write', line)));
      if (results.some((r) => !r.ok)) throw new Error('bench call failed');
      appended += 32;
      engine.vfs.write('/data/log.txt', '');
    }
    const appendPerSec = appended / ((performance.now() - t2) / 1000);
    return {
      fs_write_memory_median_us: round(median(times) * 1000),
      fs_write_64_files_in_flight_calls_per_sec: Math.round(spreadPerSec),
      fs_write_32_appends_one_file_calls_per_sec: Math.round(appendPerSec),
      fs_write_32_appends_runs_per_call: round(runs / appended),
    };
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function round(n: number): number {
  return Math.round(n * 100) / 100;
}
