import { type ChildProcess, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startNats } from './nats-server.js';
import { spawnWorker } from './remote.js';
import { EXPECTED, expectedAnyTime, explains, type FaultKind, type FaultRecord, GRACE_MS, SCHEDULE, TRANSPORT } from './soak-faults.js';
import { Gate, type Outcome, WriteModel } from './soak-model.js';
import { alive, descendants, fillDisk, freeDisk, openFds, type Proc, pythonProcs, rssBytes } from './soak-procs.js';
import { type Answer, callHttp, callLibrary, EngineHost, McpPool, type Surface } from './soak-surfaces.js';
import { type CallClass, MIX, plan, projectConfig, seeded, TOOLS, trackedPaths } from './soak-workload.js';
import { percentile } from './stats.js';

/**
 * The soak: `--calls` (default 100,000) mixed calls through the library API (IPC to the engine's
 * process), MCP over Streamable HTTP and the HTTP gateway at once, 32 in flight in all, against one
 * project with durable state on a tmpfs, while faults are injected on a schedule (soak-faults.ts):
 * sandbox processes killed, the remote worker and the NATS server killed and started again, the disk
 * filled to ENOSPC and freed, the engine's process killed with SIGKILL and started again. Every
 * acknowledged write is checked after each engine restart and at the end (soak-model.ts). Run with
 * `npm run bench -- soak [--calls N] [--seed S]`; the report also goes to bench/soak-results.json.
 */

const IN_FLIGHT = 32;
const SURFACES: Surface[] = ['library', 'mcp', 'http'];
const MCP_SESSIONS = 4;
/** No call finishing for this long: the soak stops and reports a hang. */
const HANG_MS = 120_000;
/** A call this slow is listed in the report. */
const SLOW_MS = 5_000;

interface Failure {
  surface: Surface;
  cls: CallClass;
  tool: string;
  code: string;
  message: string;
  t0: number;
  t1: number;
}

/** Milliseconds from `from` to `to`, or null when `to` never came. */
const since = (from: number, to: number | null) => (to === null ? null : Math.round(to - from));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (value: number, places = 1) => Math.round(value * 10 ** places) / 10 ** places;
const log = (line: string) => process.stderr.write(`soak: ${line}\n`);

/** A tmpfs of 256 MiB for the workspace, so the disk can be filled; null with the reason when it cannot be had. */
function mountTmpfs(dir: string): string | null {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256m', 'tmpfs', dir], { stdio: 'pipe' });
    return null;
  } catch (error) {
    return `mount -t tmpfs failed (${String((error as { stderr?: Buffer }).stderr ?? (error as Error).message).trim()}): the ENOSPC fault is skipped`;
  }
}

