import { ToolFailure } from '../../src/errors.js';
import { REMOTE_LIMITS, type RemoteLimits } from '../../src/limits.js';
import { partBytes } from './parts.js';

/**
 * The messages in parts (parts.ts) one remote call has in transit on the engine, and what they cost:
 * answers kept for the worker to fetch part by part (downloads), and the parts of a message the worker
 * is sending (uploads). Each is bounded per call and, through the Ledger, per worker (REMOTE_LIMITS);
 * a request past a bound is refused with a ToolFailure that says which, and nothing more is kept.
 *
 * A download is kept as the encoded message and each part made when it is asked for: base64 of the
 * whole message at once would hold a third more again, in one synchronous step.
 */

/** Bytes held by each worker's calls together, by worker id. */
export class Ledger {
  readonly #bytes = new Map<string, number>();

  held(worker: string): number {
    return this.#bytes.get(worker) ?? 0;
  }

  change(worker: string, delta: number): void {
    const next = this.held(worker) + delta;
    if (next > 0) this.#bytes.set(worker, next);
    else this.#bytes.delete(worker);
  }
}

interface Download {
  readonly bytes: Uint8Array;
  readonly count: number;
  readonly worker: string;
  at: number;
}

interface Upload {
  readonly parts: Buffer[];
  bytes: number;
  readonly worker: string;
  at: number;
}

export class CallTransfers {
  readonly #downloads = new Map<string, Download>();
  readonly #uploads = new Map<string, Upload>();
  readonly #ledger: Ledger;
  readonly #limits: RemoteLimits;
  #held = 0;
  #sent = 0;

  constructor(ledger: Ledger, limits: RemoteLimits = REMOTE_LIMITS) {
    this.#ledger = ledger;
    this.#limits = limits;
  }

  /** Messages in transit now, both ways. */
  get count(): number {
    return this.#downloads.size + this.#uploads.size;
  }

