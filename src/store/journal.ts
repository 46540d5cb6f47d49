import { closeSync, existsSync, fdatasyncSync, fstatSync, ftruncateSync, openSync, readSync } from 'node:fs';
import { dirname } from 'node:path';
import { fsyncDir, writeAll } from './atomic.js';
import { crc32 } from './crc32.js';
import type { ObjectKind, StoredObject } from './objects.js';

/** One change to the live tree. File content travels inside the journal record itself. */
export type JournalOp =
  /**
   * `append`: `data` goes at the end of whatever the file holds when the record is applied, so appends
   * by calls running at once all land. `create`: the file must not exist then (an exclusive create).
   */
  | { op: 'write'; path: string; data: Buffer; append?: true; create?: true }
  | { op: 'delete'; path: string }
  | { op: 'mkdir'; path: string }
  | { op: 'move'; from: string; to: string };

/**
 * One acknowledged call's changes, or one snapshot; `seq` orders records across checkpoints (see
 * state.ts). A snapshot record carries the snapshot's description and the objects written for it, so
 * that taking a snapshot costs one fdatasync: the objects themselves are synced by the next checkpoint.
 */
export interface JournalRecord {
  seq: number;
  ops: JournalOp[];
  snapshot?: unknown;
  objects?: StoredObject[];
}

type StoredOp = Exclude<JournalOp, { op: 'write' }> | { op: 'write'; path: string; size: number; append?: true; create?: true };

export class JournalCorruptError extends Error {
  override readonly name = 'JournalCorruptError';
  constructor(
    message: string,
    /** Byte offset of the first bad record; everything before it is intact. */
    readonly offset: number,
    /** Records before the bad one. */
    readonly intact: number,
  ) {
    super(message);
  }
}

const MAGIC = 0x41524a31; // "ARJ1"
const FRAME_HEADER = 12; // magic, payload length, crc32 of payload

/**
 * The write-ahead journal of the live tree: each acknowledged tool call is one record, appended and
 * fdatasync'ed before the call's result is returned. A record whose frame is cut short at the end of
 * the file is a write that was never acknowledged (the process died mid-append) and is dropped; a bad
 * record followed by more data is corruption, reported with the offset up to which all is intact.
 */
export class Journal {
  readonly path: string;
  readonly #fd: number;
  #size: number;

  /** Only reads: a torn tail is left as it is (its writer may be finishing it), and appends are refused. */
  readonly #readOnly: boolean;

