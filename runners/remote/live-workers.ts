import type { Heartbeat } from './wire.js';

/** A worker as the engine last heard of it. */
export interface WorkerInfo extends Omit<Heartbeat, 't'> {
  /** Milliseconds since its last heartbeat. */
  last_seen_ms: number;
}

/**
 * The workers an engine has heard from, by their heartbeats: each is forgotten after three of its
 * own intervals without one, or at once when it says it is leaving (a drained worker's last beat).
 */
export class LiveWorkers {
  readonly #seen = new Map<string, { hb: Heartbeat; at: number }>();

  heard(hb: Heartbeat | null): void {
    if (hb?.t !== 'hb' || typeof hb.id !== 'string' || !Number.isFinite(hb.interval_ms)) return;
    if (hb.leaving) this.#seen.delete(hb.id);
    else this.#seen.set(hb.id, { hb, at: Date.now() });
  }

  list(): WorkerInfo[] {
    const now = Date.now();
    const live: WorkerInfo[] = [];
    for (const [id, { hb, at }] of this.#seen) {
      if (now - at > 3 * hb.interval_ms) {
        this.#seen.delete(id);
        continue;
      }
      const { t: _, ...info } = hb;
      live.push({ ...info, last_seen_ms: now - at });
    }
    return live.sort((a, b) => (a.id < b.id ? -1 : 1));
  }
}

/** How a worker isolates calls, in a few words per runner (e.g. `py-runner bubblewrap, js-runner isolated-vm`); '' until it has said. */
export function sandboxSummary(worker: Pick<WorkerInfo, 'sandboxes'>): string {
  return Object.entries(worker.sandboxes ?? {})
    .map(([name, sandbox]) => `${name} ${sandbox.available === false ? 'unavailable' : String(sandbox.isolation ?? '?').split(':')[0]}`)
    .join(', ');
}
