import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';
import { CorruptObjectError, ObjectStore } from '../src/store/objects.js';
import { MAX_OPEN_PACKS, Pack } from '../src/store/packs.js';

let workspace: string;

beforeEach(() => {
  workspace = mkdtempSync(join(tmpdir(), 'arium-packs-'));
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
});

afterEach(() => {
  rmSync(workspace, { recursive: true, force: true });
});

const open = () => createEngine({ workspace, project: 'p', watch: false });
const objectsDir = () => join(workspace, 'p', '.arium', 'objects');
const packDir = (dir = objectsDir()) => join(dir, 'pack');
const packs = (dir = objectsDir()) => (existsSync(packDir(dir)) ? readdirSync(packDir(dir)).filter((n) => n.endsWith('.pack')) : []);
/** Loose object files (name → path). */
function loose(dir = objectsDir()): Map<string, string> {
  const out = new Map<string, string>();
  for (const prefix of readdirSync(dir)) {
    if (!/^[0-9a-f]{2}$/.test(prefix)) continue;
    for (const rest of readdirSync(join(dir, prefix))) if (/^[0-9a-f]{62}$/.test(rest)) out.set(prefix + rest, join(dir, prefix, rest));
  }
  return out;
}
const blob = (text: string) => ObjectStore.hash('blob', Buffer.from(text));
const content = (i: number, v = 1) => `file ${i} version ${v}\n`.repeat(5);

/** `count` distinct blobs put into `store`; their names. */
function putBlobs(store: ObjectStore, from: number, count: number, tag = 'b'): string[] {
  return Array.from({ length: count }, (_, i) => store.put('blob', Buffer.from(`${tag} ${from + i}\n`)));
}

/** Descriptors of this process open on pack files. */
function packDescriptors(): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).endsWith('.pack')) n++;
    } catch {}
  }
  return n;
}

