// A worker's cache of received files stays within its size: the folders used least recently go (with
// the blobs nothing else links), never one a call holds, and a restarted worker takes over what the
// last run left. The last test runs it under a real worker and nats-server.
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, utimesSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ToolCache, type WorkerPython } from '../runners/remote/cache.js';
import { TreeIndex } from '../runners/remote/tree.js';
import type { TreeEntry } from '../runners/remote/wire.js';
import type { Engine } from '../src/index.js';
import { realPython } from './support/exec.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function cacheDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'arium-cache-test-'));
  dirs.push(dir);
  return dir;
}

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
const hash = (label: string) => createHash('sha256').update(label).digest('hex');

/** Stores `files` as blobs and lays them out as the tree named `label`; returns the tree's folder. */
function putTree(cache: ToolCache, label: string, files: Record<string, Buffer>): string {
  const entries: TreeEntry[] = Object.entries(files).map(([path, bytes]) => {
    cache.putBlob(sha(bytes), bytes);
    return [path, sha(bytes), bytes.length];
  });
  cache.putTree(hash(label), entries);
  return cache.treeDir(hash(label));
}

const kb = (n: number, fill: string) => Buffer.alloc(n * 1024, fill);

describe('the cache of a worker', () => {
  it('past its size drops the folders used least recently and the blobs only they linked, keeping shared ones', () => {
    const cache = new ToolCache(cacheDir(), { maxBytes: 100 * 1024, minIdleMs: 0 });
    const shared = kb(10, 's');
    const a = putTree(cache, 'a', { 'lib.js': shared, 'a.js': kb(30, 'a') });
    const b = putTree(cache, 'b', { 'lib.js': shared, 'b.js': kb(30, 'b') });
    expect(cache.bytes).toBe(70 * 1024);
    expect(cache.sweep()).toEqual([]);
    cache.touch([a]);
    const c = putTree(cache, 'c', { 'c.js': kb(40, 'c') });
    expect(cache.bytes).toBe(110 * 1024);
    // Over 100 KB: down to 80 KB at most, b first (a was used since).
    expect(cache.sweep()).toEqual([b]);
    expect(cache.bytes).toBe(80 * 1024);
    expect(existsSync(b)).toBe(false);
    expect(readdirSync(join(cache.dir, 'index')).sort()).toEqual(
      [`tools-t${hash('a').slice(0, 32)}.json`, `tools-t${hash('c').slice(0, 32)}.json`].sort(),
    );
    // The blob a and b both linked stays with a; b's own is gone.
    expect(cache.hasBlob(sha(shared))).toBe(true);
    expect(cache.hasBlob(sha(kb(30, 'b')))).toBe(false);
    expect(existsSync(join(cache.dir, 'blobs', sha(kb(30, 'b'))))).toBe(false);
    expect(cache.hasTree(hash('b'))).toBe(false);
    expect([existsSync(join(a, 'lib.js')), existsSync(join(c, 'c.js'))]).toEqual([true, true]);
  });

  it('never takes a folder a call holds or used within minIdleMs, even past its size', () => {
    const cache = new ToolCache(cacheDir(), { maxBytes: 50 * 1024, minIdleMs: 0 });
    const a = putTree(cache, 'a', { 'a.js': kb(40, 'a') });
    const release = cache.acquire([a]);
    const b = putTree(cache, 'b', { 'b.js': kb(40, 'b') });
    cache.touch([b]);
    // a is held, b is the newest: b goes, though a is the older.
    expect(cache.sweep()).toEqual([b]);
    putTree(cache, 'c', { 'c.js': kb(40, 'c') });
    expect(cache.sweep()).toEqual([join(cache.dir, 'tools', `t${hash('c').slice(0, 32)}`)]);
    release();
    release(); // twice: once counts
    putTree(cache, 'd', { 'd.js': kb(40, 'd') });
    expect(cache.sweep()).toEqual([a]);

    const idle = new ToolCache(cacheDir(), { maxBytes: 50 * 1024, minIdleMs: 60_000 });
    putTree(idle, 'a', { 'a.js': kb(40, 'a') });
    putTree(idle, 'b', { 'b.js': kb(40, 'b') });
    expect(idle.sweep()).toEqual([]);
    expect(idle.bytes).toBe(80 * 1024);
    expect(idle.sweep(Date.now() + 61_000)).toHaveLength(1);
  });

  it.runIf(realPython() !== null)('keeps the environments used last, whose Python servers may still run', async () => {
    const cache = new ToolCache(cacheDir(), { maxBytes: 10 * 1024, minIdleMs: 0, keepEnvs: 1 });
    const python: WorkerPython = { executable: realPython() as string, version: '3', tag: 'test' };
    const env = async (label: string) => {
      const bytes = Buffer.from(`X = ${JSON.stringify(label)}\n${'#'.repeat(8 * 1024)}\n`);
      cache.putBlob(sha(bytes), bytes);
      return cache.putEnv(hash(label), [[`lib/python3/site-packages/${label}.py`, sha(bytes), bytes.length]], python);
    };
    const first = await env('first');
    // Its bytecode counts too: more than the 8 KB module.
    expect(cache.bytes).toBeGreaterThan(8 * 1024);
    const second = await env('second');
    cache.touch([second]);
    expect(cache.sweep()).toEqual([first]);
    expect(cache.hasEnv(hash('second'), python)).toBe(second);
    expect(cache.hasEnv(hash('first'), python)).toBeNull();
  });

  it('is taken over by the next run of the worker; what no index entry accounts for is removed', () => {
    const dir = cacheDir();
    const cache = new ToolCache(dir, { maxBytes: 1024 * 1024 });
    const a = putTree(cache, 'a', { 'a.js': kb(3, 'a'), 'sub/b.js': kb(2, 'b') });
    const bytes = cache.bytes;
    // Left by a run that stopped mid-way: a blob no folder links, a layout not renamed into place,
    // a tree without its index entry, an index entry whose blob is gone, an index file that is not one.
    writeFileSync(join(dir, 'blobs', sha(Buffer.from('orphan'))), 'orphan');
    mkdirSync(join(dir, 'tools', '.tmp-abc'), { recursive: true });
    mkdirSync(join(dir, 'tools', `t${hash('unlisted').slice(0, 32)}`), { recursive: true });
    const broken = `t${hash('broken').slice(0, 32)}`;
    mkdirSync(join(dir, 'tools', broken));
    writeFileSync(join(dir, 'index', `tools-${broken}.json`), JSON.stringify({ name: `tools/${broken}`, shas: [hash('gone')], extra_bytes: 0 }));
    writeFileSync(join(dir, 'index', 'junk.json'), '{');

    const again = new ToolCache(dir, { maxBytes: 1024 * 1024 });
    expect(again.hasTree(hash('a'))).toBe(true);
    expect(again.bytes).toBe(bytes);
    expect(readdirSync(join(dir, 'tools'))).toEqual([`t${hash('a').slice(0, 32)}`]);
    expect(readdirSync(join(dir, 'index'))).toEqual([`tools-t${hash('a').slice(0, 32)}.json`]);
    expect(readdirSync(join(dir, 'blobs')).sort()).toEqual([sha(kb(3, 'a')), sha(kb(2, 'b'))].sort());
    expect(existsSync(join(a, 'sub', 'b.js'))).toBe(true);
  });
});

