import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createEngine, type Engine, JetStreamStore } from '../src/index.js';
import { DEFAULT_JETSTREAM_STORE } from '../src/limits.js';
import { startServers } from './jetstream-cluster.js';
import { median, percentile } from './stats.js';

/**
 * A durable `fs.write` of 1 KB through `engine.call` on the file store (one journal fdatasync per
 * call) beside the same call on a JetStream store with one replica (one publish acknowledged by a
 * nats-server with `-js` on loopback per call) and with three (a cluster of three on loopback, a
 * majority acknowledging): latency of one caller, and throughput of 8 concurrent callers. Then a
 * snapshot of 10,000 new files and a restore back to it on each store, and the failover time after a
 * holder is killed -9 (to the new holder's first acknowledged write), 10 kills on R1 and R3. Rounds
 * of each in turn, so that a busy moment of the machine falls on all alike.
 */
const ROUNDS = 5;
const SEQUENTIAL = 100;
const CONCURRENT = 400;

async function sequential(engine: Engine, into: number[]): Promise<void> {
  const content = `${'x'.repeat(1023)}\n`;
  for (let i = 0; i < SEQUENTIAL; i++) {
    const t0 = performance.now();
    const r = await engine.call('fs.write', { path: '/w.txt', content });
    into.push(performance.now() - t0);
    if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
  }
}

/** Calls per second of 8 callers writing their own files at once. */
async function concurrent(engine: Engine): Promise<number> {
  const content = `${'y'.repeat(1023)}\n`;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 8 }, async (_, c) => {
      for (let i = 0; i < CONCURRENT / 8; i++) {
        const r = await engine.call('fs.write', { path: `/c${c}.txt`, content });
        if (!r.ok) throw new Error(`bench call failed: ${r.error.message}`);
      }
    }),
  );
  return CONCURRENT / ((performance.now() - t0) / 1000);
}

const FILES = 10_000;
const SNAPSHOT_ROUNDS = 3;
const KILLS = 10;

/** 10,000 files of about 200 bytes in 100 folders, on the host, for import. */
function hostTree(dir: string): string {
  const root = join(dir, 'tree');
  for (let d = 0; d < 100; d++) {
    mkdirSync(join(root, `d${d}`), { recursive: true });
    for (let f = 0; f < FILES / 100; f++) writeFileSync(join(root, `d${d}`, `f${f}.txt`), `${d}/${f} ${'z'.repeat(190)}\n`);
  }
  return root;
}

/** Snapshot of a tree of 10,000 new files, then restore to an empty snapshot and back to it (ms each). */
async function snapshotRestore(engine: Engine, tree: string): Promise<{ snapshot: number; restore: number }> {
  engine.snapshot({ label: 'empty' });
  engine.importFrom(tree, '/');
  let t0 = performance.now();
  engine.snapshot({ label: 'full' });
  const snapshot = performance.now() - t0;
  engine.restore('empty');
  t0 = performance.now();
  engine.restore('full');
  const restore = performance.now() - t0;
  if (!engine.vfs.exists('/d99/f99.txt')) throw new Error('bench: the restored tree lacks /d99/f99.txt');
  return { snapshot, restore };
}

/** An engine in another process that holds the project on `servers` and writes once, until killed. */
const HOLDER = `
const [url, workspace, servers, name, replicas] = JSON.parse(process.argv[2]);
const { createEngine, JetStreamStore } = await import(url);
const engine = await createEngine({ workspace, project: 'js', watch: false, store: new JetStreamStore({ servers, name, replicas }) });
const r = await engine.call('fs.write', { path: '/held.txt', content: String(process.pid) });
process.stdout.write(r.ok ? 'READY\\n' : 'FAILED ' + r.error.message + '\\n');
setInterval(() => {}, 60_000);
`;

/** Kill -9 of the holder to the first write acknowledged by an engine that took the project over, ms. */
async function failover(dir: string, servers: string[], name: string, replicas: 1 | 3): Promise<number> {
  const url = pathToFileURL(join(import.meta.dirname, '..', 'src', 'index.js')).href;
  // A file, not \`node -e\`: the store's worker thread did not answer in a process started with -e.
  const script = join(dir, 'holder.mjs');
  writeFileSync(script, HOLDER);
  const child = spawn(process.execPath, [script, JSON.stringify([url, dir, servers, name, replicas])], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('READY')) resolve();
      if (out.includes('FAILED')) reject(new Error(out));
    });
    child.once('exit', () => reject(new Error(`the holder exited: ${out}`)));
  });
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  const t0 = performance.now();
  const engine = await createEngine({ workspace: dir, project: 'js', watch: false, store: new JetStreamStore({ servers, name, replicas }) });
  try {
    const r = await engine.call('fs.write', { path: '/taken.txt', content: 'over' });
    if (!r.ok) throw new Error(`bench: the write after the takeover failed: ${r.error.message}`);
    return performance.now() - t0;
  } finally {
    await engine.close();
  }
}