  /**
   * Whether the call holds as many answers in parts, or bytes of them, as it may (or its worker holds
   * as much as it may): the next large answer waits until the worker fetches one. What the worker is
   * sending does not count here: it arrives whatever the engine answers meanwhile.
   */
  full(worker: string): boolean {
    let bytes = 0;
    for (const download of this.#downloads.values()) bytes += download.bytes.length;
    return (
      this.#downloads.size >= this.#limits.call_transfers ||
      bytes >= this.#limits.call_transfer_bytes ||
      this.#ledger.held(worker) >= this.#limits.worker_transfer_bytes
    );
  }

  /** Throws BUSY when another message in parts would be one too many for the call. */
  room(worker: string, what: string): void {
    if (this.count >= this.#limits.call_transfers) {
      throw busy(
        `${what}: this call already has ${this.count} messages in parts in transit (REMOTE_LIMITS.call_transfers ${this.#limits.call_transfers}); await some first`,
        worker,
      );
    }
  }

  /** Counts `bytes` of ctx.vfs answers against the call's read volume; throws QUOTA_EXCEEDED past it. */
  sent(bytes: number, what: string): void {
    if (this.#sent + bytes > this.#limits.call_read_bytes) {
      throw new ToolFailure(
        'execution',
        'QUOTA_EXCEEDED',
        `${what}: a remote call may be sent ${this.#limits.call_read_bytes} bytes through ctx.vfs in all (REMOTE_LIMITS.call_read_bytes); it has had ${this.#sent}`,
        { details: { limit: 'call_read_bytes', max: this.#limits.call_read_bytes } },
      );
    }
    this.#sent += bytes;
  }

  /**
   * Keeps `bytes` for the worker to fetch in parts; returns how many. Throws BUSY past a bound, unless
   * not `bounded`: the caller waited until the call was not `full`, and this one answer may pass it.
   */
  download(key: string, bytes: Uint8Array, maxPayload: number, worker: string, what: string, bounded = true): number {
    if (bounded) {
      this.room(worker, what);
      this.#check(bytes.length, worker, what);
    }
    this.#take(bytes.length, worker);
    const count = Math.ceil(bytes.length / partBytes(maxPayload));
    this.#downloads.set(key, { bytes, count, worker, at: Date.now() });
    return count;
  }

  /** Part `index` of a download as base64, made now; '' for a key or index that is not there. The last part ends it. */
  part(key: string, index: number, maxPayload: number): string {
    const download = this.#downloads.get(key);
    if (!download || !Number.isSafeInteger(index) || index < 0 || index >= download.count) return '';
    download.at = Date.now();
    const size = partBytes(maxPayload);
    const { bytes } = download;
    const data = Buffer.from(bytes.buffer, bytes.byteOffset + index * size, Math.min(size, bytes.length - index * size)).toString('base64');
    if (index === download.count - 1) this.#dropDownload(key, download);
    return data;
  }

  /** Keeps one part of a message the worker sends, in order. Throws past a bound (the part is not kept). */
  put(key: string, index: unknown, data: unknown, maxPayload: number, worker: string): void {
    const what = `part ${String(index)} of message ${key.slice(0, 64)}`;
    if (typeof data !== 'string' || data.length > Math.ceil(partBytes(maxPayload) / 3) * 4) {
      throw new ToolFailure('transport', 'INVALID_INPUT', `${what}: a part must be base64 of at most ${partBytes(maxPayload)} bytes`);
    }
    let upload = this.#uploads.get(key);
    const expected = upload?.parts.length ?? 0;
    if (index !== expected) throw new ToolFailure('transport', 'INVALID_INPUT', `${what}: parts come in order, and the next is ${expected}`);
    if (!upload) this.room(worker, what);
    const bytes = Buffer.from(data, 'base64');
    try {
      this.#check(bytes.length, worker, what);
    } catch (error) {
      // The message can no longer arrive whole: what came of it goes now, not when it is idle.
      if (upload) this.#dropUpload(key, upload);
      throw error;
    }
    this.#take(bytes.length, worker);
    if (!upload) {
      upload = { parts: [], bytes: 0, worker, at: 0 };
      this.#uploads.set(key, upload);
    }
    upload.parts.push(bytes);
    upload.bytes += bytes.length;
    upload.at = Date.now();
  }

  /** The whole message the worker sent in parts under `key`, no longer kept; null when there is none. */
  take(key: string): Uint8Array | null {
    const upload = this.#uploads.get(key);
    if (!upload) return null;
    this.#dropUpload(key, upload);
    return Buffer.concat(upload.parts, upload.bytes);
  }

  /** Drops what has not moved for REMOTE_LIMITS.transfer_idle_ms (a worker that stopped half way). */
  sweep(now: number): void {
    const stale = now - this.#limits.transfer_idle_ms;
    for (const [key, download] of this.#downloads) if (download.at < stale) this.#dropDownload(key, download);
    for (const [key, upload] of this.#uploads) if (upload.at < stale) this.#dropUpload(key, upload);
  }

  /** The call ended: nothing of it is kept. */
  clear(): void {
    this.sweep(Number.POSITIVE_INFINITY);
  }

  #check(bytes: number, worker: string, what: string): void {
    const { call_transfer_bytes: callMax, worker_transfer_bytes: workerMax } = this.#limits;
    if (this.#held + bytes > callMax) {
      throw busy(
        `${what}: this call already holds ${this.#held} bytes of messages in parts on the engine, and ${bytes} more would pass REMOTE_LIMITS.call_transfer_bytes (${callMax}); await some first`,
        worker,
      );
    }
    if (this.#ledger.held(worker) + bytes > workerMax) {
      throw busy(
        `${what}: the calls of worker ${worker} already hold ${this.#ledger.held(worker)} bytes of messages in parts on the engine, and ${bytes} more would pass REMOTE_LIMITS.worker_transfer_bytes (${workerMax})`,
        worker,
      );
    }
  }

  #take(bytes: number, worker: string): void {
    this.#held += bytes;
    this.#ledger.change(worker, bytes);
  }

  #dropDownload(key: string, download: Download): void {
    this.#downloads.delete(key);
    this.#release(download.bytes.length, download.worker);
  }

  #dropUpload(key: string, upload: Upload): void {
    this.#uploads.delete(key);
    this.#release(upload.bytes, upload.worker);
  }

  #release(bytes: number, worker: string): void {
    this.#held -= bytes;
    this.#ledger.change(worker, -bytes);
  }
}

function busy(message: string, worker: string): ToolFailure {
  return new ToolFailure('execution', 'BUSY', message, { details: { limit: 'remote transfers', worker } });
}
