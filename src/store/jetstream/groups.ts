/** A message of a subject as the worker reads it: its stream sequence, its part (`i/n`) and its bytes. */
export interface StoredPart {
  seq: number;
  part: string;
  data: Uint8Array;
}

/** `bytes` cut into messages of at most `size` bytes (one, even when empty). */
export function split(bytes: Buffer, size: number): Buffer[] {
  if (bytes.length <= size) return [bytes];
  const parts: Buffer[] = [];
  for (let off = 0; off < bytes.length; off += size) parts.push(bytes.subarray(off, off + size));
  return parts;
}

/**
 * The whole groups of a subject (parts 1/n … n/n in a row), joined, oldest first. A group cut short —
 * its writer died or was fenced in the middle of it, so it was never acknowledged — is dropped, and its
 * bytes counted, wherever it is: a new holder's messages follow a group its predecessor left unfinished.
 */
export function wholeGroups(parts: readonly StoredPart[]): { groups: Buffer[]; droppedBytes: number } {
  const groups: Buffer[] = [];
  let dropped = 0;
  let open: { chunks: Uint8Array[]; count: number } | null = null;
  const drop = () => {
    if (open) for (const chunk of open.chunks) dropped += chunk.length;
    open = null;
  };
  for (const { part, data } of parts) {
    const match = /^(\d+)\/(\d+)$/.exec(part);
    const index = Number(match?.[1] ?? 0);
    const count = Number(match?.[2] ?? 0);
    if (index === 1) {
      drop();
      open = { chunks: [], count };
    }
    if (open === null || index !== open.chunks.length + 1 || count !== open.count) {
      drop();
      dropped += data.length;
      continue;
    }
    open.chunks.push(data);
    if (open.chunks.length === open.count) {
      groups.push(Buffer.concat(open.chunks));
      open = null;
    }
  }
  drop();
  return { groups, droppedBytes: dropped };
}
