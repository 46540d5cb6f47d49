import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { NatsAuth } from '../../runners/remote/settings.js';
import { DEFAULT_JETSTREAM_STORE } from '../limits.js';
import { NatsBridge, NatsStoreError } from './jetstream/bridge.js';
import { split, wholeGroups } from './jetstream/groups.js';
import { JetStreamJournal } from './jetstream/journal.js';
import { JetStreamObjects } from './jetstream/objects.js';
import { ProjectLockedError } from './lock.js';
import type { JournalPort, LiveRef, StateStore } from './port.js';

export { NatsStoreError, StoreFencedError } from './jetstream/bridge.js';

/** A project's name in JetStream: a token of its stream's and buckets' names. */
export const STORE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export interface JetStreamStoreOptions {
  /** NATS server URLs (every server of a cluster, or some of them). */
  servers: string[];
  auth?: NatsAuth | null;
  tls?: { ca_file?: string; cert_file?: string; key_file?: string } | null;
  /** The project's name: its stream is ARIUM_<name>, its buckets arium-lease-<name> and arium-objects-<name>. */
  name: string;
  /** JetStream replicas of the stream and buckets: an append is acknowledged once this many (a majority of them) hold it. */
  replicas?: 1 | 3;
  /** How long the holder's lease lasts unrenewed (it renews it every third of this); another engine takes the project after it. */
  leaseMs?: number;
  /** How long one request to NATS may take before it fails. */
  timeoutMs?: number;
}

interface Owner {
  pid: number | null;
  host: string;
  id: string;
  at: string;
}

/**
 * A project's state in NATS JetStream (worker.mjs shows the layout): the journal, checkpoint and
 * snapshot log as subjects of one stream, whose every message is published with the stream's
 * expected last sequence, the objects in an object store, and the hold as a lease in a KV bucket. One
 * engine holds a project at a time; when its lease goes unrenewed (the process was killed, stopped,
 * or cut off) another engine takes the project over, and from then on the former holder's writes are
 * refused by the server (StoreFencedError), even in the middle of a record.
 */
export class JetStreamStore implements StateStore {
  readonly location: string;
  readonly objects: JetStreamObjects;
  readonly readOnly = false;
  readonly #name: string;
  readonly #bridge: NatsBridge;
  readonly #timeoutMs: number;
  readonly #leaseMs: number;
  readonly #partBytes: number;
  readonly #owner: Owner;
  #journal: JetStreamJournal | null = null;
  #liveSeq: number | null | undefined;
  #held = false;
  #closed = false;

  constructor(options: JetStreamStoreOptions) {
    if (!STORE_NAME.test(options.name)) {
      throw new NatsStoreError(`The JetStream store's name "${options.name}" must be 1 to 64 letters, digits, "_" or "-"`);
    }
    if (options.servers.length === 0) throw new NatsStoreError('The JetStream store needs a NATS server, e.g. nats://127.0.0.1:4222');
    this.#name = options.name;
    this.location = `nats:${options.name}`;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_JETSTREAM_STORE.timeout_ms;
    this.#leaseMs = options.leaseMs ?? DEFAULT_JETSTREAM_STORE.lease_ms;
    this.#owner = { pid: process.pid, host: hostname(), id: randomUUID(), at: new Date().toISOString() };
    this.#bridge = new NatsBridge();
    let opened: { maxPayload: number };
    try {
      opened = this.#bridge.call(
        'open',
        {
          servers: options.servers,
          auth: options.auth ?? null,
          tls: options.tls ?? null,
          name: options.name,
          replicas: options.replicas ?? 1,
          leaseMs: this.#leaseMs,
          timeoutMs: this.#timeoutMs,
          owner: this.#owner,
        },
        this.#timeoutMs * 2,
      );
    } catch (error) {
      this.#bridge.close();
      throw new NatsStoreError(
        `Could not open the project "${options.name}" in NATS JetStream at ${options.servers.join(', ')}: ${(error as Error).message}`,
      );
    }
    // Room for the headers each message carries (its part and the holder's lease).
    this.#partBytes = Math.max(1024, Math.min(opened.maxPayload, 1024 * 1024) - 4096);
    this.objects = new JetStreamObjects(this.#bridge, this.#timeoutMs);
  }