export async function benchStoreJetStream(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-jetstream-'));
  mkdirSync(join(dir, 'file', 'tools'), { recursive: true });
  mkdirSync(join(dir, 'js', 'tools'), { recursive: true });
  const r1 = await startServers(dir, 1);
  const r3 = await startServers(dir, 3);
  const engines: Engine[] = [];
  try {
    const file = await createEngine({ workspace: dir, project: 'file', watch: false });
    engines.push(file);
    const js = await createEngine({
      workspace: dir,
      project: 'js',
      watch: false,
      store: new JetStreamStore({ servers: r1.urls, name: 'bench', replicas: 1 }),
    });
    engines.push(js);
    const js3 = await createEngine({
      workspace: dir,
      project: 'js',
      watch: false,
      store: new JetStreamStore({ servers: r3.urls, name: 'bench3', replicas: 3 }),
    });
    engines.push(js3);
    await sequential(file, []);
    await sequential(js, []);
    await sequential(js3, []);
    const latency = { file: [] as number[], js: [] as number[], js3: [] as number[] };
    const rate = { file: [] as number[], js: [] as number[], js3: [] as number[] };
    for (let round = 0; round < ROUNDS; round++) {
      await sequential(file, latency.file);
      await sequential(js, latency.js);
      await sequential(js3, latency.js3);
      rate.file.push(await concurrent(file));
      rate.js.push(await concurrent(js));
      rate.js3.push(await concurrent(js3));
    }
    for (const engine of engines.splice(0)) await engine.close();

    // Snapshots of 10,000 files, each round on new projects, the three stores in turn.
    const tree = hostTree(dir);
    const snap = { file: [] as number[], js: [] as number[], js3: [] as number[] };
    const back = { file: [] as number[], js: [] as number[], js3: [] as number[] };
    for (let round = 0; round < SNAPSHOT_ROUNDS; round++) {
      const stores = {
        file: () => {
          mkdirSync(join(dir, `file${round}`, 'tools'), { recursive: true });
          return createEngine({ workspace: dir, project: `file${round}`, watch: false });
        },
        js: () =>
          createEngine({
            workspace: dir,
            project: 'js',
            watch: false,
            store: new JetStreamStore({ servers: r1.urls, name: `snap${round}`, replicas: 1 }),
          }),
        js3: () =>
          createEngine({
            workspace: dir,
            project: 'js',
            watch: false,
            store: new JetStreamStore({ servers: r3.urls, name: `snap3${round}`, replicas: 3 }),
          }),
      };
      for (const kind of ['file', 'js', 'js3'] as const) {
        const engine = await stores[kind]();
        try {
          const { snapshot, restore } = await snapshotRestore(engine, tree);
          snap[kind].push(snapshot);
          back[kind].push(restore);
        } finally {
          await engine.close();
        }
      }
    }

    // Failover: the holder killed -9, R1 and R3 in turn.
    const over = { js: [] as number[], js3: [] as number[] };
    for (let kill = 0; kill < KILLS; kill++) {
      over.js.push(await failover(dir, r1.urls, 'failover', 1));
      over.js3.push(await failover(dir, r3.urls, 'failover3', 3));
    }

    const summary = (values: number[]) => ({ p50_ms: +median(values).toFixed(3), p99_ms: +percentile(values, 0.99).toFixed(3) });
    const ms = (values: number[]) => ({ median_ms: Math.round(median(values)), max_ms: Math.round(Math.max(...values)) });
    return {
      file_write: summary(latency.file),
      jetstream_r1_write: summary(latency.js),
      jetstream_r3_write: summary(latency.js3),
      file_calls_per_s_8_callers: Math.round(median(rate.file)),
      jetstream_r1_calls_per_s_8_callers: Math.round(median(rate.js)),
      jetstream_r3_calls_per_s_8_callers: Math.round(median(rate.js3)),
      snapshot_10000_files: { file: ms(snap.file), jetstream_r1: ms(snap.js), jetstream_r3: ms(snap.js3) },
      restore_10000_files: { file: ms(back.file), jetstream_r1: ms(back.js), jetstream_r3: ms(back.js3) },
      failover_after_kill_9: { lease_ms: DEFAULT_JETSTREAM_STORE.lease_ms, kills: KILLS, jetstream_r1: ms(over.js), jetstream_r3: ms(over.js3) },
    };
  } finally {
    for (const engine of engines) await engine.close();
    r1.stop();
    r3.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
