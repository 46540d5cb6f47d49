import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findInterpreter, type Interpreter } from '../runners/python/interpreter.js';
import { forgetSharedLibraries, sharedLibraries } from '../runners/python/libraries.js';

// The shared libraries an interpreter loads are found once (0.6 s here) and kept in the user's cache
// folder for the next process (runners/python/libraries.ts). Each test forgets what this process found,
// as a fresh process starts with nothing, and reads the cache folder the test points XDG_CACHE_HOME at.

let dir: string;
let interpreter: Interpreter;
const saved = process.env.XDG_CACHE_HOME;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'arium-libcache-'));
  process.env.XDG_CACHE_HOME = join(dir, 'cache');
  mkdirSync(join(dir, 'site'));
  const found = await findInterpreter(undefined, process.cwd());
  // A folder of its own among those the interpreter imports from, to change as an install would.
  interpreter = { ...found, needs: [...found.needs, join(dir, 'site')] };
});

afterAll(() => {
  if (saved === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = saved;
  forgetSharedLibraries();
  rmSync(dir, { recursive: true, force: true });
});

const cacheFiles = () => readdirSync(join(dir, 'cache', 'arium')).filter((f) => f.endsWith('.json'));
/** Puts a list no interpreter would answer into every cached file: served back, it came from the disk. */
function mark(): void {
  for (const f of cacheFiles()) writeFileSync(join(dir, 'cache', 'arium', f), JSON.stringify(['/marker']), { mode: 0o600 });
}

describe('the shared-library list of an interpreter', () => {
  it('is kept on disk, private to the user, and read by the next process instead of asking again', async () => {
    forgetSharedLibraries();
    const first = await sharedLibraries(interpreter);
    expect(first?.length).toBeGreaterThan(0);
    expect(first?.some((p) => p.includes('libc.so') || p.includes('ld-linux'))).toBe(true);
    expect(cacheFiles()).toHaveLength(1);
    expect(statSync(join(dir, 'cache', 'arium')).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'cache', 'arium', cacheFiles()[0] as string)).mode & 0o777).toBe(0o600);
    mark();
    forgetSharedLibraries();
    expect(await sharedLibraries(interpreter)).toEqual(['/marker']);
  });

  it('is asked for again when a folder the interpreter imports from changes (a package installed)', async () => {
    mark();
    mkdirSync(join(dir, 'site', 'newpkg'));
    forgetSharedLibraries();
    const after = await sharedLibraries(interpreter);
    expect(after).not.toEqual(['/marker']);
    expect(after?.length).toBeGreaterThan(0);
    expect(cacheFiles()).toHaveLength(2);
  });

  it('is not read from a file or folder others could have written', async () => {
    mark();
    for (const f of cacheFiles()) chmodSync(join(dir, 'cache', 'arium', f), 0o666);
    forgetSharedLibraries();
    expect(await sharedLibraries(interpreter)).not.toEqual(['/marker']);
    mark();
    chmodSync(join(dir, 'cache', 'arium'), 0o777);
    forgetSharedLibraries();
    expect(await sharedLibraries(interpreter)).not.toEqual(['/marker']);
    chmodSync(join(dir, 'cache', 'arium'), 0o700);
  });
});
