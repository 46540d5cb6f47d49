import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

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
