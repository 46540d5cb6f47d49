import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import { createEngine, type Engine, type EngineEventMap, type EngineOptions, type RunContext, type Runner } from '../../src/index.js';

/** A throwaway workspace with one project `p` in the OS temp folder. */
export interface TempProject {
  workspace: string;
  project: string;
  dir: string;
  tools: string;
  /** Writes a file relative to the tools folder (folders made as needed). */
  write(name: string, content: string | Buffer): string;
  remove(): void;
}

export function tempProject(files: Record<string, string> = {}, prefix = 'arium-core-'): TempProject {
  const workspace = mkdtempSync(join(tmpdir(), prefix));
  const dir = join(workspace, 'p');
  const tools = join(dir, 'tools');
  mkdirSync(tools, { recursive: true });
  const write = (name: string, content: string | Buffer) => {
    const path = join(tools, name);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, content);
    return path;
  };
  for (const [name, content] of Object.entries(files)) write(name, content);
  return { workspace, project: 'p', dir, tools, write, remove: () => rmSync(workspace, { recursive: true, force: true }) };
}

/** Copies a fixtures folder (e.g. fixtures/definitions) into a temp workspace as project `p`. */
export function copyFixtureProject(fixture: string): TempProject {
  const project = tempProject();
  cpSync(new URL(`../../fixtures/${fixture}/`, import.meta.url), project.dir, { recursive: true });
  return project;
}

/** A JSON tool definition; `runner` defaults to js-runner with `tool.js` as entry and `exec.js` declared. */
export function definition(fields: Record<string, unknown> & { id: string }): string {
  return JSON.stringify({
    description: `test tool ${fields.id}`,
    runner: 'js-runner',
    entry: 'tool.js',
    schema: { type: 'object' },
    permissions: ['exec.js'],
    ...fields,
  });
}

export const TRIVIAL_JS = 'export default async function run(input) { return input; }\n';

/** Opens an engine on a temp project: in memory, not watching, unless the options say otherwise. */
export function openEngine(project: TempProject, options: EngineOptions = {}): Promise<Engine> {
  return createEngine({ workspace: project.workspace, project: project.project, watch: false, persist: false, ...options });
}

/** Resolves with the next event on `channel` that `match` accepts; rejects after `ms` (a bound, not a timing assertion). */
export function nextEvent<K extends keyof EngineEventMap>(
  engine: Engine,
  channel: K,
  match: (event: EngineEventMap[K][0]) => boolean = () => true,
  ms = 5000,
): Promise<EngineEventMap[K][0]> {
  return new Promise((resolve, reject) => {
    const listener = (event: EngineEventMap[K][0]) => {
      if (!match(event)) return;
      clearTimeout(timer);
      engine.events.off(channel, listener as never);
      resolve(event);
    };
    const timer = setTimeout(() => {
      engine.events.off(channel, listener as never);
      reject(new Error(`no matching "${channel}" event within ${ms} ms`));
    }, ms);
    engine.events.on(channel, listener as never);
  });
}

/** Collects every event the engine emits, for assertions after a call. */
export function recordEvents(engine: Engine): Array<EngineEventMap['event'][0]> {
  const seen: Array<EngineEventMap['event'][0]> = [];
  engine.events.on('event', (event) => seen.push(event));
  return seen;
}

export type FakeBehaviour = (ctx: RunContext) => unknown;

/**
 * A Runner that stands in for the JS runner: each tool id maps to a behaviour. The dispatcher treats it
 * exactly like a real sandbox runner (deadline, cancellation, concurrency), which is what policy tests need.
 */
export class FakeRunner implements Runner {
  readonly name = 'js-runner' as const;
  readonly interruptible: boolean;
  readonly started: string[] = [];
  readonly contexts: RunContext[] = [];
  readonly #behaviours: Map<string, FakeBehaviour>;

  constructor(behaviours: Record<string, FakeBehaviour>, interruptible = true) {
    this.#behaviours = new Map(Object.entries(behaviours));
    this.interruptible = interruptible;
  }

  async run(ctx: RunContext): Promise<unknown> {
    this.started.push(ctx.tool.spec.id);
    this.contexts.push(ctx);
    const behaviour = this.#behaviours.get(ctx.tool.spec.id);
    if (!behaviour) throw new Error(`fake runner has no behaviour for ${ctx.tool.spec.id}`);
    return behaviour(ctx);
  }

  async status() {
    return { available: true };
  }

  async close(): Promise<void> {}
}

/** A promise with its resolve function, to hold a fake tool until the test lets it go. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Resolves when the signal aborts (a fake tool that runs until it is stopped). */
export function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
  });
}

/** Runs `fn` and returns the ToolFailure it throws (fails the test when it throws nothing or something else). */
export function failure(fn: () => unknown): ToolFailure {
  try {
    fn();
  } catch (error) {
    if (error instanceof ToolFailure) return error;
    throw error;
  }
  throw new Error('expected a ToolFailure, nothing was thrown');
}
