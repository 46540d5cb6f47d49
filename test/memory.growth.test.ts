import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { copyFixtureProject, type TempProject } from './support/project.js';

/**
 * What one call that writes a lot costs the engine's own process. Each case runs in a fresh process
 * (fixtures/memory/grow.mjs) and compares the peak resident size (VmHWM) before and after the call:
 * the VFS must end up holding the bytes, and the way there must not hold them again. Before the bytes
 * travelled raw (bulk pipe), were stored without memfs's copy and journaled without joining the
 * record, these cases grew the process by 2.5 to 7.4 times what was written (Python: 1.9 times, and
 * the 64 MiB write did not finish in 120 s). What is left above 1x is garbage V8 has not collected
 * yet, mostly the pipe's 64 KiB read chunks, and how much depends on when the collector runs: measured
 * alone, 1.03-1.15 times for 16 writes of 6 MiB and 1.25-1.5 for one write of 64 MiB; during the full
 * suite one write of 64 MiB reached 1.51-1.56. The bound, 1.75 times, keeps that room and still fails
 * on any second copy of the bytes (2 times and more).
 */

const ROOT = join(import.meta.dirname, '..');
const ENGINE = pathToFileURL(join(ROOT, 'dist', 'src', 'index.js')).href;
const MiB = 1024 * 1024;
const onLinux = existsSync('/proc/self/status');

const projects: TempProject[] = [];
afterAll(() => {
  for (const project of projects) project.remove();
});

function grow(tool: string, persist: boolean, chunks: number, size: number): { ok: boolean; written: number; growth: number; stored: number } {
  const project = copyFixtureProject('memory/project');
  projects.push(project);
  const out = execFileSync(
    process.execPath,
    [
      '--no-node-snapshot',
      join(ROOT, 'fixtures', 'memory', 'grow.mjs'),
      ENGINE,
      project.workspace,
      project.project,
      persist ? '1' : '0',
      String(chunks),
      String(size),
      tool,
    ],
    { encoding: 'utf8', timeout: 120_000 },
  );
  return JSON.parse(out.trim().split('\n').pop() as string);
}

describe.runIf(onLinux)('one call that writes a lot grows the engine by about what it wrote, not twice', () => {
  it.each([
    ['JS, durable, 16 writes of 6 MiB', 'big.write', true, 16, 6 * MiB],
    ['JS, durable, one write of 64 MiB', 'big.write', true, 1, 64 * MiB],
    ['JS, in memory, 16 writes of 6 MiB', 'big.write', false, 16, 6 * MiB],
    ['Python, durable, 16 writes of 6 MiB', 'big.write-py', true, 16, 6 * MiB],
    ['Python, durable, one write of 64 MiB', 'big.write-py', true, 1, 64 * MiB],
  ])(
    '%s',
    (_name, tool, persist, chunks, size) => {
      const result = grow(tool, persist, chunks, size);
      expect(result).toMatchObject({ ok: true, written: chunks * size, stored: chunks });
      expect(
        result.growth / result.written,
        `grew by ${(result.growth / MiB).toFixed(1)} MiB for ${result.written / MiB} MiB written`,
      ).toBeLessThanOrEqual(1.75);
    },
    120_000,
  );
});
