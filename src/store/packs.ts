import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, fsyncSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { crc32 } from './crc32.js';

/**
 * A pack: many objects in one file, so that writing the objects of a big snapshot costs one file and
 * one fsync instead of one file, one rename and one fsync each. A pack is written once, under a name
 * of its own, and never changed afterwards (garbage collection writes a new one and deletes the old):
 * a reader that has it open, or an engine sharing the folder, never sees it change (one that opens it
 * again after gc deleted it finds it gone, and looks in the pack that replaced it).
 *
 *   "ARP1"
 *   record*    length u32 | kind u8 | hash 32 | crc32 of the 37 bytes before it and the stored bytes | stored bytes
 *   index      entry* sorted by hash: hash 32 | offset of the stored bytes u64 | length u32 | kind u8
 *   trailer    entries u32 | offset of the index u64 | crc32 of the index u32 | "ARPI"
 *
 * The trailer is written last: a pack without a whole trailer was cut short by a crash. It is read by
 * walking its records and keeping those whose CRC holds, which loses exactly the records that were
 * being written. Reads verify an object against its name (objects.ts); the CRC is only what tells a
 * whole record from a torn one when the index is gone.
 */

const MAGIC = Buffer.from('ARP1');
const INDEX_MAGIC = 0x41525049; // "ARPI"
const RECORD_HEAD = 4 + 1 + 32 + 4;
const ENTRY = 32 + 8 + 4 + 1;
const TRAILER = 4 + 8 + 4 + 4;
/** Bytes gathered into one write while a pack is written. */
const WRITE_CHUNK = 4 * 1024 * 1024;
/**
 * Pack files a process keeps open at once. Every snapshot that brings PACK_MIN_OBJECTS objects adds a
 * pack, and packs are merged only when gc finds them half dead, so a project that snapshots often
 * gains packs without bound: one descriptor each would reach the process's limit (often 1,024), after
 * which no file or socket opens. Past this, the pack read least recently is closed, and opened again
 * by path when next read (a few µs).
 */
export const MAX_OPEN_PACKS = 32;
/** The packs holding a descriptor, least recently read first. */
const openPacks = new Set<Pack>();

export type PackKind = 'blob' | 'tree';

export interface PackObject {
  kind: PackKind;
  hash: string;
  stored: Buffer;
}

export interface PackEntry {
  hash: string;
  kind: PackKind;
  offset: number;
  length: number;
}

export const PACK_SUFFIX = '.pack';
/** Names of the objects of a pack that garbage collection found unreachable, when the pack was kept. */
export const DEAD_SUFFIX = '.dead';

export function newPackName(): string {
  return `${Date.now().toString(36)}-${randomBytes(6).toString('hex')}${PACK_SUFFIX}`;
}

export class Pack {
  readonly path: string;
  /** Whether the trailer was whole; a pack read by walking its records is rewritten by the next gc. */
  readonly whole: boolean;
  /** Objects garbage collection found unreachable (not yet removed from the file). */
  readonly dead = new Set<string>();
  readonly #index: Buffer;
  #fd: number | null = null;

  private constructor(path: string, index: Buffer, whole: boolean, fd: number) {
    this.path = path;
    this.#index = index;
    this.whole = whole;
    this.#fd = fd;
    this.#used();
  }

  /** Reads a pack's index (or, without a whole trailer, walks its records). */
  static open(path: string): Pack {
    const fd = openSync(path, 'r');
    try {
      const size = fstatSync(fd).size;
      const index = readIndex(fd, size);
      return index ? new Pack(path, index, true, fd) : new Pack(path, scan(fd, size), false, fd);
    } catch (error) {
      closeSync(fd);
      throw error;
    }
  }

