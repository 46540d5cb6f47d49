import { stat } from 'node:fs/promises';
import { dirname, sep } from 'node:path';
import type { FSWatcher } from 'chokidar';
import type { RegistryProblem, SkillsChangeEvent } from '../events.js';
import type { SKILL_LIMITS } from '../limits.js';
import { linkSkills } from './link.js';
import type { Skill } from './skill.js';

export interface SkillSetOptions {
  /** The project's skills folder (`<project>/skills`), which may not exist yet. */
  dir: string;
  /** How the folder is named in problems. */
  shown: string;
  /** Whether a tool id is served now (the registry's lookup). */
  toolExists: (id: string) => boolean;
  onChange: (event: SkillsChangeEvent) => void;
  limits?: typeof SKILL_LIMITS;
  max_depth?: number;
  debounceMs?: number;
}

/**
 * The skills a project serves: its folder read (by `readSkills`, loaded with the first folder that
 * exists, so a project without skills does not load the YAML reader), each skill's tools checked
 * against the registry, watched for changes. A skill whose file breaks keeps serving its last version
 * that loaded, as a tool does, with the problem marked stale. Each skill is an immutable object
 * swapped whole, so a reader during a change gets one version or the other, never a mix.
 */
export class SkillSet {
  readonly #options: SkillSetOptions;
  #read: Skill[] = [];
  #readProblems: RegistryProblem[] = [];
  #served = new Map<string, Skill>();
  #problems: RegistryProblem[] = [];
  readonly #lastGood = new Map<string, Skill>();
  #watcher: FSWatcher | null = null;
  #timer: NodeJS.Timeout | null = null;
  #scanning: Promise<void> | null = null;
  #again = false;
  #closed = false;

  constructor(options: SkillSetOptions) {
    this.#options = options;
  }

  list(): Skill[] {
    return [...this.#served.values()];
  }

  get(name: string): Skill | undefined {
    return this.#served.get(name);
  }

  problems(): RegistryProblem[] {
    return this.#problems.map((p) => ({ ...p }));
  }

  /** Reads the folder again; resolves when the set reflects it. */
  async refresh(): Promise<void> {
    if (this.#scanning) {
      this.#again = true;
      return this.#scanning;
    }
    this.#scanning = (async () => {
      do {
        this.#again = false;
        await this.#scan();
      } while (this.#again && !this.#closed);
    })().finally(() => {
      this.#scanning = null;
    });
    return this.#scanning;
  }

  /** Checks the skills' tools again (the registry changed); reads nothing. */
  relink(): void {
    this.#publish();
  }

  async #scan(): Promise<void> {
    const { dir, shown } = this.#options;
    const exists = await stat(dir).then(
      (s) => s.isDirectory(),
      () => false,
    );
    if (!exists) {
      this.#read = [];
      this.#readProblems = [];
      this.#publish();
      return;
    }
    const { readSkills } = await import('./load.js');
    const { entries, problems } = await readSkills(dir, {
      shown,
      ...(this.#options.limits ? { limits: this.#options.limits } : {}),
      ...(this.#options.max_depth ? { max_depth: this.#options.max_depth } : {}),
    });
    const skills: Skill[] = [];
    for (const entry of entries) {
      if (entry.skill) {
        this.#lastGood.set(entry.file, entry.skill);
        skills.push(entry.skill);
        continue;
      }
      const last = this.#lastGood.get(entry.file);
      if (last) {
        problems.push({ ...entry.problem, stale: true, message: `${entry.problem.message} (still serving the last version that loaded)` });
        skills.push(last);
      } else problems.push(entry.problem);
    }
    const files = new Set(entries.map((e) => e.file));
    for (const file of [...this.#lastGood.keys()]) if (!files.has(file)) this.#lastGood.delete(file);
    this.#read = skills;
    this.#readProblems = problems;
    this.#publish();
  }

  #publish(): void {
    if (this.#closed) return;
    const { served, problems } = linkSkills(this.#read, this.#options.toolExists);
    const next = new Map(served.map((s) => [s.name, s] as const));
    const all = [...this.#readProblems, ...problems];
    const added: string[] = [];
    const updated: string[] = [];
    const removed: string[] = [];
    for (const [name, skill] of next) {
      const old = this.#served.get(name);
      if (!old) added.push(name);
      else if (old.hash !== skill.hash) updated.push(name);
    }
    for (const name of this.#served.keys()) if (!next.has(name)) removed.push(name);
    const problemsChanged = JSON.stringify(all) !== JSON.stringify(this.#problems);
    this.#served = next;
    this.#problems = all;
    if (added.length + updated.length + removed.length === 0 && !problemsChanged) return;
    this.#options.onChange({
      type: 'SkillsChangeEvent',
      at: new Date().toISOString(),
      run_id: null,
      trace_id: null,
      added: added.sort(),
      updated: updated.sort(),
      removed: removed.sort(),
      problems: this.problems(),
    });
  }

  /** Watches the folder (made, removed or edited while the engine runs) from now on. */
  async watch(): Promise<void> {
    if (this.#watcher || this.#closed) return;
    const { watch } = await import('chokidar');
    if (this.#closed) return;
    const { dir } = this.#options;
    // The folder's parent is watched, for the skills folder only: the folder may be made (or removed)
    // while the engine runs, and a watcher of a missing path hears nothing of it.
    const parent = dirname(dir);
    const watcher = watch(parent, {
      ignoreInitial: true,
      depth: 3,
      ignored: (path: string) => path !== parent && path !== dir && !path.startsWith(`${dir}${sep}`),
    });
    const changed = () => this.#schedule();
    watcher.on('all', changed).on('error', changed);
    this.#watcher = watcher;
    await new Promise<void>((resolve) => watcher.once('ready', () => resolve()));
    this.#schedule();
  }

  #schedule(): void {
    if (this.#closed) return;
    if (this.#timer) clearTimeout(this.#timer);
    // One pass after the quiet time, and one after chokidar's 50 ms change throttle (see the registry's #schedule).
    const debounce = this.#options.debounceMs ?? 40;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.refresh()
        .then(() => new Promise((resolve) => setTimeout(resolve, 60)))
        .then(() => this.refresh())
        .catch(() => {});
    }, debounce);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#scanning;
    await this.#watcher?.close();
    this.#watcher = null;
  }
}