  constructor(path: string, options: { readOnly?: boolean } = {}) {
    this.path = path;
    this.#readOnly = options.readOnly === true;
    const created = !existsSync(path);
    this.#fd = openSync(path, this.#readOnly ? 'r' : 'a+', 0o600);
    this.#size = fstatSync(this.#fd).size;
    // fdatasync makes appended records durable, but not the file's own name: sync the folder once.
    if (created && !this.#readOnly) fsyncDir(dirname(path));
  }

  get size(): number {
    return this.#size;
  }

  /**
   * Reads every whole record. With `recover`, cuts the file at the first bad record instead of throwing
   * (`corruptAt` then says where). Only the last append can be torn by a crash, so a damaged record
   * is dropped as torn only when it is the last thing in the file: a length that runs past the end with a
   * whole record after it, or a bad checksum with bytes after it, is corruption, never a reason to drop
   * the records behind it.
   */
  replay(recover = false): { records: JournalRecord[]; droppedBytes: number; corruptAt: number | null } {
    const data = Buffer.alloc(this.#size);
    let read = 0;
    while (read < data.length) {
      const n = readSync(this.#fd, data, read, data.length - read, read);
      if (n === 0) break;
      read += n;
    }
    const records: JournalRecord[] = [];
    let corruptAt: number | null = null;
    let off = 0;
    while (off < read) {
      const bad = (why: string) => {
        if (recover) {
          corruptAt = off;
          return true;
        }
        throw new JournalCorruptError(
          `Journal ${this.path} is corrupt at byte ${off} (${why}); ${records.length} records before it are intact`,
          off,
          records.length,
        );
      };
      if (read - off < FRAME_HEADER) break; // a torn header at the end: too short to be a whole record
      if (data.readUInt32BE(off) !== MAGIC) {
        // A file extended by a crash before its new bytes were written reads as zeros: a torn tail.
        if (isZero(data, off, read)) break;
        if (bad('bad record marker')) break;
      }
      const length = data.readUInt32BE(off + 4);
      const end = off + FRAME_HEADER + length;
      if (end > read) {
        if (!wholeRecordAfter(data, off + FRAME_HEADER, read)) break; // torn payload at the end
        if (bad('bad record length')) break;
      }
      if (crc32(data, off + FRAME_HEADER, end) !== data.readUInt32BE(off + 8)) {
        // The last record, torn inside a sector. One with bytes after it was whole when the next append began.
        if (end === read) break;
        if (bad('checksum mismatch')) break;
      }
      records.push(decode(data.subarray(off + FRAME_HEADER, end)));
      off = end;
    }
    const dropped = read - off;
    if (dropped > 0 && !this.#readOnly) {
      ftruncateSync(this.#fd, off);
      fdatasyncSync(this.#fd);
      this.#size = off;
    }
    return { records, droppedBytes: dropped, corruptAt };
  }

  /** Appends one record and makes it durable. */
  append(record: JournalRecord): void {
    // The record's parts are written as they are (writev), not joined into one frame: joining copied
    // every byte a call wrote twice more, for as long as the write took.
    const parts = encode(record);
    let length = 0;
    let crc = 0;
    for (const part of parts) {
      length += part.length;
      crc = crc32(part, 0, part.length, crc);
    }
    const head = Buffer.allocUnsafe(FRAME_HEADER);
    head.writeUInt32BE(MAGIC, 0);
    head.writeUInt32BE(length, 4);
    head.writeUInt32BE(crc, 8);
    try {
      writeAll(this.#fd, [head, ...parts]);
      fdatasyncSync(this.#fd);
    } catch (error) {
      // A failed append (e.g. a full disk) must not leave a partial record for the next one to follow.
      ftruncateSync(this.#fd, this.#size);
      throw error;
    }
    this.#size += FRAME_HEADER + length;
  }

  /** Empties the journal after its records were folded into a checkpoint. */
  reset(): void {
    ftruncateSync(this.#fd, 0);
    fdatasyncSync(this.#fd);
    this.#size = 0;
  }

  close(): void {
    closeSync(this.#fd);
  }
}

function isZero(data: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (data[i] !== 0) return false;
  return true;
}

/**
 * Whether a whole, checksummed record starts anywhere in `data` from `from` on. (A file stored in the
 * VFS that itself holds journal frames could fool this into calling a torn tail corruption: the engine
 * then refuses to start and `recover` drops the tail, which is safe; the reverse mistake would not be.)
 */
function wholeRecordAfter(data: Buffer, from: number, to: number): boolean {
  const marker = Buffer.allocUnsafe(4);
  marker.writeUInt32BE(MAGIC, 0);
  for (let at = data.indexOf(marker, from); at !== -1 && at + FRAME_HEADER <= to; at = data.indexOf(marker, at + 1)) {
    const end = at + FRAME_HEADER + data.readUInt32BE(at + 4);
    if (end <= to && crc32(data, at + FRAME_HEADER, end) === data.readUInt32BE(at + 8)) return true;
  }
  return false;
}

interface Header {
  seq: number;
  ops: StoredOp[];
  snapshot?: unknown;
  objects?: Array<{ kind: ObjectKind; hash: string; size: number }>;
}

/** A record as the parts of its payload: header length, header, then each write's and object's bytes. */
export function encode(record: JournalRecord): Buffer[] {
  const stored: StoredOp[] = [];
  const blobs: Buffer[] = [];
  for (const op of record.ops) {
    if (op.op === 'write') {
      const { data, ...rest } = op;
      stored.push({ ...rest, size: data.length });
      blobs.push(op.data);
    } else {
      stored.push(op);
    }
  }
  const head: Header = { seq: record.seq, ops: stored };
  if (record.snapshot !== undefined) head.snapshot = record.snapshot;
  if (record.objects) {
    head.objects = record.objects.map(({ kind, hash, stored: bytes }) => ({ kind, hash, size: bytes.length }));
    for (const object of record.objects) blobs.push(object.stored);
  }
  const header = Buffer.from(JSON.stringify(head));
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32BE(header.length, 0);
  return [length, header, ...blobs];
}

/** A record from its payload (what `encode` gave, joined). */
export function decode(payload: Buffer): JournalRecord {
  const headerLength = payload.readUInt32BE(0);
  const header = JSON.parse(payload.subarray(4, 4 + headerLength).toString('utf8')) as Header;
  let off = 4 + headerLength;
  const take = (size: number) => {
    const bytes = Buffer.from(payload.subarray(off, off + size));
    off += size;
    return bytes;
  };
  const ops = header.ops.map((op): JournalOp => {
    if (op.op !== 'write') return op;
    const { size, ...rest } = op;
    return { ...rest, data: take(size) };
  });
  const record: JournalRecord = { seq: header.seq, ops };
  if (header.snapshot !== undefined) record.snapshot = header.snapshot;
  if (header.objects) record.objects = header.objects.map(({ kind, hash, size }) => ({ kind, hash, stored: take(size) }));
  return record;
}
