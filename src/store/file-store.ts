import {
  closeSync,
  existsSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { fsyncDir, writeFileAtomic } from './atomic.js';
import { Journal } from './journal.js';
import { lockHolder, ProjectLock } from './lock.js';
import { ObjectStore } from './objects.js';
import type { JournalPort, LiveRef, StateStore } from './port.js';

/**
 * The state of a project in a folder (`<project>/.arium`):
 *   objects/ab/cdef…   blobs and trees      live.json        {root, seq} of the last checkpoint
 *   objects/pack/…     many objects a file
 *   journal            records since then   snapshots.jsonl  one SnapshotInfo a line
 *   lock               the owning engine
 */
export class FileStateStore implements StateStore {
  readonly location: string;
  readonly objects: ObjectStore;
  readonly readOnly: boolean;
  readonly #lock: ProjectLock | null;
  #journal: Journal | null = null;

  constructor(dir: string, options: { readOnly?: boolean } = {}) {
    this.location = dir;
    this.readOnly = options.readOnly === true;
    if (!this.readOnly) mkdirSync(dir, { recursive: true });
    this.#lock = this.readOnly ? null : new ProjectLock(join(dir, 'lock'));
    this.objects = new ObjectStore(join(dir, 'objects'), { readOnly: this.readOnly });
  }

  #path(name: string): string {
    return join(this.location, name);
  }

  describe(part: 'live' | 'snapshot log'): string {
    return this.#path(part === 'live' ? 'live.json' : 'snapshots.jsonl');
  }

  acquire(): void {
    this.#lock?.acquire();
  }

  release(): void {
    this.#lock?.release();
  }

  holder(): number | null {
    return lockHolder(this.#path('lock'));
  }

  readLive(): LiveRef | null {
    const path = this.#path('live.json');
    if (!existsSync(path)) return null;
    return JSON.parse(readFileSync(path, 'utf8')) as LiveRef;
  }

  writeLive(ref: LiveRef): void {
    writeFileAtomic(this.#path('live.json'), JSON.stringify(ref));
  }

  liveStamp(): string | null {
    try {
      const st = statSync(this.#path('live.json'));
      return `${st.ino}:${st.size}:${st.mtimeMs}`;
    } catch {
      return null;
    }
  }

  readSnapshotLog(): { lines: string[]; tornBytes: number } {
    const path = this.#path('snapshots.jsonl');
    if (!existsSync(path)) return { lines: [], tornBytes: 0 };
    const bytes = readFileSync(path);
    // A record is appended with its newline in one write: a last line without one was torn by a crash
    // and never acknowledged. Cut it off, or the next record would be glued to it.
    const whole = bytes.lastIndexOf(0x0a) + 1;
    const torn = bytes.length - whole;
    if (torn > 0 && !this.readOnly) truncateSync(path, whole);
    const lines = bytes.subarray(0, whole).toString('utf8').split('\n');
    lines.pop();
    return { lines, tornBytes: torn };
  }

  appendSnapshotLog(lines: readonly string[]): void {
    if (lines.length > 0) appendDurably(this.#path('snapshots.jsonl'), lines.map((line) => `${line}\n`).join(''));
  }

  journal(): JournalPort | null {
    if (this.#journal) return this.#journal;
    const path = this.#path('journal');
    if (this.readOnly && !existsSync(path)) return null;
    this.#journal = new Journal(path, { readOnly: this.readOnly });
    return this.#journal;
  }

  close(): void {
    this.#journal?.close();
    this.#journal = null;
    this.objects.close();
  }
}

/** Appends `text` durably; a failed append is cut back off so the file still ends on a whole line. */
function appendDurably(path: string, text: string): void {
  const created = !existsSync(path);
  const fd = openSync(path, 'a', 0o600);
  const size = fstatSync(fd).size;
  try {
    const bytes = Buffer.from(text);
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } catch (error) {
    ftruncateSync(fd, size);
    throw error;
  } finally {
    closeSync(fd);
  }
  if (created) fsyncDir(dirname(path));
}
