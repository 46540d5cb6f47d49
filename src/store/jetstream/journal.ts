import { decode, encode, JournalCorruptError, type JournalRecord } from '../journal.js';
import type { JournalPort } from '../port.js';
import type { NatsBridge } from './bridge.js';
import { type StoredPart, split, wholeGroups } from './groups.js';

/**
 * The write-ahead journal as messages of the project's stream (subject `j`): a record is encoded as
 * the file journal encodes it, and sent as one message or, past the server's message size, as a group
 * of parts. `append` returns once JetStream has acknowledged every part at the stream's replication
 * (and each part was accepted only while this engine held the project: see worker.mjs).
 */
export class JetStreamJournal implements JournalPort {
  readonly #bridge: NatsBridge;
  readonly #partBytes: number;
  readonly #timeoutMs: number;
  readonly #name: string;
  #size = 0;

  constructor(bridge: NatsBridge, options: { partBytes: number; timeoutMs: number; name: string }) {
    this.#bridge = bridge;
    this.#partBytes = options.partBytes;
    this.#timeoutMs = options.timeoutMs;
    this.#name = options.name;
  }

  get size(): number {
    return this.#size;
  }

  append(record: JournalRecord): void {
    // Joined, so the record is a copy: the live tree adopts the buffers the caller hands over.
    const bytes = Buffer.concat(encode(record));
    this.#bridge.call('publish', { sub: 'j', parts: split(bytes, this.#partBytes) }, this.#timeoutMs);
    this.#size += bytes.length;
  }

  /**
   * Every whole record, oldest first. A record followed by another of the same or a lower seq was one
   * whose append failed without an answer (it may have been stored): the state gave its seq to the next
   * record, and the earlier one is dropped, as the caller was told it failed.
   */
  replay(recover = false): { records: JournalRecord[]; droppedBytes: number; corruptAt: number | null } {
    const parts = this.#bridge.call<StoredPart[]>('read', { sub: 'j' }, this.#timeoutMs);
    const { groups, droppedBytes } = wholeGroups(parts);
    const records: JournalRecord[] = [];
    let size = 0;
    let corruptAt: number | null = null;
    for (const group of groups) {
      let record: JournalRecord;
      try {
        record = decode(group);
      } catch (error) {
        if (!recover) {
          throw new JournalCorruptError(
            `The journal of project "${this.#name}" in JetStream holds an unreadable record after ${records.length} intact ones (${(error as Error).message})`,
            size,
            records.length,
          );
        }
        corruptAt = size;
        break;
      }
      while (records.length > 0 && (records[records.length - 1] as JournalRecord).seq >= record.seq) records.pop();
      records.push(record);
      size += group.length;
    }
    this.#size = size;
    return { records, droppedBytes, corruptAt };
  }

  reset(): void {
    this.#bridge.call('purge', { sub: 'j' }, this.#timeoutMs);
    this.#size = 0;
  }
}
