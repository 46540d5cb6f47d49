// Over 500 lines: one served set changed by the tools folder, the packs and the providers (below).
/**
 * The registry of served tools. One class on purpose: the folder scan, its watchers and the providers'
 * tools all change one served set and announce one kind of change, and each reads the others' state
 * (a scan relinks macros over provided tools; a provider's change asks for a scan); split, every part
 * would reach into the others' fields. What does not need that state lives beside it: load.ts (one
 * definition), changes.ts (the difference between two served sets), meta-schema.ts.
 */
import { readdir, realpath, stat } from 'node:fs/promises';
import { basename, join, sep } from 'node:path';
import type { FSWatcher } from 'chokidar';
import type { RegistryChangeEvent, RegistryProblem, SecurityEvent } from '../events.js';
import type { RegistryLimits } from '../limits.js';
import { loadablePacks, PACKS_FOLDER } from '../packs/load.js';
import { LOCK_FILE } from '../packs/lock.js';
import { GrantSet } from '../permissions.js';
import type { CodeProblem } from '../runner.js';
import type { RunnerCatalog } from '../runner-catalog.js';
import type { Tool } from '../tool.js';
import { type ToolChanges, toolChanges, unchanged } from './changes.js';
import { isDefinitionFile, type LoadOutcome, loadDefinition } from './load.js';
import { namespaceProblem } from './pack-namespace.js';

/** chokidar, loaded by the first engine that watches: a host that never watches (the CLI) does not pay for it. */
let chokidar: Promise<typeof import('chokidar')> | null = null;
const loadChokidar = () => {
  chokidar ??= import('chokidar');
  return chokidar;
};

/** chokidar 4 emits at most one "change" per path in this window (`_throttle('change', path, 50)`). */
const CHOKIDAR_CHANGE_THROTTLE_MS = 50;

interface FileState {
  /** mtime, size and inode: a change in any of them means the file must be read again. */
  fingerprint: string;
  outcome: LoadOutcome;
  /** The last version of this file that loaded cleanly, served while the file is broken. */
  lastGood: Tool | null;
}

export interface RegistryOptions {
  /** The project folder, resolved with realpath. */
  projectDir: string;
  /**
   * Where the tools folder is (`<project>/tools`), as given: it may not exist yet, or be a link. Each
   * scan resolves it with realpath, so a folder made (or a link pointed elsewhere) while the engine
   * runs is picked up.
   */
  toolsPath: string;
  builtins: readonly Tool[];
  /** The runners definitions may name (their extensions and permissions). */
  catalog: RunnerCatalog;
  limits: RegistryLimits;
  onChange: (event: RegistryChangeEvent) => void;
  /** The versions of tools that were just removed or replaced (called before `onChange`): runners drop what they cached. */
  onRetired?: (tools: Tool[]) => void;
  /** Quiet time after a file event before the folder is read again. */
  debounceMs?: number;
  /** Looks for syntax errors in a served tool's code (its runner's `check`); what it finds is a problem. */
  checkCode?: (tool: Tool) => Promise<CodeProblem | null>;
  /**
   * What to do when a reloaded definition declares permissions the version it replaces did not cover:
   * `allow` serves it (default), `refuse` keeps the approved version until the engine restarts. Either
   * way `onSecurity` hears of it.
   */
  widening?: PermissionWidening;
  onSecurity?: (event: SecurityEvent) => void;
  /** The names of the project's providers: a definition may not take an id in one's namespace (`<provider>.…`). */
  providers?: readonly string[];
}

export type PermissionWidening = 'allow' | 'refuse';

/** The permissions of `next` that `approved` does not cover (a changed scope that is not narrower counts). */
export function widenedPermissions(approved: readonly string[], next: readonly string[]): string[] {
  const base = new GrantSet(approved);
  return next.filter((text) => base.narrow([text]).permissions.length === 0);
}