  /**
   * Writes `objects` as a new pack in `dir` and returns it. `synced`: fsynced before this returns
   * (syncing the folder entry is the caller's part). On failure the file is removed.
   */
  static write(dir: string, objects: readonly PackObject[], synced: boolean, options: { aside?: boolean } = {}): Pack {
    const name = newPackName();
    const path = join(dir, name);
    // `aside`: written under a temporary name and renamed once whole and synced, for a pack that
    // replaces others (garbage collection): its objects must never be seen torn under a pack's name.
    const writing = options.aside ? join(dir, `.tmp-${name}`) : path;
    // Records in the order of their names, so the index is written as they go, without a sort of its own.
    const sorted = [...objects].sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
    const index = Buffer.allocUnsafe(sorted.length * ENTRY);
    // Read and write: the pack is read through this descriptor for as long as it is open.
    const fd = openSync(writing, 'wx+', 0o600);
    try {
      const out = new ChunkWriter(fd);
      out.take(MAGIC.length).set(MAGIC);
      sorted.forEach((object, i) => {
        const length = object.stored.length;
        const record = out.take(RECORD_HEAD + length);
        record.writeUInt32BE(length, 0);
        record[4] = object.kind === 'tree' ? 1 : 0;
        record.write(object.hash, 5, 32, 'hex');
        // TypedArray#set and a plain loop: Buffer#copy's checks cost more than these small copies.
        record.set(object.stored, RECORD_HEAD);
        record.writeUInt32BE(crc32(record, RECORD_HEAD, record.length, crc32(record, 0, 37)), 37);
        const at = i * ENTRY;
        for (let b = 0; b < 32; b++) index[at + b] = record[5 + b] as number;
        index.writeBigUInt64BE(BigInt(out.written - length), at + 32);
        index.writeUInt32BE(length, at + 40);
        index[at + 44] = record[4] as number;
      });
      const indexAt = out.written;
      out.take(index.length).set(index);
      const trailer = out.take(TRAILER);
      trailer.writeUInt32BE(sorted.length, 0);
      trailer.writeBigUInt64BE(BigInt(indexAt), 4);
      trailer.writeUInt32BE(crc32(index), 12);
      trailer.writeUInt32BE(INDEX_MAGIC, 16);
      out.flush();
      if (synced || options.aside) fsyncSync(fd);
      if (writing !== path) renameSync(writing, path);
      return new Pack(path, index, true, fd);
    } catch (error) {
      closeSync(fd);
      rmSync(writing, { force: true });
      throw error;
    }
  }

  get count(): number {
    return this.#index.length / ENTRY;
  }

  /** The position of `hash` in the index, or -1. */
  find(key: Buffer): number {
    // On the first four bytes in JS, the whole name only when they are equal: a native compare per
    // step cost more than the search itself.
    const head = key.readUInt32BE(0);
    let lo = 0;
    let hi = this.count - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const at = mid * ENTRY;
      const other = this.#index.readUInt32BE(at);
      const order = head !== other ? (head < other ? -1 : 1) : key.compare(this.#index, at, at + 32, 0, 32);
      if (order === 0) return mid;
      if (order < 0) hi = mid - 1;
      else lo = mid + 1;
    }
    return -1;
  }

  /** Whether the pack holds `hash` and it was not found dead. */
  holds(hash: string, key = Buffer.from(hash, 'hex')): boolean {
    return this.find(key) !== -1 && !this.dead.has(hash);
  }

