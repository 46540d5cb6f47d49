// Failover of a project kept in NATS JetStream: the holder killed or stopped during a burst of
// acknowledged writes from 8 concurrent callers, another process taking the project over after the
// lease, and the former holder fenced off. The holder is a child process on the built engine (dist/).
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';
import { type JetStreamCluster, startJetStream } from './support/jetstream.js';
import { tempProject } from './support/project.js';

const ROOT = join(import.meta.dirname, '..');
const ENGINE = join(ROOT, 'dist', 'src', 'index.js');
const HOLDER = join(ROOT, 'fixtures', 'durability', 'jetstream-holder.mjs');
const LEASE_MS = 1500;

/** What the holder fixture writes as its caller `c`'s write `n` (see jetstream-holder.mjs). */
const content = (c: number, n: number) => `${c}:${n}:${'x'.repeat(n % 7 === 0 ? 1_500_000 : 100 + n)}`;

interface Holder {
  child: ChildProcess;
  /** Writes acknowledged, by caller: the highest n of each (they are acknowledged in order). */
  acked: Map<number, number>;
  lines: string[];
  exited: Promise<number | null>;
  waitFor(test: () => boolean, what: string, ms?: number): Promise<void>;
}

function startHolder(workspace: string): Holder {
  const child = spawn(process.execPath, [HOLDER, pathToFileURL(ENGINE).href, workspace, 'p'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const acked = new Map<number, number>();
  const lines: string[] = [];
  let rest = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    rest += chunk.toString();
    const whole = rest.split('\n');
    rest = whole.pop() ?? '';
    for (const line of whole) {
      lines.push(line);
      const ack = /^ACK (\d+) (\d+)$/.exec(line);
      if (ack) acked.set(Number(ack[1]), Number(ack[2]));
    }
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const waitFor = async (test: () => boolean, what: string, ms = 60_000) => {
    const deadline = Date.now() + ms;
    while (!test()) {
      if (Date.now() > deadline || (child.exitCode !== null && !test())) {
        throw new Error(
          `the holder did not reach: ${what} (exit ${child.exitCode}; stdout tail ${lines.slice(-5).join(' | ')}; stderr ${stderr.slice(-2000)})`,
        );
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return { child, acked, lines, exited, waitFor };
}

const total = (acked: Map<number, number>) => [...acked.values()].reduce((a, b) => a + b, 0);

/** Every acknowledged write is in `engine`'s tree, whole; every file of the callers is whole (none torn). */
function checkAcknowledged(engine: Engine, acked: Map<number, number>): void {
  for (const [c, last] of acked) {
    for (let n = 1; n <= last; n++) expect(engine.vfs.read(`/c${c}/${n}.txt`).toString() === content(c, n), `/c${c}/${n}.txt`).toBe(true);
  }
  for (let c = 0; c < 8; c++) {
    if (!engine.vfs.exists(`/c${c}`)) continue;
    for (const entry of engine.vfs.list(`/c${c}`).entries) {
      const n = Number(/(\d+)\.txt$/.exec(entry.path)?.[1]);
      expect(engine.vfs.read(entry.path).toString() === content(c, n), `${entry.path} is whole`).toBe(true);
    }
  }
}

let cluster: JetStreamCluster;
beforeAll(async () => {
  if (!existsSync(ENGINE)) throw new Error('dist/ is missing: run npm run build (npm test does) before this suite');
  cluster = await startJetStream(1);
});
afterAll(() => cluster?.remove());

describe('JetStream store failover', () => {
  let project: ReturnType<typeof tempProject>;
  let holder: Holder | null = null;
  let names = 0;
  const open = () => createEngine({ workspace: project.workspace, project: 'p', watch: false });

  const setUp = (leaseMs = LEASE_MS) => {
    project = tempProject({}, 'arium-failover-');
    const config = {
      store: { nats: { servers: cluster.urls }, name: `failover-${process.pid}-${++names}`, lease_ms: leaseMs },
      policy: { input_bytes: 4 * 1024 * 1024 },
    };
    writeFileSync(join(project.workspace, 'p', 'arium.json'), JSON.stringify(config));
  };
  afterEach(async () => {
    if (holder && holder.child.exitCode === null) {
      holder.child.kill('SIGKILL');
      await holder.exited;
    }
    holder = null;
    project?.remove();
  });

  it('takes over from a holder killed (-9) mid-burst, losing and tearing no acknowledged write', async () => {
    setUp();
    holder = startHolder(project.workspace);
    const a = holder;
    await a.waitFor(() => total(a.acked) >= 120, '120 acknowledged writes');
    a.child.kill('SIGKILL');
    await a.exited;
    const killedAt = Date.now();
    const acked = new Map(a.acked);
    const b = await open();
    const failover = Date.now() - killedAt;
    try {
      checkAcknowledged(b, acked);
      expect((await b.call('fs.write', { path: '/after.txt', content: 'b' })).ok).toBe(true);
      console.log(`failover after kill -9: ${failover} ms (lease ${LEASE_MS} ms), ${total(acked)} acknowledged writes kept`);
    } finally {
      await b.close();
    }
  });

  it('fences a holder stopped past its lease: its late commits are refused and it steps down', async () => {
    setUp();
    holder = startHolder(project.workspace);
    const a = holder;
    await a.waitFor(() => total(a.acked) >= 60, '60 acknowledged writes');
    a.child.kill('SIGSTOP');
    // What it printed before it stopped is still in the pipe: read it all before taking the count.
    await new Promise((r) => setTimeout(r, 500));
    const seen = a.lines.length;
    const b = await open();
    try {
      expect((await b.call('fs.write', { path: '/b.txt', content: 'written by the new holder' })).ok).toBe(true);
      a.child.kill('SIGCONT');
      await a.waitFor(() => a.lines.includes('STEPPED DOWN'), 'every caller refused');
      const late = a.lines.slice(seen);
      const failures = late.filter((line) => line.startsWith('FAIL'));
      expect(failures).toHaveLength(8);
      for (const line of failures) expect(line).toMatch(/no longer holds the project .* took it over/);
      // A write A had in flight when it was stopped may be acknowledged when it resumes, if JetStream
      // stored it before B's fence: B read it when it took over. Every write A acknowledged, late or
      // not, is in B's tree; one that landed after B took over (no fencing) would be in no one's.
      checkAcknowledged(b, a.acked);
      expect((await b.call('fs.write', { path: '/b2.txt', content: 'still the holder' })).ok).toBe(true);
    } finally {
      await b.close();
    }
    const c = await open();
    try {
      checkAcknowledged(c, a.acked);
      expect(c.vfs.read('/b.txt').toString()).toBe('written by the new holder');
      expect(c.vfs.read('/b2.txt').toString()).toBe('still the holder');
    } finally {
      await c.close();
    }
  });

  it('refuses a second engine while the holder lives, naming it', async () => {
    // A longer lease: a holder starved of CPU on a loaded machine for longer than its lease is taken over (and fenced).
    setUp(5000);
    holder = startHolder(project.workspace);
    const a = holder;
    await a.waitFor(() => a.lines.includes('READY'), 'ready');
    await expect(open()).rejects.toThrow(new RegExp(`pid ${a.child.pid} on .* holds the project "failover-`));
    expect(a.child.exitCode).toBeNull();
  });
});