/**
 * Builtin tools plus the tools defined in a project's `tools/*.json` and `tools/*.yaml` (`.yml`). The whole folder is re-read on any
 * change (only files whose fingerprint changed are parsed again), so the outcome never depends on the
 * order or the coalescing of watcher events: files are taken in name order and the first file to
 * define an id owns it, unless another file is serving that id already (then that one keeps it).
 */
export class Registry {
  readonly #options: RegistryOptions;
  readonly #builtins = new Map<string, Tool>();
  readonly #files = new Map<string, FileState>();
  #tools = new Map<string, Tool>();
  #problems: RegistryProblem[] = [];
  /** The tools of each provider (src/providers/host.ts puts them here), by provider name, then id. */
  readonly #provided = new Map<string, Map<string, Tool>>();
  readonly #providedProblems = new Map<string, RegistryProblem[]>();
  /** The tools folder as the last scan resolved it; null when there is none. */
  #toolsDir: string | null = null;
  /** Watches the tools folder's files, from `watch()` on, while there is a tools folder. */
  #watcher: FSWatcher | null = null;
  /** The folder #watcher watches. */
  #watchedDir: string | null = null;
  /** Watches the project folder for the tools folder itself, from `watch()` on. */
  #projectWatcher: FSWatcher | null = null;
  #watching = false;
  /** Moves of #watcher, one after the other (a scan and `watch()` may ask at once). */
  #watcherMoves: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | null = null;
  #settle: NodeJS.Timeout | null = null;
  #settleForce = false;
  #scanning: Promise<void> | null = null;
  #rescanRequested = false;
  #forceReload = false;
  #closed = false;
  /**
   * The permissions last approved for each id: those of the version first served, then of each
   * version served since (with `refuse`, only versions that did not widen). Kept after a tool is
   * removed, so removing a file and adding it back wider is a widening too.
   */
  readonly #approved = new Map<string, readonly string[]>();
  /** Versions already reported as refused (by hash), so a rescan does not report one twice. */
  readonly #refusedReported = new Set<string>();
  #initialScanDone = false;
  /** The folders of packs/ as the last scan found them: each is a namespace no other definition may use. */
  #packNames = new Set<string>();
  /** Watches packs/ and arium-lock.json, from `watch()` on. */
  #packsWatcher: FSWatcher | null = null;

  constructor(options: RegistryOptions) {
    this.#options = options;
    for (const tool of options.builtins) this.#builtins.set(tool.spec.id, tool);
  }

  get builtinIds(): ReadonlySet<string> {
    return new Set(this.#builtins.keys());
  }

  get(id: string): Tool | undefined {
    return this.#builtins.get(id) ?? this.#providedTool(id) ?? this.#tools.get(id);
  }

  #providedTool(id: string): Tool | undefined {
    const dot = id.indexOf('.');
    return dot > 0 ? this.#provided.get(id.slice(0, dot))?.get(id) : undefined;
  }

