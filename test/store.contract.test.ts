// One contract for every StateStore (src/store/port.ts): what the durable VFS relies on, run against
// the file-system store and the memory store alike. A new backend adds one entry to STORES.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { natsServerPath } from '../bench/nats-server.js';
import { createEngine } from '../src/index.js';
import { FileStateStore } from '../src/store/file-store.js';
import { JetStreamStore } from '../src/store/jetstream-store.js';
import type { JournalRecord } from '../src/store/journal.js';
import { ProjectLockedError } from '../src/store/lock.js';
import { MemoryStateStore } from '../src/store/memory-store.js';
import { CorruptObjectError } from '../src/store/objects.js';
import type { StateStore } from '../src/store/port.js';
import { VfsState } from '../src/vfs/state.js';
import { startJetStream } from './support/jetstream.js';
import { tempProject } from './support/project.js';

interface Backend {
  /** A handle on the same stored state each time it is called (a new engine opening it). */
  open(): StateStore;
  remove(): void;
}

const STORES: Record<string, () => Backend> = {
  file: () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'arium-store-')), 'state');
    return { open: () => new FileStateStore(dir), remove: () => rmSync(join(dir, '..'), { recursive: true, force: true }) };
  },
  memory: () => {
    const store = new MemoryStateStore('contract');
    return { open: () => store, remove: () => {} };
  },
};

// The JetStream store on real nats-servers, where nats-server is installed (see vitest.config.ts): one
// server (R1), and a cluster of three with every message on all three (R3).
const single = natsServerPath() ? await startJetStream(1) : null;
const trio = natsServerPath() ? await startJetStream(3) : null;
afterAll(async () => {
  await single?.remove();
  await trio?.remove();
});
let projects = 0;
for (const [kind, servers, replicas] of [
  ['jetstream R1', single, 1],
  ['jetstream R3', trio, 3],
] as const) {
  if (!servers) continue;
  STORES[kind] = () => {
    const name = `contract-${process.pid}-${++projects}`;
    return { open: () => new JetStreamStore({ servers: servers.urls, name, replicas, leaseMs: 600 }), remove: () => {} };
  };
}

const write = (path: string, text: string) => ({ op: 'write' as const, path, data: Buffer.from(text) });

