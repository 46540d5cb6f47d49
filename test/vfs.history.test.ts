import { describe, expect, it } from 'vitest';
import { seeded } from '../bench/soak-workload.js';
import { ToolFailure } from '../src/errors.js';
import { VfsState } from '../src/vfs/state.js';
import type { Transaction } from '../src/vfs/transaction.js';

// Transactions read the committed tree as it was when they began, from pre-images the commits after
// keep once for all of them (src/vfs/read-view.ts, History). Checked against a model that copies the
// whole tree at each begin, over random interleavings of begins, reads, listings, commits and ends;
// and that one long transaction does not keep alive what the short ones beside it needed.

interface Open {
  id: number;
  txn: Transaction;
  /** The tree when it began: path → content. */
  seen: Map<string, string>;
  start: number;
  reads: Set<string>;
  listed: boolean;
}

const PATHS = Array.from({ length: 6 }, (_, i) => `/d/f${i}`);

function outcome(run: () => unknown): string {
  try {
    return `ok ${JSON.stringify(run())}`;
  } catch (error) {
    if (error instanceof ToolFailure) return `fail ${error.code}`;
    throw error;
  }
}

describe('transactions against a model that copies the tree at each begin', () => {
  for (let seed = 1; seed <= 40; seed++) {
    it(`agrees on every read, listing and commit (seed ${seed})`, () => {
      const next = seeded(seed);
      const pick = <T>(list: readonly T[]): T => list[Math.floor(next() * list.length)] as T;
      const state = new VfsState({ dir: null });
      state.change((txn) => {
        txn.mkdir('/d', { parents: true });
        txn.mkdir('/w', { parents: true });
        txn.write('/d/f0', 'initial');
      });
      const tree = new Map<string, string>([['/d/f0', 'initial']]);
      /** The change count at which each path last changed. */
      const changedAt = new Map<string, number>();
      const open: Open[] = [];
      let ids = 0;
      for (let step = 0; step < 400; step++) {
        const roll = next();
        if (roll < 0.15 && open.length < 8) {
          open.push({ id: ids++, txn: state.begin(), seen: new Map(tree), start: state.changes, reads: new Set(), listed: false });
        } else if (roll < 0.45) {
          // Another call commits: a write (new or replaced content) or a delete.
          const path = pick(PATHS);
          if (next() < 0.25 && tree.has(path)) {
            state.change((txn) => txn.delete(path));
            tree.delete(path);
          } else {
            const content = `v${step}`;
            state.change((txn) => txn.write(path, content));
            tree.set(path, content);
          }
          changedAt.set(path, state.changes);
        } else if (open.length > 0) {
          const t = pick(open);
          const what = next();
          if (what < 0.45) {
            const path = pick(PATHS);
            t.reads.add(path);
            const expected = t.seen.has(path) ? `ok ${JSON.stringify(t.seen.get(path))}` : 'fail NOT_FOUND';
            expect(outcome(() => t.txn.read(path).toString())).toBe(expected);
          } else if (what < 0.6) {
            t.listed = true;
            const names = [...t.seen.keys()].map((p) => p.slice(3)).sort();
            expect(t.txn.list('/d').entries.map((e) => e.name)).toEqual(names);
          } else if (what < 0.8) {
            // Commits a write of its own (to a path only it writes): refused if anything it read changed.
            open.splice(open.indexOf(t), 1);
            t.txn.write(`/w/${t.id}`, 'done');
            const changed = [...changedAt].some(([path, at]) => at > t.start && (t.reads.has(path) || t.listed));
            expect(outcome(() => state.commit(t.txn))).toBe(changed ? 'fail CONFLICT' : 'ok undefined');
          } else {
            open.splice(open.indexOf(t), 1);
            state.end(t.txn);
          }
        }
      }
      for (const t of open) state.end(t.txn);
      state.begin();
      expect(state.preImages).toBe(0);
    });
  }
});

describe('one long transaction beside many short ones', () => {
  it('keeps its own view without keeping what the short ones needed', () => {
    const state = new VfsState({ dir: null });
    state.change((txn) => txn.write('/d/f', 'before'));
    const long = state.begin();
    for (let i = 0; i < 2_000; i++) {
      const short = state.begin();
      state.change((txn) => txn.write('/d/f', `v${i}`));
      expect(short.read('/d/f').toString()).toBe(i === 0 ? 'before' : `v${i - 1}`);
      state.end(short);
    }
    // One pre-image for the long one (its start), and at most the last short one's.
    expect(state.preImages).toBeLessThanOrEqual(2);
    expect(long.read('/d/f').toString()).toBe('before');
    long.write('/w/x', 'x');
    expect(() => state.commit(long)).toThrow(/Another call changed \/d\/f after this call read it/);
  });

  it('drops what it alone needed once it ends, at the next begin', () => {
    const state = new VfsState({ dir: null });
    state.change((txn) => txn.write('/d/f', 'before'));
    const long = state.begin();
    for (let i = 0; i < 100; i++) state.change((txn) => txn.write(`/d/g${i}`, 'x'));
    expect(state.preImages).toBe(100);
    state.end(long);
    state.begin();
    expect(state.preImages).toBe(0);
  });
});