  /** Builtins first, then providers' tools, then project tools, each group sorted by id. */
  list(): Tool[] {
    const byId = (a: Tool, b: Tool) => (a.spec.id < b.spec.id ? -1 : 1);
    const provided = [...this.#provided.values()].flatMap((tools) => [...tools.values()]);
    return [...[...this.#builtins.values()].sort(byId), ...provided.sort(byId), ...[...this.#tools.values()].sort(byId)];
  }

  problems(): RegistryProblem[] {
    return [...this.#problems, ...[...this.#providedProblems.values()].flat()].map((p) => ({ ...p }));
  }

  /**
   * Serves a provider's tools as they are now, in place of those it offered before, and reports the
   * difference as a registry change (which the surfaces turn into list_changed).
   */
  setProvided(provider: string, tools: readonly Tool[], problems: readonly RegistryProblem[]): void {
    if (this.#closed) return;
    const next = new Map(tools.map((tool) => [tool.spec.id, tool] as const));
    const changes = toolChanges(this.#provided.get(provider) ?? new Map<string, Tool>(), next);
    const problemsChanged = JSON.stringify(problems) !== JSON.stringify(this.#providedProblems.get(provider) ?? []);
    this.#provided.set(provider, next);
    this.#providedProblems.set(
      provider,
      problems.map((p) => ({ ...p })),
    );
    if (unchanged(changes) && !problemsChanged) return;
    // Macros name tools by id: one whose step a provider now offers, or no longer offers, is linked again.
    if (changes.added.length + changes.removed.length > 0 && this.#initialScanDone) void this.refresh().catch(() => {});
    this.#announce(changes);
  }

  /** Reads the tools folder now; resolves when the registry reflects it. */
  async refresh(): Promise<void> {
    if (this.#scanning) {
      // A scan is under way and may have read the folder before this change: ask it to go round again.
      this.#rescanRequested = true;
      return this.#scanning;
    }
    this.#scanning = this.#scanLoop().finally(() => {
      this.#scanning = null;
    });
    await this.#scanning;
  }

  async #scanLoop(): Promise<void> {
    do {
      this.#rescanRequested = false;
      await this.#scan();
      await this.#watchToolsDir();
    } while (this.#rescanRequested && !this.#closed);
  }

  /**
   * Watches for changes from now on: the tools folder's files, and the project folder for the tools
   * folder itself (made, removed or replaced while the engine runs).
   */
  async watch(): Promise<void> {
    if (this.#watching || this.#closed) return;
    this.#watching = true;
    const { watch } = await loadChokidar();
    if (this.#closed) return;
    const { projectDir, toolsPath } = this.#options;
    const project = watch(projectDir, {
      ignoreInitial: true,
      depth: 0,
      // Only the tools entry matters here; its contents are the tools watcher's.
      ignored: (path: string) => path !== projectDir && path !== toolsPath,
    });
    const changed = () => this.#schedule(true);
    project.on('addDir', changed).on('unlinkDir', changed).on('add', changed).on('unlink', changed);
    project.on('error', changed);
    this.#projectWatcher = project;
    await new Promise<void>((resolve) => project.once('ready', () => resolve()));
    await this.#watchPacks();
    await this.#watchToolsDir();
  }

  /** Watches packs/ (every file of every pack, since each is hashed at load) and arium-lock.json. */
  async #watchPacks(): Promise<void> {
    const { watch } = await loadChokidar();
    if (this.#closed) return;
    const { projectDir } = this.#options;
    const packsDir = join(projectDir, PACKS_FOLDER);
    const lockFile = join(projectDir, LOCK_FILE);
    const packs = watch(projectDir, {
      ignoreInitial: true,
      depth: 12,
      ignored: (path: string) => {
        if (path === projectDir || path === lockFile || path === packsDir) return false;
        if (!path.startsWith(packsDir + sep)) return true;
        // Dependencies installed into a pack are not its content.
        return /[/\\](\.arium|node_modules)([/\\]|$)/.test(path.slice(packsDir.length));
      },
    });
    const changed = () => this.#schedule(true);
    for (const event of ['add', 'change', 'unlink', 'addDir', 'unlinkDir', 'error'] as const) packs.on(event, changed);
    this.#packsWatcher = packs;
    await new Promise<void>((resolve) => packs.once('ready', () => resolve()));
  }

  /** Keeps the tools watcher on the folder the last scan resolved (none when there is no folder). */
  #watchToolsDir(): Promise<void> {
    this.#watcherMoves = this.#watcherMoves
      .then(() => this.#moveWatcher())
      .catch(() => {
        // Could not watch the folder now: the next scan tries again.
        this.#watchedDir = null;
      });
    return this.#watcherMoves;
  }

  async #moveWatcher(): Promise<void> {
    const dir = this.#toolsDir;
    if (!this.#watching || this.#closed || dir === this.#watchedDir) return;
    const old = this.#watcher;
    this.#watcher = null;
    this.#watchedDir = dir;
    await old?.close();
    if (!dir) return;
    const { watch } = await loadChokidar();
    const watcher = watch(dir, {
      ignoreInitial: true,
      depth: 8,
      // Skip editor swap files and hidden folders; everything else may be a definition or tool code.
      ignored: (path: string) => /(^|[/\\])(\.[^/\\]+|node_modules|__pycache__)$/.test(path) && path !== dir,
    });
    const schedule = (path: string) => this.#schedule(!isDefinitionFile(basename(path)));
    watcher.on('add', schedule).on('change', schedule).on('unlink', schedule).on('addDir', schedule).on('unlinkDir', schedule);
    watcher.on('error', () => this.#schedule(true));
    this.#watcher = watcher;
    await new Promise<void>((resolve) => watcher.once('ready', () => resolve()));
    // Files added while the watcher got ready were not reported: one more pass finds them.
    this.#schedule(false);
  }

  /** `force`: tool code (not a definition) changed, so every definition is read again. */
  #schedule(force: boolean): void {
    if (this.#closed) return;
    if (force) {
      this.#forceReload = true;
      this.#settleForce = true;
    }
    const debounce = this.#options.debounceMs ?? 40;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.refresh().catch(() => {});
    }, debounce);
    // chokidar drops a second "change" of one path within 50 ms of the first (its change throttle) and
    // never emits it later, so a file finished right after it was first seen (a save in two writes, the
    // half-written case) stayed stale until its next edit. One more pass once that window is over picks
    // such a change up; files that did not change cost one stat each.
    if (this.#settle) clearTimeout(this.#settle);
    this.#settle = setTimeout(() => {
      this.#settle = null;
      if (this.#settleForce) this.#forceReload = true;
      this.#settleForce = false;
      this.refresh().catch(() => {});
    }, CHOKIDAR_CHANGE_THROTTLE_MS + debounce);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#settle) clearTimeout(this.#settle);
    await this.#scanning;
    await this.#watcherMoves;
    await Promise.all([this.#watcher?.close(), this.#projectWatcher?.close(), this.#packsWatcher?.close()]);
    this.#watcher = null;
    this.#packsWatcher = null;
    this.#projectWatcher = null;
  }

  async #scan(): Promise<void> {
    const { projectDir, limits } = this.#options;
    const problems: RegistryProblem[] = [];
    const seen = new Set<string>();
    const toolsDir = await this.#resolveToolsDir(problems);
    this.#toolsDir = toolsDir;
    const folders: { dir: string; pack?: string }[] = toolsDir ? [{ dir: toolsDir }] : [];
    const packs = await loadablePacks(projectDir);
    problems.push(...packs.problems);
    this.#packNames = new Set(packs.names);
    for (const pack of packs.packs) folders.push({ dir: pack.toolsDir, pack: pack.name });
    // Definition files of every folder, each folder's in name order (the project's tools first).
    const files: { file: string; dir: string; pack?: string }[] = [];
    for (const folder of folders) {
      const shown = folder.pack ? `packs/${folder.pack}/tools` : 'tools';
      try {
        const entries = await readdir(folder.dir, { withFileTypes: true });
        for (const e of entries.filter((e) => isDefinitionFile(e.name)).sort((a, b) => (a.name < b.name ? -1 : 1))) {
          if (!e.isFile()) problems.push({ file: `${shown}/${e.name}`, message: 'a tool definition must be a regular file, not a link or folder' });
          else files.push({ file: join(folder.dir, e.name), dir: folder.dir, ...(folder.pack ? { pack: folder.pack } : {}) });
        }
      } catch (error) {
        // A pack without a tools folder serves no tools (it may hold only skills).
        if (!folder.pack || (error as NodeJS.ErrnoException).code !== 'ENOENT') {
          problems.push({ file: `${shown}/`, message: `the tools folder could not be read: ${(error as Error).message}` });
        }
      }
    }
    const force = this.#forceReload;
    this.#forceReload = false;
    await Promise.all(
      files.map(async ({ file, dir }) => {
        seen.add(file);
        let fingerprint: string;
        try {
          const st = await stat(file);
          fingerprint = `${st.mtimeMs}:${st.size}:${st.ino}`;
        } catch {
          seen.delete(file);
          return;
        }
        const previous = this.#files.get(file);
        if (previous && previous.fingerprint === fingerprint && !force) return;
        const ctx = { projectDir, toolsDir: dir, limits, reserved: this.builtinIds, catalog: this.#options.catalog };
        const outcome = await loadDefinition(file, ctx);
        this.#files.set(file, { fingerprint, outcome, lastGood: outcome.tool ?? previous?.lastGood ?? null });
      }),
    );
    for (const file of [...this.#files.keys()]) if (!seen.has(file)) this.#files.delete(file);

    // Every file's tool (or the last version of it that loaded), in name order, by id.
    const candidates = new Map<string, Tool[]>();
    for (const { file, pack } of files) {
      const state = this.#files.get(file);
      if (!state) continue;
      let tool = state.outcome.tool;
      if (state.outcome.problem) {
        const stale = state.lastGood !== null;
        problems.push(
          stale
            ? { ...state.outcome.problem, stale: true, message: `${state.outcome.problem.message} (still serving the last version that loaded)` }
            : state.outcome.problem,
        );
        tool = state.lastGood ?? undefined;
      }
      if (!tool) continue;
      const problem = namespaceProblem(tool, pack, this.#packNames);
      if (problem) {
        problems.push(problem);
        continue;
      }
      const list = candidates.get(tool.spec.id);
      if (list) list.push(tool);
      else candidates.set(tool.spec.id, [tool]);
    }
    const next = new Map<string, Tool>();
    const namespaces = new Set(this.#options.providers ?? []);
    for (const [id, list] of candidates) {
      const namespace = id.slice(0, Math.max(0, id.indexOf('.')));
      if (namespaces.has(namespace)) {
        for (const tool of list) {
          problems.push({
            file: tool.source,
            id,
            at: '/id',
            message: `the id "${id}" is in the namespace of provider "${namespace}" (arium.json providers); choose another id`,
          });
        }
        continue;
      }
      // A file that is serving an id keeps it: a file added later never takes it over, whatever its name.
      // Among files that are all new to the id, the first in name order wins.
      const serving = this.#tools.get(id)?.source;
      const owner = list.find((t) => t.source === serving) ?? (list[0] as Tool);
      for (const tool of list) {
        if (tool === owner) continue;
        const why = owner.source === serving ? 'the file already serving it keeps it' : 'the first file (in name order) wins';
        problems.push({ file: tool.source, id, at: '/id', message: `duplicate id "${id}": already defined by ${owner.source}; ${why}` });
      }
      if (next.size >= limits.max_tools) {
        problems.push({ file: owner.source, id, message: `the project already has ${limits.max_tools} tools, the most one project may define` });
        continue;
      }
      const served = this.#checkWidening(owner, problems);
      if (served) next.set(id, served);
    }
    this.#initialScanDone = true;
    this.#link(next, problems);
    const check = this.#options.checkCode;
    if (check) {
      // The tool is still served (a call reports the same error, in full); the problem says it early.
      const found = await Promise.all([...next.values()].map(async (tool) => [tool, await check(tool).catch(() => null)] as const));
      for (const [tool, code] of found) {
        if (code)
          problems.push({
            // The tool's own tools folder: tools/ of the project, or packs/<name>/tools.
            file: `${tool.source.slice(0, tool.source.lastIndexOf('/'))}/${code.file}`,
            id: tool.spec.id,
            at: `${code.line}:${code.column}`,
            message: code.kind === 'import' ? `import problem: ${code.message}` : `syntax error: ${code.message}`,
          });
      }
    }
    this.#publish(next, problems);
  }

  /**
   * Checks what each tool says of other tools (a macro's steps, through its runner's `link`) once all
   * are read, and stops serving a tool with a problem; then, until nothing changes, the tools that call
   * one no longer served. The first round sees every tool, so both macros of a cycle report it.
   */
  #link(next: Map<string, Tool>, problems: RegistryProblem[]): void {
    const { catalog } = this.#options;
    const dropped = new Set<string>();
    const lookup = (id: string) => this.#builtins.get(id) ?? this.#providedTool(id) ?? next.get(id) ?? (dropped.has(id) ? null : undefined);
    let round = [...next.values()];
    while (round.length > 0) {
      const broken: Tool[] = [];
      for (const tool of round) {
        const found = catalog.get(tool.spec.runner)?.link?.(tool, lookup) ?? [];
        for (const p of found) problems.push({ file: tool.source, id: tool.spec.id, at: p.at, message: p.message });
        if (found.length > 0) broken.push(tool);
      }
      for (const tool of broken) {
        next.delete(tool.spec.id);
        dropped.add(tool.spec.id);
      }
      round = broken.length > 0 ? [...next.values()] : [];
    }
  }

  /**
   * The version of an id to serve, given the one the files now define: that one, unless it widens the
   * approved permissions and the project refuses widening (then the version served until now, or none).
   */
  #checkWidening(tool: Tool, problems: RegistryProblem[]): Tool | null {
    const id = tool.spec.id;
    const now = tool.spec.permissions ?? [];
    const approved = this.#approved.get(id);
    const added = approved && this.#initialScanDone ? widenedPermissions(approved, now) : [];
    if (added.length === 0) {
      this.#approved.set(id, now);
      return tool;
    }
    const previous = approved as readonly string[];
    const refuse = this.#options.widening === 'refuse';
    const current = this.#tools.get(id);
    const keep = refuse && current && widenedPermissions(previous, current.spec.permissions ?? []).length === 0 ? current : null;
    if (refuse) {
      problems.push({
        file: tool.source,
        id,
        at: '/permissions',
        message: `this version asks for ${added.join(', ')} beyond the approved ${JSON.stringify(previous)}, and the project refuses widening while it runs ("permission_widening": "refuse"): restart the engine to apply it${keep ? ' (still serving the approved version)' : ''}`,
        ...(keep ? { stale: true } : {}),
      });
    }
    const report = !refuse || !this.#refusedReported.has(tool.hash);
    if (refuse) this.#refusedReported.add(tool.hash);
    else this.#approved.set(id, now);
    if (report) {
      this.#options.onSecurity?.({
        type: 'SecurityEvent',
        at: new Date().toISOString(),
        run_id: null,
        trace_id: null,
        tool: id,
        action: refuse ? 'widening_refused' : 'widened',
        permission: added[0] as string,
        operation: `reload ${tool.source}`,
        reason: refuse
          ? `${tool.source} was changed to ask for ${added.join(', ')}; refused until the engine restarts`
          : `${tool.source} was changed to ask for ${added.join(', ')}; served from the next call`,
        previous_permissions: [...previous],
        permissions: [...now],
        added_permissions: added,
      });
    }
    return refuse ? keep : tool;
  }

  /** The tools folder's real path; null (no tools, no problem) when the project has none. */
  async #resolveToolsDir(problems: RegistryProblem[]): Promise<string | null> {
    try {
      const real = await realpath(this.#options.toolsPath);
      if ((await stat(real)).isDirectory()) return real;
      problems.push({ file: 'tools', message: 'tools is not a folder: tool definitions go in a folder named tools in the project' });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') {
        problems.push({ file: 'tools/', message: `the tools folder could not be read: ${(error as Error).message}` });
      }
    }
    return null;
  }

  #publish(next: Map<string, Tool>, problems: RegistryProblem[]): void {
    const changes = toolChanges(this.#tools, next);
    const retired = [...changes.updated, ...changes.removed].map((id) => this.#tools.get(id)).filter((tool): tool is Tool => tool !== undefined);
    const problemsChanged = JSON.stringify(problems) !== JSON.stringify(this.#problems);
    this.#tools = next;
    this.#problems = problems;
    if (unchanged(changes) && !problemsChanged) return;
    if (retired.length > 0) this.#options.onRetired?.(retired);
    this.#announce(changes);
  }

  #announce({ added, updated, removed }: ToolChanges): void {
    this.#options.onChange({
      type: 'RegistryChangeEvent',
      at: new Date().toISOString(),
      run_id: null,
      trace_id: null,
      added: added.sort(),
      updated: updated.sort(),
      removed: removed.sort(),
      problems: this.problems(),
    });
  }
}
