import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startWorker, type Worker, type WorkerOptions } from '../../runners/remote/worker.js';
import { createEngine, type Engine, type EngineOptions } from '../../src/index.js';
import type { RemoteConfig } from '../../src/remote-config.js';
import type { TempProject } from './project.js';

/** Short beats and keepalives: a lost worker is noticed in a few hundred ms. */
export const FAST = { heartbeatMs: 100, keepaliveMs: 200 };

/** In-process workers, each with its own cache folder; all closed by `closeAll`. */
export class Workers {
  readonly #started: { worker: Worker; cache: string }[] = [];

  async start(url: string, options: Partial<WorkerOptions> & { deployment?: string } = {}): Promise<Worker> {
    const cache = mkdtempSync(join(tmpdir(), 'arium-worker-cache-'));
    const { deployment, ...rest } = options;
    const worker = await startWorker({
      settings: { servers: [url], deployment: deployment ?? 'test', auth: null, tls: null },
      cacheDir: cache,
      heartbeatMs: FAST.heartbeatMs,
      concurrency: 4,
      ...rest,
    });
    this.#started.push({ worker, cache });
    return worker;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.#started.map(({ worker }) => worker.close()));
    for (const { cache } of this.#started) rmSync(cache, { recursive: true, force: true });
    this.#started.length = 0;
  }
}

/** An engine over `project` whose `runners` run on the workers of `deployment` at `url`. */
export function remoteEngine(project: TempProject, url: string, remote: Partial<RemoteConfig> = {}, options: EngineOptions = {}): Promise<Engine> {
  return createEngine({
    workspace: project.workspace,
    project: project.project,
    watch: false,
    persist: false,
    remote: { nats: url, deployment: 'test', runners: ['js-runner'], keepalive_ms: FAST.keepaliveMs, ...remote },
    ...options,
  });
}
