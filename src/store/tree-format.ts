/** One entry of a stored tree: name, `f`ile or `d`irectory, object hash, size in bytes (0 for folders). */
export type TreeEntry = [name: string, kind: 'f' | 'd', hash: string, size: number];

/**
 * The canonical bytes of a tree: what its name (hash) is computed from, whatever form it is stored in.
 * Entries come sorted by name from the VFS, so equal folders have equal bytes.
 */
export function encodeTree(entries: readonly TreeEntry[]): Buffer {
  return Buffer.from(JSON.stringify(entries));
}

export function decodeTree(bytes: Buffer): TreeEntry[] {
  return JSON.parse(bytes.toString('utf8')) as TreeEntry[];
}

/**
 * A tree stored as its difference from another tree (its base): the entries that are new or changed,
 * and the names that are gone. A folder of 100 files whose one file changed is then stored in about
 * 100 bytes instead of about 9.5 KB, which is what keeps the store's growth per snapshot close to the
 * size of the changed files. `depth` counts the deltas down to a whole tree; reading a tree follows at
 * most MAX_DELTA_DEPTH of them.
 */
export interface TreeDelta {
  base: string;
  depth: number;
  set: TreeEntry[];
  del: string[];
}

export const MAX_DELTA_DEPTH = 16;

/** A stored delta starts with `{`; a whole tree (a JSON array) with `[`. */
export function isDelta(stored: Uint8Array): boolean {
  return stored[0] === 0x7b;
}

export function encodeDelta(delta: TreeDelta): Buffer {
  return Buffer.from(JSON.stringify(delta));
}

export function decodeDelta(stored: Buffer): TreeDelta {
  const delta = JSON.parse(stored.toString('utf8')) as TreeDelta;
  if (typeof delta?.base !== 'string' || !Number.isInteger(delta.depth) || !Array.isArray(delta.set) || !Array.isArray(delta.del)) {
    throw new Error('not a tree delta');
  }
  return delta;
}

/** The delta that turns `base` into `next`; null when it would not be much smaller than `next` itself. */
export function diffEntries(base: readonly TreeEntry[], next: readonly TreeEntry[], wholeBytes: number): { set: TreeEntry[]; del: string[] } | null {
  const old = new Map<string, TreeEntry>();
  for (const e of base) old.set(e[0], e);
  const set: TreeEntry[] = [];
  for (const e of next) {
    const was = old.get(e[0]);
    if (!was || was[1] !== e[1] || was[2] !== e[2] || was[3] !== e[3]) set.push(e);
    old.delete(e[0]);
  }
  const del = [...old.keys()];
  // Each entry costs about 90 bytes as JSON: a delta touching half the folder saves too little to be
  // worth one more read for every later reader.
  if ((set.length + del.length) * 90 > wholeBytes / 2) return null;
  return { set, del };
}

/** Applies a delta to its base's entries, keeping the canonical order (by name). */
export function applyDelta(base: readonly TreeEntry[], delta: Pick<TreeDelta, 'set' | 'del'>): TreeEntry[] {
  const byName = new Map<string, TreeEntry>();
  for (const e of base) byName.set(e[0], e);
  for (const name of delta.del) byName.delete(name);
  for (const e of delta.set) byName.set(e[0], e);
  return [...byName.values()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}