  entry(i: number): PackEntry {
    const at = i * ENTRY;
    return {
      hash: this.#index.toString('hex', at, at + 32),
      offset: Number(this.#index.readBigUInt64BE(at + 32)),
      length: this.#index.readUInt32BE(at + 40),
      kind: this.#index[at + 44] === 1 ? 'tree' : 'blob',
    };
  }

  *entries(): Generator<PackEntry> {
    for (let i = 0; i < this.count; i++) yield this.entry(i);
  }

  /** The stored bytes of entry `i`, as they are in the file (the caller verifies them against the name). */
  read(i: number): Buffer {
    const { offset, length } = this.entry(i);
    return readAt(this.#open(), offset, length);
  }

  /** The stored bytes of entry `i` if its record's CRC still holds, else null (garbage collection copies only those). */
  readChecked(i: number): Buffer | null {
    const { offset, length } = this.entry(i);
    const record = readAt(this.#open(), offset - RECORD_HEAD, RECORD_HEAD + length);
    if (record.length !== RECORD_HEAD + length) return null;
    if (record.readUInt32BE(0) !== length) return null;
    return crc32(record, RECORD_HEAD, record.length, crc32(record, 0, 37)) === record.readUInt32BE(37) ? record.subarray(RECORD_HEAD) : null;
  }

  /** Bytes of the objects not found dead, and of those found dead. */
  usage(): { live: number; dead: number } {
    let live = 0;
    let dead = 0;
    for (const e of this.entries()) {
      if (this.dead.has(e.hash)) dead += e.length;
      else live += e.length;
    }
    return { live, dead };
  }

  /** Forces what was written to disk. */
  sync(): void {
    fsyncSync(this.#open());
  }

  #open(): number {
    this.#fd ??= openSync(this.path, 'r');
    this.#used();
    return this.#fd;
  }

  /** Marks this pack read most recently, and closes the least recent past MAX_OPEN_PACKS. */
  #used(): void {
    openPacks.delete(this);
    openPacks.add(this);
    for (const oldest of openPacks) {
      if (openPacks.size <= MAX_OPEN_PACKS) break;
      oldest.close();
    }
  }

  /** Closes the file (it is opened again when next read). */
  close(): void {
    openPacks.delete(this);
    if (this.#fd !== null) closeSync(this.#fd);
    this.#fd = null;
  }
}

/** Hands out room in a buffer and writes it out whole when full: a pack of 10,000 small objects is a handful of writes. */
class ChunkWriter {
  readonly #fd: number;
  #chunk: Buffer = Buffer.allocUnsafe(WRITE_CHUNK);
  #used = 0;
  /** Bytes handed out so far: the file offset of the next `take`. */
  written = 0;

  constructor(fd: number) {
    this.#fd = fd;
  }

  /** `length` bytes of room, to be filled before the next `take`. */
  take(length: number): Buffer {
    if (this.#used + length > this.#chunk.length) {
      this.flush();
      if (length > this.#chunk.length) this.#chunk = Buffer.allocUnsafe(length);
    }
    const room = this.#chunk.subarray(this.#used, this.#used + length);
    this.#used += length;
    this.written += length;
    return room;
  }

  flush(): void {
    let off = 0;
    while (off < this.#used) off += writeSync(this.#fd, this.#chunk, off, this.#used - off);
    this.#used = 0;
  }
}

function readAt(fd: number, position: number, length: number): Buffer {
  const out = Buffer.allocUnsafe(length);
  let read = 0;
  while (read < length) {
    const n = readSync(fd, out, read, length - read, position + read);
    if (n === 0) break;
    read += n;
  }
  return read === length ? out : out.subarray(0, read);
}

/** The index of a pack with a whole trailer, or null. */
function readIndex(fd: number, size: number): Buffer | null {
  if (size < MAGIC.length + TRAILER) return null;
  const trailer = readAt(fd, size - TRAILER, TRAILER);
  if (trailer.readUInt32BE(16) !== INDEX_MAGIC) return null;
  const count = trailer.readUInt32BE(0);
  const at = Number(trailer.readBigUInt64BE(4));
  if (at < MAGIC.length || at + count * ENTRY + TRAILER !== size) return null;
  const index = readAt(fd, at, count * ENTRY);
  return crc32(index) === trailer.readUInt32BE(12) ? index : null;
}

/** Walks the records of a pack without a whole trailer: the index of those that are whole, up to the first that is not. */
function scan(fd: number, size: number): Buffer {
  const data = readAt(fd, 0, size);
  const entries: Buffer[] = [];
  let off = data.subarray(0, MAGIC.length).equals(MAGIC) ? MAGIC.length : size;
  while (off + RECORD_HEAD <= size) {
    const length = data.readUInt32BE(off);
    const end = off + RECORD_HEAD + length;
    const kind = data[off + 4] as number;
    if (end > size || kind > 1) break;
    if (crc32(data, off + RECORD_HEAD, end, crc32(data, off, off + 37)) !== data.readUInt32BE(off + 37)) break;
    const entry = Buffer.allocUnsafe(ENTRY);
    data.copy(entry, 0, off + 5, off + 37);
    entry.writeBigUInt64BE(BigInt(off + RECORD_HEAD), 32);
    entry.writeUInt32BE(length, 40);
    entry[44] = kind;
    entries.push(entry);
    off = end;
  }
  entries.sort((a, b) => a.compare(b, 0, 32, 0, 32));
  return Buffer.concat(entries);
}
