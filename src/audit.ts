import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';
import type { EngineEvent } from './events.js';

/**
 * Appends every event as one JSON line. Events already carry redacted, size-capped payloads, so the
 * log holds no more than subscribers see. Writes are buffered by the stream; `close` flushes them.
 */
export class AuditLog {
  readonly path: string;
  readonly #stream: WriteStream;
  #failed: Error | null = null;

  constructor(path: string) {
    this.path = path;
    mkdirSync(dirname(path), { recursive: true });
    this.#stream = createWriteStream(path, { flags: 'a', mode: 0o600 });
    this.#stream.on('error', (error) => {
      this.#failed = error;
    });
  }

  get error(): Error | null {
    return this.#failed;
  }

  write(event: EngineEvent): void {
    if (this.#failed) return;
    this.#stream.write(`${JSON.stringify(event)}\n`);
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      if (this.#stream.closed || this.#failed) return resolve();
      this.#stream.end(() => resolve());
    });
  }
}
