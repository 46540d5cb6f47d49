import type { CodeProblem, RunContext, Runner, RunnerStatus } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import type { RemoteClient } from './client.js';
import { isShipper } from './shipment.js';

/**
 * A local runner some of whose tools run on workers: every tool when the runner is named in
 * arium.json's `remote.runners`, else those whose ids match `remote.tools`. Code checks stay local
 * (the engine's machine has the files); only the call travels.
 */
export class RoutedRunner implements Runner {
  readonly name: string;
  readonly interruptible = true;
  readonly #local: Runner;
  readonly #client: RemoteClient;
  readonly #all: boolean;
  readonly #patterns: readonly RegExp[];

  constructor(local: Runner, client: RemoteClient, all: boolean, patterns: readonly RegExp[]) {
    this.name = local.name;
    this.#local = local;
    this.#client = client;
    this.#all = all;
    this.#patterns = patterns;
    if (local.capabilities) Object.assign(this, { capabilities: local.capabilities });
  }

  remote(tool: Tool): boolean {
    return this.#all || this.#patterns.some((p) => p.test(tool.spec.id));
  }

  async run(ctx: RunContext): Promise<unknown> {
    if (!this.remote(ctx.tool)) return this.#local.run(ctx);
    // The local runner has the project's installed dependencies: it says what the worker needs of them.
    const shipment = isShipper(this.#local) ? await this.#local.shipment(ctx.tool) : {};
    return this.#client.run(ctx, this.name, shipment);
  }

  check(tool: Tool): Promise<CodeProblem | null> {
    return this.#local.check?.(tool) ?? Promise.resolve(null);
  }

  ready(tool: Tool): Promise<void> | undefined {
    // A remote call ships what the local runner builds (a JS tool's bundle): built off the call's clock too.
    return this.#local.ready?.(tool);
  }

  prepare(tool: Tool): void {
    // A tool that runs remotely needs no local sandbox kept warm.
    if (!this.remote(tool)) this.#local.prepare?.(tool);
  }

  forget(tool: Tool): void {
    this.#local.forget?.(tool);
  }

  async status(): Promise<RunnerStatus> {
    const workers = this.#client.workers().filter((w) => w.runners.includes(this.name));
    const remote = {
      connected: this.#client.connected,
      tools: this.#all ? 'all' : this.#patterns.map((p) => p.source),
      workers: workers.length,
      capacity: workers.reduce((n, w) => n + w.capacity, 0),
      in_flight: workers.reduce((n, w) => n + w.in_flight, 0),
    };
    if (this.#all) {
      const available = this.#client.connected && workers.length > 0;
      return {
        available,
        ...(available
          ? {}
          : { reason: this.#client.connected ? `no worker runs ${this.name}: start one with arium worker` : 'not connected to the NATS server' }),
        remote,
      };
    }
    return { ...(await this.#local.status()), remote };
  }

  close(): Promise<void> {
    return this.#local.close();
  }
}

/** A tool id pattern of arium.json (`*` any run of characters) as a RegExp. */
export function toolPattern(pattern: string): RegExp {
  return new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\-]/g, '\\$&').replace(/\*/g, '.*')}$`);
}
