import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { withPackMutex } from '../src/packs/lock.js';

// The mutex `arium add` and `arium remove` hold across processes: processes taking it back to back,
// each holding it for a moment, must all get it, one at a time. Run on the built module, in real
// processes, where the holder's file appears and disappears between another's tries.

const LOCK = fileURLToPath(new URL('../dist/src/packs/lock.js', import.meta.url));
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A process that takes the mutex `times` times; each time it adds one to the count file, a read and a write apart. */
const TAKER = `
const { readFileSync, writeFileSync } = require('node:fs');
const [lock, project, times] = process.argv.slice(1);
import(lock).then(async ({ withPackMutex }) => {
  for (let i = 0; i < Number(times); i++) {
    await withPackMutex(project, async () => {
      const count = Number(readFileSync(project + '/count', 'utf8'));
      await new Promise((resolve) => setImmediate(resolve));
      writeFileSync(project + '/count', String(count + 1));
    });
  }
});
`;

describe('the pack mutex', () => {
  it('lets processes that take it back to back each take it every time, one at a time', async () => {
    const project = mkdtempSync(join(tmpdir(), 'arium-pack-mutex-'));
    dirs.push(project);
    writeFileSync(join(project, 'count'), '0');
    const takers = 4;
    const times = 300;
    const runs = await Promise.allSettled(
      Array.from({ length: takers }, () => promisify(execFile)(process.execPath, ['-e', TAKER, LOCK, project, String(times)])),
    );
    expect(runs.map((r) => (r.status === 'fulfilled' ? r.status : String((r.reason as { stderr?: string }).stderr || r.reason)))).toEqual(
      Array.from({ length: takers }, () => 'fulfilled'),
    );
    // Every increment was made holding the mutex alone: none was lost.
    expect(Number(readFileSync(join(project, 'count'), 'utf8'))).toBe(takers * times);
  }, 60_000);
});

/** The pid of a process that has exited (a holder that died). */
function deadPid(): number {
  return Number(execFileSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }));
}

function project(): { dir: string; mutex: string } {
  const dir = mkdtempSync(join(tmpdir(), 'arium-pack-stale-'));
  dirs.push(dir);
  mkdirSync(join(dir, '.arium'));
  return { dir, mutex: join(dir, '.arium', 'packs.mutex') };
}

const record = (pid: number, host = hostname()): string => JSON.stringify({ pid, host, at: new Date().toISOString() });

describe('the pack mutex left by a process that died', () => {
  it('is taken over, in the owner record and in the bare pid an older Arium wrote', async () => {
    for (const stale of [record(deadPid()), String(deadPid())]) {
      const { dir, mutex } = project();
      writeFileSync(mutex, stale);
      let held = '';
      await withPackMutex(dir, async () => {
        held = readFileSync(mutex, 'utf8');
      });
      expect(JSON.parse(held)).toMatchObject({ pid: process.pid, host: hostname() });
      expect(existsSync(mutex)).toBe(false);
    }
  });

  it('is not removed while another waiter takes it over, nor after that waiter holds it', async () => {
    // The race: two waiters find the same dead holder. The first takes it over (under the guard) and
    // holds the mutex; the second must then wait for that holder, not remove its mutex as stale.
    const { dir, mutex } = project();
    writeFileSync(mutex, String(deadPid()));
    const guard = `${mutex}.takeover`;
    writeFileSync(guard, record(process.pid));
    let got = false;
    const second = withPackMutex(dir, async () => {
      got = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(got).toBe(false);
    // The first waiter's takeover lands: the stale file is replaced by its own, and the guard is gone.
    const first = record(process.pid);
    writeFileSync(mutex, first);
    rmSync(guard);
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(got).toBe(false);
    expect(readFileSync(mutex, 'utf8')).toBe(first);
    rmSync(mutex);
    await second;
    expect(got).toBe(true);
  });

  it('is waited for when its holder runs on another host, and the error names that host', async () => {
    const { dir, mutex } = project();
    writeFileSync(mutex, record(deadPid(), 'another-host.example'));
    await expect(withPackMutex(dir, async () => {}, 200)).rejects.toThrow(/\(pid \d+ on another-host\.example\) has held .*packs\.mutex for 200 ms/);
    expect(existsSync(mutex)).toBe(true);
  });

  it('is taken over when it named no owner for a while (empty: its holder died before writing it; or damaged)', async () => {
    for (const text of ['', '{"pid":', 'not a record']) {
      const { dir, mutex } = project();
      writeFileSync(mutex, text);
      const past = new Date(Date.now() - 60_000);
      utimesSync(mutex, past, past);
      let ran = false;
      await withPackMutex(dir, async () => {
        ran = true;
      });
      expect(ran).toBe(true);
    }
  });

  it('is waited for while it has named no owner only for a moment (its holder is writing it)', async () => {
    const { dir, mutex } = project();
    writeFileSync(mutex, '');
    await expect(withPackMutex(dir, async () => {}, 200)).rejects.toThrow(/\(a process that has not written its pid\) has held/);
    expect(existsSync(mutex)).toBe(true);
  });
});