describe('packs', () => {
  it.skipIf(process.platform !== 'linux')('an engine keeps at most MAX_OPEN_PACKS pack files open, and reads every pack', async () => {
    // One import of 70 files and one snapshot per round: each snapshot brings 70+ objects, one pack.
    const rounds = MAX_OPEN_PACKS + 16;
    const host = join(workspace, 'host');
    mkdirSync(host);
    let engine: Engine = await open();
    try {
      const ids: string[] = [];
      for (let r = 0; r < rounds; r++) {
        for (let i = 0; i < 70; i++) writeFileSync(join(host, `f${i}.txt`), content(i, r));
        engine.importFrom(host, '/d');
        ids.push(engine.snapshot().id);
      }
      expect(packs()).toHaveLength(rounds);
      expect(packDescriptors()).toBeLessThanOrEqual(MAX_OPEN_PACKS);
      // The first snapshot's objects are in a pack whose file was closed since: read again by path.
      expect(
        engine
          .view(ids[0] as string)
          .read('/d/f3.txt')
          .toString(),
      ).toBe(content(3, 0));
      engine.restore(ids[1] as string);
      expect(engine.vfs.read('/d/f69.txt').toString()).toBe(content(69, 1));
      await engine.close();
      engine = await open();
      expect(packDescriptors()).toBeLessThanOrEqual(MAX_OPEN_PACKS);
      expect(
        engine
          .view(ids[2] as string)
          .read('/d/f0.txt')
          .toString(),
      ).toBe(content(0, 2));
    } finally {
      await engine.close();
    }
  });

  it('a snapshot of many small files goes to one pack, read back verified, in this engine and the next', async () => {
    let engine: Engine = await open();
    try {
      for (let i = 0; i < 200; i++) engine.vfs.write(`/d${i % 4}/f${i}.txt`, content(i));
      engine.snapshot({ label: 'big' });
      expect(packs()).toHaveLength(1);
      // No loose file for any of the 200 blobs.
      const files = loose();
      for (let i = 0; i < 200; i++) expect(files.has(blob(content(i)))).toBe(false);
      await engine.close();
      engine = await open();
      for (let i = 0; i < 200; i++) expect(engine.vfs.read(`/d${i % 4}/f${i}.txt`).toString()).toBe(content(i));
      const store = new ObjectStore(objectsDir(), { readOnly: true });
      for (let i = 0; i < 200; i++) expect(store.get('blob', blob(content(i))).toString()).toBe(content(i));
      store.close();
      // A snapshot after one change writes no object file (its journal record holds its objects);
      // the checkpoint at close writes them, a few loose files.
      engine.vfs.write('/d0/f0.txt', 'changed\n');
      engine.snapshot();
      expect(loose().has(blob('changed\n'))).toBe(false);
      await engine.close();
      expect(packs()).toHaveLength(1);
      expect(loose().has(blob('changed\n'))).toBe(true);
      engine = await open();
      expect(engine.vfs.read('/d0/f0.txt').toString()).toBe('changed\n');
    } finally {
      await engine.close();
    }
  });

  it('the objects of many small snapshots are written together at the checkpoint, as one pack', async () => {
    let engine: Engine = await open();
    const ids: string[] = [];
    try {
      for (let i = 0; i < 4; i++) engine.vfs.write(`/d${i}/seed.txt`, 'seed\n');
      engine.snapshot();
      await engine.close();
      const before = { packs: packs().length, loose: loose().size };
      engine = await open();
      // 40 snapshots of one changed file: a blob, its folder and the root each, 120 objects in all.
      for (let v = 0; v < 40; v++) {
        engine.vfs.write(`/d${v % 4}/f.txt`, content(v % 4, v));
        ids.push(engine.snapshot({ label: `v${v}` }).id);
      }
      expect({ packs: packs().length, loose: loose().size }).toEqual(before);
      await engine.close();
      expect(packs()).toHaveLength(before.packs + 1);
      expect(loose().size).toBe(before.loose);
      engine = await open();
      for (const [v, id] of ids.entries()) {
        engine.restore(id);
        expect(engine.vfs.read(`/d${v % 4}/f.txt`).toString()).toBe(content(v % 4, v));
      }
    } finally {
      await engine.close();
    }
  });

  it('a pack cut short mid-record opens: only the torn record is lost, everything synced before is intact', () => {
    const dir = join(workspace, 'objects');
    const store = new ObjectStore(dir);
    const synced = putBlobs(store, 0, 100);
    store.sync();
    // Read back by the store that wrote the pack, before any reopen.
    for (const hash of synced) expect(ObjectStore.hash('blob', store.get('blob', hash))).toBe(hash);
    const [first] = packs(dir);
    const later = putBlobs(store, 100, 100);
    const text = new Map(later.map((hash, i) => [hash, `b ${100 + i}\n`]));
    store.writePending(false); // not synced: a crash may cut it anywhere
    store.close();
    const second = packs(dir).find((name) => name !== first) as string;
    const path = join(packDir(dir), second);
    // Cut inside the last record (the index and trailer after it are gone too).
    const size = statSync(path).size;
    const indexAt = Number(readFileSync(path).readBigUInt64BE(size - 16));
    truncateSync(path, indexAt - 5);

    const after = new ObjectStore(dir);
    for (const hash of synced) expect(ObjectStore.hash('blob', after.get('blob', hash))).toBe(hash);
    const lost = later.filter((hash) => !after.has(hash));
    expect(lost).toHaveLength(1);
    expect(lost[0]).toBe([...later].sort().at(-1)); // records are in the order of their names
    for (const hash of later.filter((h) => h !== lost[0])) expect(ObjectStore.hash('blob', after.get('blob', hash))).toBe(hash);
    expect(() => after.get('blob', lost[0] as string)).toThrow(expect.objectContaining({ name: 'CorruptObjectError', hash: lost[0] }));
    // Written again, the lost object is there; gc's compaction replaces the torn pack with a whole one.
    after.put('blob', Buffer.from(text.get(lost[0] as string) as string));
    after.sync();
    after.compact();
    expect(packs(dir)).not.toContain(second);
    after.close();
    const again = new ObjectStore(dir);
    for (const hash of [...synced, ...later]) expect(ObjectStore.hash('blob', again.get('blob', hash))).toBe(hash);
    again.close();
  });

  it('a damaged byte in a packed object is a CorruptObjectError naming it', async () => {
    const dir = join(workspace, 'objects');
    const store = new ObjectStore(dir);
    const hashes = putBlobs(store, 0, 80);
    store.sync();
    store.close();
    const path = join(packDir(dir), packs(dir)[0] as string);
    const pack = Pack.open(path);
    const entry = pack.entry(7);
    pack.close();
    const bytes = readFileSync(path);
    bytes[entry.offset + 1] = (bytes[entry.offset + 1] as number) ^ 0xff;
    writeFileSync(path, bytes);
    const after = new ObjectStore(dir);
    let error: unknown;
    try {
      after.get('blob', entry.hash);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(CorruptObjectError);
    expect(error).toMatchObject({ hash: entry.hash, message: expect.stringContaining(`The blob object ${entry.hash.slice(0, 12)} is corrupted`) });
    // The others read as before.
    for (const hash of hashes.filter((h) => h !== entry.hash)) expect(ObjectStore.hash('blob', after.get('blob', hash))).toBe(hash);
    after.close();
  });

  it('a store of loose objects only (as earlier versions wrote it) opens and reads; new batches go to packs beside them', async () => {
    let engine = await open();
    for (let i = 0; i < 150; i++) engine.vfs.write(`/old/f${i}.txt`, content(i));
    const old = engine.snapshot({ label: 'old' });
    await engine.close();
    // Turn the pack into loose files, as a store written before packs existed holds them.
    const dir = objectsDir();
    for (const name of packs()) {
      const pack = Pack.open(join(packDir(), name));
      for (let at = 0; at < pack.count; at++) {
        const { hash } = pack.entry(at);
        mkdirSync(join(dir, hash.slice(0, 2)), { recursive: true });
        writeFileSync(join(dir, hash.slice(0, 2), hash.slice(2)), pack.read(at));
      }
      pack.close();
    }
    rmSync(packDir(), { recursive: true });
    expect(loose().size).toBeGreaterThanOrEqual(152);

    engine = await open();
    try {
      for (let i = 0; i < 150; i++) expect(engine.vfs.read(`/old/f${i}.txt`).toString()).toBe(content(i));
      for (let i = 0; i < 100; i++) engine.vfs.write(`/new/f${i}.txt`, content(i, 2));
      engine.snapshot({ label: 'new' });
      expect(packs()).toHaveLength(1);
      engine.vfs.delete('/old', { recursive: true });
      engine.restore(old.id);
      expect(engine.vfs.read('/old/f7.txt').toString()).toBe(content(7));
      expect(engine.gc().removed).toBe(0);
      await engine.close();
      engine = await open();
      engine.restore('new');
      expect(engine.vfs.read('/new/f42.txt').toString()).toBe(content(42, 2));
      expect(engine.vfs.read('/old/f149.txt').toString()).toBe(content(149));
    } finally {
      await engine.close();
    }
  });

  it('gc removes unreachable packed objects and keeps reachable ones; a mostly dead pack is rewritten', async () => {
    let engine = await open();
    try {
      for (let i = 0; i < 100; i++) engine.vfs.write(`/d/f${i}.txt`, content(i));
      engine.gc(); // its checkpoint writes the live tree: one pack, nothing to remove
      const [first] = packs();
      expect(first).toBeDefined();
      // 10 files change: their old blobs (and the old trees) die, a tenth of the pack: it is kept,
      // with its dead objects listed beside it.
      for (let i = 0; i < 10; i++) engine.vfs.write(`/d/f${i}.txt`, content(i, 2));
      const some = engine.gc();
      // 10 blobs and the root (the old /d tree is kept: the new one is stored as a delta of it).
      expect(some.removed).toBe(11);
      expect(packs()).toContain(first);
      expect(existsSync(join(packDir(), `${first}.dead`))).toBe(true);
      expect(engine.gc().removed).toBe(0);
      await engine.close();
      engine = await open();
      expect(engine.gc().removed).toBe(0); // the dead list outlives the engine
      const store = new ObjectStore(objectsDir(), { readOnly: true });
      expect(store.has(blob(content(3)))).toBe(false);
      expect(store.has(blob(content(50)))).toBe(true);
      store.close();

      // 60 more files change: the first pack is mostly dead and rewritten. A snapshot keeps f95's
      // first version, which the live tree no longer holds.
      for (let i = 10; i < 70; i++) engine.vfs.write(`/d/f${i}.txt`, content(i, 2));
      const snap = engine.snapshot({ label: 'holds-f95' });
      engine.vfs.write('/d/f95.txt', content(95, 3));
      const most = engine.gc();
      expect(most.removed).toBeGreaterThanOrEqual(60);
      expect(packs()).not.toContain(first);
      expect(existsSync(join(packDir(), `${first}.dead`))).toBe(false);
      await engine.close();
      engine = await open();
      for (let i = 0; i < 100; i++) expect(engine.vfs.read(`/d/f${i}.txt`).toString()).toBe(content(i, i === 95 ? 3 : i < 70 ? 2 : 1));
      engine.restore(snap.id);
      expect(engine.vfs.read('/d/f20.txt').toString()).toBe(content(20, 2));
      expect(engine.vfs.read('/d/f95.txt').toString()).toBe(content(95));
      expect(engine.gc().removed).toBe(0);
    } finally {
      await engine.close();
    }
  });

  it('64 writes in flight with snapshots taken between lose nothing across a close and reopen', async () => {
    let engine = await open();
    const taken: Array<{ id: string; files: number }> = [];
    try {
      for (let round = 0; round < 3; round++) {
        const calls: Array<Promise<unknown>> = [];
        for (let i = 0; i < 64; i++) {
          calls.push(engine.call('fs.write', { path: `/r${round}/d${i % 8}/f${i}.txt`, content: `${round}:${i}\n`.repeat(3) }));
          // The first round's snapshot holds all 64 files (a pack), the others' a few each (loose files).
          if (round > 0 && i % 16 === 15) taken.push(engine.snapshot({ label: `r${round}-${i}` }));
        }
        const results = (await Promise.all(calls)) as Array<{ ok: boolean }>;
        expect(results.every((r) => r.ok)).toBe(true);
        taken.push(engine.snapshot({ label: `r${round}-end` }));
      }
      expect(packs().length).toBeGreaterThan(0);
      await engine.close();
      engine = await open();
      expect(engine.snapshots().map((s) => s.id)).toEqual(taken.map((s) => s.id));
      for (let round = 0; round < 3; round++) {
        for (let i = 0; i < 64; i++) expect(engine.vfs.read(`/r${round}/d${i % 8}/f${i}.txt`).toString()).toBe(`${round}:${i}\n`.repeat(3));
      }
      // Every snapshot reads whole: restore each and count its files.
      for (const snap of taken) {
        engine.restore(snap.id);
        expect(engine.vfs.usage().files - engine.vfs.usage().dirs).toBe(snap.files);
      }
    } finally {
      await engine.close();
    }
  });
});