export async function benchSoak(flags: ReadonlyMap<string, string> = new Map()): Promise<Record<string, unknown>> {
  const total = Number(flags.get('calls') ?? 100_000);
  const seed = Number(flags.get('seed') ?? 1);
  if (!Number.isInteger(total) || total < 100) throw new Error(`--calls needs a whole number of at least 100 (got ${flags.get('calls')})`);
  const random = seeded(seed);
  const dir = mkdtempSync(join(tmpdir(), 'arium-soak-'));
  const workspace = join(dir, 'ws');
  mkdirSync(workspace);
  const noDisk = mountTmpfs(workspace);
  const mounted = noDisk === null;
  const project = join(workspace, 'p');
  mkdirSync(join(project, 'tools'), { recursive: true });
  for (const [name, text] of Object.entries(TOOLS)) writeFileSync(join(project, 'tools', name), text);

  const nats = await startNats();
  writeFileSync(join(project, 'arium.json'), projectConfig(nats.url));
  const seen = new Map<string, Proc>();
  const note = (procs: Proc[]) => {
    for (const p of procs) seen.set(`${p.pid}:${p.start}`, p);
  };
  let worker: ChildProcess = await spawnWorker(nats.url, join(dir, 'cache'), null, 'js-runner');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const host = new EngineHost(join(import.meta.dirname, 'soak-host.js'), workspace, 'p', port);
  const mcp = new McpPool(base, MCP_SESSIONS);
  const model = new WriteModel(trackedPaths());
  const gate = new Gate();
  const faults: FaultRecord[] = [];
  const failures: Failure[] = [];
  const latencies = new Map<Surface, number[]>(SURFACES.map((s) => [s, []]));
  const counts = new Map<string, number>();
  const recoveries = new Set<{ classes: CallClass[]; since: number; resolve: (t1: number | null) => void }>();
  const inFlight = new Map<number, { t0: number; surface: Surface; tool: string }>();
  const slow: Array<{ surface: Surface; tool: string; code: string; at_s: number; ms: number }> = [];
  const lost: Array<{ when: string; path: string; found: string | null; expected: Array<string | null> }> = [];
  let ready: Promise<void> = Promise.resolve();
  let issued = 0;
  let done = 0;
  let contentSeq = 0;
  let callSeq = 0;
  let lastCompletion = performance.now();
  let started = performance.now();
  let stopping = false;
  let lanesDone = false;
  /** Faults the calls ran out before (a short run, or faults slow to recover). */
  const skipped: FaultKind[] = [];
  let lastStart: { pid: number; rss_mib: number; fds: Record<string, number | string[]> } | null = null;

  const call = async (surface: Surface, tool: string, input: Record<string, unknown>): Promise<Answer> => {
    if (surface === 'library') return callLibrary(host, tool, input);
    if (surface === 'mcp') return mcp.call(tool, input);
    return callHttp(base, tool, input);
  };

  /** One call, timed from when the engine is up; every answer counted and every failure kept. */
  const timed = async (surface: Surface, cls: CallClass, tool: string, input: Record<string, unknown>): Promise<Answer> => {
    await ready;
    const id = ++callSeq;
    const t0 = performance.now();
    inFlight.set(id, { t0, surface, tool });
    const answer = await call(surface, tool, input);
    const t1 = performance.now();
    inFlight.delete(id);
    done++;
    lastCompletion = t1;
    const code = answer.kind === 'ok' ? 'ok' : answer.kind === 'error' ? answer.code : TRANSPORT;
    if (t1 - t0 > SLOW_MS) slow.push({ surface, tool, code, at_s: round((t0 - started) / 1000), ms: Math.round(t1 - t0) });
    counts.set(`${surface} ${tool} ${code}`, (counts.get(`${surface} ${tool} ${code}`) ?? 0) + 1);
    if (answer.kind === 'ok') {
      (latencies.get(surface) as number[]).push(t1 - t0);
      for (const waiter of recoveries) if (waiter.classes.includes(cls) && t0 > waiter.since) waiter.resolve(t1);
    } else {
      failures.push({ surface, cls, tool, code, message: answer.message.slice(0, 300), t0, t1 });
    }
    return answer;
  };

  const outcome = (answer: Answer): Outcome => (answer.kind === 'ok' ? 'ok' : answer.kind === 'error' ? 'failed' : 'unknown');

  const one = async (surface: Surface, cls: CallClass): Promise<void> => {
    if (cls === 'snapshot') {
      await gate.exclusive(async () => {
        const answer = await timed(surface, cls, 'vfs.snapshot', {});
        if (answer.kind === 'ok') model.snapshotTaken(answer.data.id as string);
      });
      return;
    }
    if (cls === 'restore') {
      await gate.exclusive(async () => {
        const target = model.restorable(random);
        if (!target) return;
        const answer = await timed(surface, cls, 'vfs.restore', { snapshot: target });
        model.restored(target, outcome(answer));
      });
      return;
    }
    if (cls === 'read' || cls === 'shell-read') {
      const path = model.paths[Math.floor(random() * model.paths.length)] as string;
      const { tool, input } = plan(cls, path, '', random);
      await timed(surface, cls, tool, input);
      return;
    }
    await gate.shared(async () => {
      const path = model.take(random);
      if (!path) return;
      const content = `${surface}-${cls}-${++contentSeq}-${Math.floor(random() * 1e9).toString(36)}`;
      const { tool, input } = plan(cls, path, content, random);
      const answer = await timed(surface, cls, tool, input);
      model.settle(path, content, outcome(answer));
    });
  };

  const weightSum = MIX.reduce((sum, [, w]) => sum + w, 0);
  const pick = (): CallClass => {
    let r = random() * weightSum;
    for (const [cls, w] of MIX) {
      r -= w;
      if (r < 0) return cls;
    }
    return 'read';
  };

  const lane = async (): Promise<void> => {
    while (!stopping && issued < total) {
      issued++;
      await one(SURFACES[Math.floor(random() * SURFACES.length)] as Surface, pick());
    }
  };

  /** Reads every tracked path in the engine's process and compares with what callers were told. */
  const verify = async (when: string): Promise<number> =>
    gate.exclusive(async () => {
      const found = await host.ask<Array<string | null>>({ op: 'read', paths: model.paths });
      const wrong = model.check(found);
      for (const w of wrong) lost.push({ when, ...w });
      log(`checked ${model.paths.length} tracked files (${when}): ${wrong.length} lost`);
      return wrong.length;
    });

  const status = () =>
    host.ask<{ pid: number; rss: number; fds: Record<string, number | string[]>; engine: { runners: Record<string, Record<string, unknown>> } }>({
      op: 'status',
      gc: true,
    });

  /** Resolves with the end of the first successful call of one of `classes` that started after `since` (null after `limitMs`). */
  const waitOk = (classes: CallClass[], since: number, limitMs = 60_000): Promise<number | null> =>
    new Promise((resolve) => {
      if (lanesDone) return resolve(null);
      const waiter = { classes, since, resolve: (_t1: number | null) => {} };
      const timer = setTimeout(() => waiter.resolve(null), limitMs);
      waiter.resolve = (t1) => {
        clearTimeout(timer);
        recoveries.delete(waiter);
        resolve(t1);
      };
      recoveries.add(waiter);
    });

  const inject = async (kind: FaultKind): Promise<FaultRecord> => {
    const record: FaultRecord = { kind, at_call: done, at_s: 0, target: '', recovered_ms: null, failed: {}, window: [performance.now(), 0] };
    const t = performance.now();
    note(descendants(process.pid));
    switch (kind) {
      case 'js-sandbox': {
        const pid = (await status()).engine.runners['js-runner']?.pid as number | undefined;
        if (!pid) throw new Error('the JS runner reports no sandbox pid');
        record.target = `JS sandbox process ${pid}`;
        process.kill(pid, 'SIGKILL');
        record.recovered_ms = since(t, await waitOk(['js'], performance.now()));
        break;
      }
      case 'py-server':
      case 'py-call': {
        const pids = ((await status()).engine.runners['py-runner']?.server_pids ?? []) as number[];
        let victim: Proc | null = null;
        const until = performance.now() + 10_000;
        while (!victim && performance.now() < until) {
          const found = pids.map((pid) => pythonProcs(pid));
          victim = kind === 'py-server' ? (found.find((f) => f.server)?.server ?? null) : (found.flatMap((f) => f.calls)[0] ?? null);
          if (!victim) await sleep(5);
        }
        if (!victim) {
          record.note = `no ${kind === 'py-server' ? 'fork server' : 'call process'} found below ${pids.join(', ') || 'no server pid'}`;
          break;
        }
        record.target = `${kind === 'py-server' ? 'Python fork server' : 'Python call process'} ${victim.pid} (${victim.command.slice(0, 80)})`;
        process.kill(victim.pid, 'SIGKILL');
        record.recovered_ms = since(t, await waitOk(['py'], performance.now()));
        break;
      }
      case 'worker': {
        record.target = `arium worker ${worker.pid}`;
        await new Promise<void>((resolve) => {
          worker.once('exit', () => resolve());
          worker.kill('SIGKILL');
        });
        const back = waitOk(['remote'], performance.now(), 120_000);
        await sleep(1000);
        worker = await spawnWorker(nats.url, join(dir, 'cache'), null, 'js-runner');
        record.note = `restarted as ${worker.pid} after 1 s`;
        record.recovered_ms = since(t, await back);
        break;
      }
      case 'nats': {
        record.target = `nats-server on ${nats.url}`;
        await nats.stop();
        const back = waitOk(['remote'], performance.now(), 120_000);
        await sleep(1000);
        await nats.start();
        record.note = 'down 1 s';
        record.recovered_ms = since(t, await back);
        break;
      }
      case 'enospc': {
        if (!mounted) {
          record.note = noDisk ?? 'skipped';
          break;
        }
        const filler = join(workspace, 'filler');
        const bytes = fillDisk(filler);
        record.target = `tmpfs ${workspace} filled with ${round(bytes / 1048576)} MiB`;
        await sleep(3000);
        freeDisk(filler);
        record.note = 'full for 3 s';
        record.recovered_ms = since(t, await waitOk(['write'], performance.now()));
        break;
      }
      case 'engine': {
        record.target = `engine process ${host.pid}`;
        note(descendants(host.pid));
        let open: () => void = () => {};
        ready = new Promise<void>((resolve) => {
          open = resolve;
        });
        await host.kill();
        await host.start();
        await mcp.open();
        open();
        record.recovered_ms = Math.round(performance.now() - t);
        const fresh = await status();
        lastStart = { pid: fresh.pid, rss_mib: round(fresh.rss / 1048576), fds: fresh.fds };
        record.note = `restarted as ${host.pid}; ${await verify(`after engine restart at call ${record.at_call}`)} acknowledged writes lost`;
        break;
      }
    }
    record.at_s = round((t - started) / 1000);
    record.window = [t, performance.now() + GRACE_MS];
    log(
      `fault ${kind} at call ${record.at_call}: ${record.target || '-'}; recovered in ${record.recovered_ms ?? '-'} ms${record.note ? `; ${record.note}` : ''}`,
    );
    return record;
  };

  const faultLoop = async (): Promise<void> => {
    for (const [fraction, kind] of SCHEDULE) {
      while (!stopping && !lanesDone && done < fraction * total) await sleep(50);
      if (stopping || lanesDone) {
        skipped.push(kind);
        continue;
      }
      faults.push(await inject(kind));
    }
  };

  const monitor = setInterval(() => {
    note(descendants(process.pid));
    const now = performance.now();
    const oldest = Math.max(0, ...[...inFlight.values()].map((c) => now - c.t0));
    log(
      `${done}/${total} calls, ${Math.round(done / ((now - started) / 1000))}/s, ${failures.length} failed, oldest in flight ${Math.round(oldest)} ms, load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
    );
  }, 10_000);

  try {
    await host.start();
    await mcp.open();
    // Folders first, then one call of each tool through each surface so that every sandbox is warm.
    for (let d = 0; d < 16; d++) await callLibrary(host, 'fs.mkdir', { path: `/w/d${d}`, parents: true });
    for (const surface of SURFACES) {
      for (const [tool, input] of [
        ['js.write', { path: '/w/warm.txt', content: 'x' }],
        ['py.write', { path: '/w/warm.txt', content: 'x' }],
        ['r.write', { path: '/w/warm.txt', content: 'x' }],
        ['shell.run', { script: 'true' }],
      ] as const) {
        let answer = await call(surface, tool, input);
        for (let i = 0; answer.kind !== 'ok' && i < 50; i++) {
          await sleep(200);
          answer = await call(surface, tool, input);
        }
        if (answer.kind !== 'ok') throw new Error(`warm-up ${tool} over ${surface} failed: ${JSON.stringify(answer)}`);
      }
    }
    const first = await callLibrary(host, 'vfs.snapshot', {});
    if (first.kind !== 'ok') throw new Error(`first snapshot failed: ${JSON.stringify(first)}`);
    model.snapshotTaken(first.data.id as string);
    await sleep(2000);
    const before = await status();
    log(`engine ${before.pid}: RSS ${round(before.rss / 1048576)} MiB, ${before.fds.total} fds; ${total} calls, ${IN_FLIGHT} in flight`);

    started = performance.now();
    const loadBefore = loadavg();
    let hung: string | null = null;
    const watchdog = new Promise<void>((resolve) => {
      const tick = setInterval(() => {
        if (stopping) {
          clearInterval(tick);
          resolve();
        } else if (performance.now() - lastCompletion > HANG_MS && inFlight.size > 0) {
          hung = `no call finished for ${HANG_MS / 1000} s; in flight: ${JSON.stringify([...inFlight.values()].slice(0, 8))}`;
          clearInterval(tick);
          resolve();
        }
      }, 1000);
    });
    const lanes = Promise.all(Array.from({ length: IN_FLIGHT }, lane)).then(() => {
      // No call will come to end a fault's wait for recovery, nor reach the next fault's turn.
      lanesDone = true;
      for (const waiter of recoveries) waiter.resolve(null);
    });
    const work = Promise.all([lanes, faultLoop()]);
    await Promise.race([work, watchdog]);
    const elapsed = (performance.now() - started) / 1000;
    stopping = true;
    if (hung) log(`HANG: ${hung}`);
    else await work;
    if (!hung) await verify('at the end');

    const stateSize = execFileSync('du', ['-sh', '--apparent-size', join(project, '.arium')], { encoding: 'utf8' }).split('\t')[0];
    // Let the engine settle, then measure it as before (both after a full GC in its process).
    await sleep(5000);
    const after = await status();
    const lastEngine = host.pid;

    const rates = (surface: Surface) => {
      const times = latencies.get(surface) as number[];
      return { ok_calls: times.length, p50_ms: round(percentile(times, 0.5), 2), p99_ms: round(percentile(times, 0.99), 2) };
    };
    // Each failure is expected when the workload explains it or a fault overlapping the call does.
    const unexpected: Failure[] = [];
    for (const f of failures) {
      const byFault = faults.find((fault) => f.t0 <= fault.window[1] && f.t1 >= fault.window[0] && explains(fault.kind, f.cls, f.code));
      if (byFault) byFault.failed[f.code] = (byFault.failed[f.code] ?? 0) + 1;
      else if (!expectedAnyTime(f.cls, f.code)) unexpected.push(f);
    }
    const unexpectedByCode: Record<string, number> = {};
    for (const f of unexpected) unexpectedByCode[`${f.tool} ${f.code}`] = (unexpectedByCode[`${f.tool} ${f.code}`] ?? 0) + 1;

    await mcp.close();
    await host.stop();
    await new Promise<void>((resolve) => {
      if (worker.exitCode !== null) return resolve();
      const force = setTimeout(() => worker.kill('SIGKILL'), 15_000);
      worker.once('exit', () => {
        clearTimeout(force);
        resolve();
      });
      worker.kill('SIGTERM');
    });
    await nats.stop();
    await sleep(3000);
    const leftover = [...seen.values()].filter(alive).map((p) => `${p.pid} ${p.command.slice(0, 120)}`);

    const anyTime = failures.filter((f) => expectedAnyTime(f.cls, f.code)).length;
    const report = {
      calls: done,
      seconds: round(elapsed),
      calls_per_s: Math.round(done / elapsed),
      in_flight: IN_FLIGHT,
      seed,
      load_average_before: loadBefore.map((l) => round(l, 2)),
      load_average_after: loadavg().map((l) => round(l, 2)),
      per_surface: Object.fromEntries(SURFACES.map((s) => [s, rates(s)])),
      acknowledged_writes: model.acknowledged,
      writes_with_unknown_outcome: model.unknown,
      acknowledged_writes_lost: hung ? `${lost.length} before the hang; not checked at the end` : lost.length,
      lost_examples: lost.slice(0, 10),
      failures_expected_by_workload: anyTime,
      failures_unexpected: unexpected.length,
      unexpected_by_tool_and_code: unexpectedByCode,
      unexpected_examples: unexpected.slice(0, 12).map((f) => ({
        surface: f.surface,
        tool: f.tool,
        code: f.code,
        at_s: round((f.t0 - started) / 1000),
        message: f.message,
      })),
      slow_calls: { over_ms: SLOW_MS, count: slow.length, first: slow.slice(0, 40) },
      hang: hung,
      engine: {
        before: { pid: before.pid, rss_mib: round(before.rss / 1048576), fds: before.fds },
        last_engine_at_start: lastStart,
        after_settle: { pid: after.pid, rss_mib: round(after.rss / 1048576), fds: after.fds },
        last_engine_pid: lastEngine,
        starts: host.starts,
        note: 'before: the first engine, warm; last_engine_at_start: the last engine just after its restart; after_settle: the last engine 5 s after the load; each after a full GC in the engine process',
      },
      expected_codes: Object.fromEntries(
        Object.entries(EXPECTED).map(([k, v]) => [k, v.map(([c, codes]) => `${codes.join('/')} for ${c.join(',')}`)]),
      ),
      faults: faults.map(({ window: _, ...f }) => f),
      faults_not_injected: skipped,
      disk_fault: mounted ? 'tmpfs 256 MiB' : noDisk,
      state_on_disk: stateSize,
      processes_left_over: leftover,
      answers: Object.fromEntries([...counts].sort()),
      bench_process: { rss_mib: round(rssBytes(process.pid) / 1048576), fds: openFds(process.pid) },
    };
    writeFileSync(new URL('../../bench/soak-results.json', import.meta.url), `${JSON.stringify(report, null, 2)}\n`);
    return report;
  } finally {
    clearInterval(monitor);
    stopping = true;
    await mcp.close().catch(() => {});
    await host.stop().catch(() => {});
    if (worker.exitCode === null) worker.kill('SIGKILL');
    await nats.stop().catch(() => {});
    if (mounted) {
      try {
        execFileSync('umount', ['-l', workspace], { stdio: 'ignore' });
      } catch {
        log(`could not unmount ${workspace}`);
      }
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