describe('the engine’s index of what it sends', () => {
  it('hashes a large folder ahead a chunk at a time, letting the engine’s thread turn, and then lists it without reading it again', async () => {
    const dir = cacheDir();
    const big = Buffer.alloc(8 * 1024 * 1024, 7);
    writeFileSync(join(dir, 'big.bin'), big);
    // A whole second: set again below to exactly this.
    utimesSync(join(dir, 'big.bin'), 1_700_000_000, 1_700_000_000);
    writeFileSync(join(dir, 'small.py'), 'X = 1\n');
    const limits = { files: 10, bytes: 64 * 1024 * 1024, what: 'The folder', advice: 'none', skip: () => false };
    const index = new TreeIndex();
    let turns = 0;
    let ticking = true;
    const tick = () => {
      turns++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    await index.hashAhead(dir, limits);
    ticking = false;
    // 8 MB read in 64 KB chunks: the loop went round between them (a synchronous hash would give 0).
    expect(turns).toBeGreaterThan(20);
    // Other bytes in the same file, with its size, inode and time as they were: a listing that read the
    // file again would see them; one from what was hashed ahead does not.
    const fd = openSync(join(dir, 'big.bin'), 'r+');
    writeSync(fd, Buffer.from('changed'), 0, 7, 0);
    closeSync(fd);
    utimesSync(join(dir, 'big.bin'), 1_700_000_000, 1_700_000_000);
    const tree = index.tree(dir, limits);
    expect(tree.entries).toEqual([
      ['big.bin', sha(big), big.length],
      ['small.py', sha(Buffer.from('X = 1\n')), 6],
    ]);
  });
});

describe('a worker with a small cache', () => {
  let nats: NatsServer;
  const workers = new Workers();
  let project: TempProject;
  let engine: Engine | null = null;

  beforeAll(async () => {
    nats = await startNats();
  });
  afterAll(async () => {
    await engine?.close();
    await workers.closeAll();
    await nats.stop();
    project?.remove();
  });

  it('refuses a cache size that is not a whole number of bytes above 0, before it connects', async () => {
    for (const maxBytes of [0, -1, 1.5, Number.NaN]) {
      await expect(workers.start('nats://127.0.0.1:1', { cacheLimits: { maxBytes } })).rejects.toThrow(
        `The cache's size must be a whole number of bytes above 0 (got ${maxBytes})`,
      );
    }
  });

  it('serves edit after edit of a tool within its size, keeps the version a running call uses, and fetches an evicted one again', async () => {
    const big = (version: number) =>
      `// ${String(version).repeat(64 * 1024)}\nexport default async function run(input) { return { version: ${version}, ...input }; }\n`;
    project = tempProject(
      {
        'v.json': definition({ id: 'v', entry: 'v.js', limits: { timeout_ms: 20_000 } }),
        'v.js': big(1),
        'slow.json': definition({ id: 'slow', entry: 'slow.js', limits: { timeout_ms: 20_000 } }),
        'slow.js':
          'export default async function run(input) { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, input.ms); return { slept: input.ms }; }\n',
      },
      'arium-remote-',
    );
    const cache = mkdtempSync(join(tmpdir(), 'arium-worker-cache-'));
    dirs.push(cache);
    const worker = await workers.start(nats.url, { cacheDir: cache, cacheLimits: { maxBytes: 200 * 1024, minIdleMs: 0 } });
    engine = await remoteEngine(project, nats.url);
    const e = engine;
    const trees = () => readdirSync(join(cache, 'tools')).filter((name) => name.startsWith('t'));

    // A call holds version 1 (the slow tool is in the same tools folder) while eight edits go through.
    const holding = e.call('slow', { ms: 1500 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const held = trees();
    expect(held).toHaveLength(1);
    for (let version = 2; version <= 9; version++) {
      writeFileSync(join(project.tools, 'v.js'), big(version));
      expect(await e.call('v', { n: version })).toMatchObject({ ok: true, data: { version, n: version } });
      expect(worker.heartbeat().cache?.bytes).toBeLessThanOrEqual(200 * 1024 + 2 * 70 * 1024);
    }
    expect(trees()).toContain(held[0]);
    expect(await holding).toMatchObject({ ok: true, data: { slept: 1500 } });
    // Eight versions of 64 KB went through a 200 KB cache: most are gone, blobs with them (each
    // version has its own v.js; the three other files are the same blobs in all).
    expect(trees().length).toBeLessThanOrEqual(4);
    expect(readdirSync(join(cache, 'blobs')).length).toBe(trees().length + 3);
    // Version 1 again: its folder was taken away once the call let it go, so it is fetched again.
    writeFileSync(join(project.tools, 'v.js'), big(1));
    for (let version = 10; version <= 12; version++) {
      writeFileSync(join(project.tools, 'v.js'), big(version));
      expect(await e.call('v', {})).toMatchObject({ ok: true, data: { version } });
    }
    expect(trees()).not.toContain(held[0]);
    writeFileSync(join(project.tools, 'v.js'), big(1));
    expect(await e.call('v', {})).toMatchObject({ ok: true, data: { version: 1 } });
    expect(worker.heartbeat().cache).toEqual({ bytes: expect.any(Number), max_bytes: 200 * 1024 });
  });
});