for (const [kind, make] of Object.entries(STORES)) {
  describe(`StateStore contract: ${kind}`, () => {
    let backend: Backend;
    const opened: StateStore[] = [];
    const open = () => {
      const store = backend.open();
      opened.push(store);
      return store;
    };
    afterEach(() => {
      for (const store of opened.splice(0)) {
        store.close();
        store.release();
      }
      backend?.remove();
    });

    it('starts empty', () => {
      backend = make();
      const store = open();
      store.acquire();
      expect(store.readOnly).toBe(false);
      expect(store.readLive()).toBeNull();
      expect(store.liveStamp()).toBeNull();
      expect(store.readSnapshotLog()).toEqual({ lines: [], tornBytes: 0 });
      const journal = store.journal();
      expect(journal?.size).toBe(0);
      expect(journal?.replay()).toEqual({ records: [], droppedBytes: 0, corruptAt: null });
      expect(typeof store.describe('live')).toBe('string');
    });

    it('is held by one engine at a time, and free again once released', () => {
      backend = make();
      const first = open();
      first.acquire();
      const second = open();
      expect(() => second.acquire()).toThrow(ProjectLockedError);
      expect(first.holder()).toBe(process.pid);
      first.release();
      second.acquire();
      expect(second.holder()).toBe(process.pid);
    });

    it('keeps the checkpoint, replacing it whole, and says when it changed', () => {
      backend = make();
      const store = open();
      store.acquire();
      store.writeLive({ root: 'a'.repeat(64), seq: 3 });
      const stamp = store.liveStamp();
      expect(stamp).not.toBeNull();
      store.writeLive({ root: 'b'.repeat(64), seq: 9 });
      expect(store.readLive()).toEqual({ root: 'b'.repeat(64), seq: 9 });
      expect(store.liveStamp()).not.toBe(stamp);
      store.close();
      store.release();
      const again = open();
      again.acquire();
      expect(again.readLive()).toEqual({ root: 'b'.repeat(64), seq: 9 });
    });

    it('appends snapshot log lines in order, all of one call together, and keeps them', () => {
      backend = make();
      const store = open();
      store.acquire();
      store.appendSnapshotLog(['{"id":"1"}']);
      store.appendSnapshotLog(['{"id":"2"}', '{"id":"3"}']);
      store.appendSnapshotLog([]);
      store.close();
      store.release();
      const again = open();
      again.acquire();
      expect(again.readSnapshotLog()).toEqual({ lines: ['{"id":"1"}', '{"id":"2"}', '{"id":"3"}'], tornBytes: 0 });
    });

    it('journals records durably, replays them as written, and empties on reset', () => {
      backend = make();
      const store = open();
      store.acquire();
      const journal = store.journal();
      if (!journal) throw new Error('a writable store has a journal');
      const big = Buffer.alloc(300_000, 7);
      const records: JournalRecord[] = [
        { seq: 1, ops: [write('/a.txt', 'alpha'), { op: 'mkdir', path: '/d' }] },
        {
          seq: 2,
          ops: [
            { op: 'write', path: '/a.txt', data: Buffer.from('+more'), append: true },
            { op: 'move', from: '/a.txt', to: '/d/a.txt' },
          ],
        },
        {
          seq: 3,
          ops: [
            { op: 'write', path: '/big', data: big, create: true },
            { op: 'delete', path: '/d' },
          ],
        },
      ];
      let size = journal.size;
      for (const record of records) {
        journal.append(record);
        expect(journal.size).toBeGreaterThan(size);
        size = journal.size;
      }
      // What was appended is a copy: changing the caller's buffer afterwards changes nothing stored.
      big.fill(0);
      store.close();
      store.release();
      const again = open();
      again.acquire();
      const replayed = again.journal()?.replay();
      expect(replayed?.droppedBytes).toBe(0);
      expect(replayed?.records.map((r) => r.seq)).toEqual([1, 2, 3]);
      expect(replayed?.records[0]?.ops).toEqual(records[0]?.ops);
      expect(replayed?.records[1]?.ops).toEqual(records[1]?.ops);
      const last = replayed?.records[2]?.ops[0] as { data: Buffer; create?: true };
      expect(last.create).toBe(true);
      expect(last.data.equals(Buffer.alloc(300_000, 7))).toBe(true);
      again.journal()?.reset();
      expect(again.journal()?.size).toBe(0);
      expect(again.journal()?.replay().records).toEqual([]);
    });

    it('stores objects by content, and says when one is missing', () => {
      backend = make();
      const store = open();
      store.acquire();
      const hash = store.objects.put('blob', Buffer.from('same bytes'));
      expect(store.objects.put('blob', Buffer.from('same bytes'))).toBe(hash);
      store.objects.sync();
      expect(store.objects.has(hash)).toBe(true);
      expect(store.objects.get('blob', hash).toString()).toBe('same bytes');
      expect([...store.objects.list()]).toContain(hash);
      store.objects.delete(hash);
      expect(store.objects.has(hash)).toBe(false);
      expect(() => store.objects.get('blob', hash)).toThrow(CorruptObjectError);
    });

    it('carries the durable VFS: commits, snapshots and checkpoints survive the engine', () => {
      backend = make();
      // A tiny checkpoint threshold, so commits fold the journal into checkpoints as they go.
      const state = new VfsState({ dir: open(), checkpointBytes: 200 });
      for (let i = 0; i < 30; i++) state.change((t) => t.write(`/f/${i}.txt`, Buffer.from(`file ${i} `.repeat(i + 1)), { parents: true }));
      const snap = state.snapshot({ label: 'thirty' });
      state.change((t) => t.delete('/f/0.txt'));
      state.close();
      const reopened = new VfsState({ dir: open() });
      try {
        expect(reopened.recovery).toEqual({ torn_bytes: 0, lost: [] });
        expect(reopened.vfs.exists('/f/0.txt')).toBe(false);
        expect(reopened.vfs.read('/f/29.txt').toString()).toBe('file 29 '.repeat(30));
        expect(reopened.snapshots.map((s) => [s.id, s.label])).toEqual([[snap.id, 'thirty']]);
        expect(reopened.resolveSnapshot('thirty').root).toBe(snap.root);
      } finally {
        reopened.close();
      }
    });

    it('loses nothing acknowledged to concurrent callers of an engine, across a restart', async () => {
      backend = make();
      const project = tempProject({}, 'arium-store-');
      const options = { workspace: project.workspace, project: 'p', watch: false };
      try {
        const engine = await createEngine({ ...options, store: open() });
        const results = await Promise.all(
          Array.from({ length: 64 }, (_, i) =>
            i % 2 === 0
              ? engine.call('fs.write', { path: `/w/${i}.txt`, content: `w${i}` })
              : engine.call('fs.write', { path: '/log.txt', content: `${i}\n`, append: true }),
          ),
        );
        expect(results.every((r) => r.ok)).toBe(true);
        await engine.close();
        const after = await createEngine({ ...options, store: open() });
        try {
          for (let i = 0; i < 64; i += 2) expect(after.vfs.read(`/w/${i}.txt`).toString()).toBe(`w${i}`);
          const lines = after.vfs.read('/log.txt').toString().trim().split('\n').map(Number);
          expect(lines.sort((a, b) => a - b)).toEqual(Array.from({ length: 32 }, (_, i) => 2 * i + 1));
        } finally {
          await after.close();
        }
      } finally {
        project.remove();
      }
    });
  });
}

describe('a store given to the engine', () => {
  it('must implement the port, or the engine says what it lacks', async () => {
    const project = tempProject({}, 'arium-store-');
    try {
      const half = { acquire() {}, release() {} } as unknown as MemoryStateStore;
      await expect(createEngine({ workspace: project.workspace, project: 'p', watch: false, store: half })).rejects.toThrow(
        /store must implement StateStore .* it lacks holder, readLive/,
      );
    } finally {
      project.remove();
    }
  });

  it('is held by one engine at a time', async () => {
    const project = tempProject({}, 'arium-store-');
    const store = new MemoryStateStore();
    const options = { workspace: project.workspace, project: 'p', watch: false, store };
    try {
      const engine = await createEngine(options);
      await expect(createEngine(options)).rejects.toThrow(ProjectLockedError);
      await engine.close();
      const next = await createEngine(options);
      await next.close();
    } finally {
      project.remove();
    }
  });
});