  describe(part: 'live' | 'snapshot log'): string {
    // Read after "The live checkpoint" or "Line 3 of" in messages, as a file path is.
    return `(NATS JetStream stream ARIUM_${this.#name}, subject arium.state.${this.#name}.${part === 'live' ? 'live' : 'snap'})`;
  }

  /**
   * Takes the project's lease: at once when it is free; when another engine holds it, once that engine
   * has left it unrenewed for lease_ms. Throws ProjectLockedError, naming the holder, when the holder
   * kept renewing it for longer than that.
   */
  acquire(): void {
    if (this.#held) return;
    const waitMs = Math.ceil(this.#leaseMs * 1.5);
    const got = this.#bridge.call<{ held?: Owner; lastSeq?: number }>('acquire', { waitMs }, waitMs + this.#timeoutMs * 2);
    if (got.held) {
      const holder = got.held;
      throw new ProjectLockedError(
        `Another Arium engine (pid ${holder.pid} on ${holder.host}, since ${holder.at}) holds the project "${this.#name}" in NATS JetStream and renews its lease; close it first, or, if it was killed, open the project again once its lease (${this.#leaseMs} ms) has run out`,
        holder.pid,
      );
    }
    this.#held = true;
  }

  release(): void {
    if (!this.#held) return;
    this.#held = false;
    try {
      this.#bridge.call('release', {}, this.#timeoutMs);
    } catch {
      // Unreachable: the lease runs out by itself.
    }
    if (this.#closed) this.#bridge.close();
  }

  holder(): number | null {
    const { owner } = this.#bridge.call<{ owner: Owner | null }>('holder', {}, this.#timeoutMs);
    return owner?.pid ?? null;
  }

  readLive(): LiveRef | null {
    const last = this.#bridge.call<{ seq: number | null; data: Uint8Array | null; firstSeq: number | null }>(
      'last',
      { sub: 'live' },
      this.#timeoutMs * 2,
    );
    if (last.data === null) {
      // The journal is purged only once a checkpoint holds its records: a purged stream without one lost it.
      if ((last.firstSeq ?? 0) > 1) {
        throw new NatsStoreError(
          `the stream ARIUM_${this.#name} holds no checkpoint although its journal was folded into one (JetStream lost an acknowledged message, e.g. after every server was killed at once)`,
        );
      }
      this.#liveSeq = null;
      return null;
    }
    this.#liveSeq = last.seq;
    return JSON.parse(Buffer.from(last.data).toString('utf8')) as LiveRef;
  }

  writeLive(ref: LiveRef): void {
    const { seq } = this.#bridge.call<{ seq: number }>(
      'publish',
      { sub: 'live', parts: [Buffer.from(JSON.stringify({ root: ref.root, seq: ref.seq }))] },
      this.#timeoutMs,
    );
    // The checkpoints before this one stay (a few bytes each): were a server to answer a read with less
    // than it holds (JetStream recovering a stream), an older checkpoint is still there to go back to.
    this.#liveSeq = seq;
  }

  liveStamp(): string | null {
    if (this.#liveSeq === undefined) this.readLive();
    return this.#liveSeq === null || this.#liveSeq === undefined ? null : String(this.#liveSeq);
  }

  readSnapshotLog(): { lines: string[]; tornBytes: number } {
    const parts = this.#bridge.call<{ seq: number; part: string; data: Uint8Array }[]>('read', { sub: 'snap' }, this.#timeoutMs);
    const { groups, droppedBytes } = wholeGroups(parts);
    return { lines: groups.flatMap((group) => group.toString('utf8').split('\n')), tornBytes: droppedBytes };
  }

  appendSnapshotLog(lines: readonly string[]): void {
    if (lines.length === 0) return;
    if (lines.some((line) => line.includes('\n'))) throw new NatsStoreError('A snapshot log line must not hold a newline');
    const bytes = Buffer.from(lines.join('\n'));
    this.#bridge.call('publish', { sub: 'snap', parts: split(bytes, this.#partBytes) }, this.#timeoutMs);
  }

  journal(): JournalPort {
    this.#journal ??= new JetStreamJournal(this.#bridge, { partBytes: this.#partBytes, timeoutMs: this.#timeoutMs, name: this.#name });
    return this.#journal;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#journal = null;
    // The worker holds the lease until `release`; a store never held ends now.
    if (!this.#held) this.#bridge.close();
  }
}
