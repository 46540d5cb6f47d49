import type { GrantSet } from '../permissions.js';
import type { Tool } from '../tool.js';
import { mayCall } from './callable.js';
import { type SearchHit, ToolIndex } from './search.js';

/**
 * The engine's tools as the code-mode builtins see them: one list and one search index per version
 * of the registry, made on first use after a change (`changed()`, from the registry's change event)
 * and shared by every call until the next, so a query never builds an index. A call works on the
 * version it took: a reload during a search does not change what that search sees.
 */
export class ToolCatalog {
  readonly #list: () => readonly Tool[];
  #current: CatalogVersion | null = null;

  constructor(list: () => readonly Tool[]) {
    this.#list = list;
  }

  /** The registry's tools changed: the next use takes them again. */
  changed(): void {
    this.#current = null;
  }

  /** The tools now, and their index. */
  current(): CatalogVersion {
    this.#current ??= new CatalogVersion(this.#list());
    return this.#current;
  }

  /** What one caller may reach: its grants, and the tools its surface offers. */
  forCaller(grants: GrantSet, offered: ((id: string) => boolean) | undefined): CallerTools {
    return new CallerTools(this.current(), grants, offered);
  }
}

/** One version of the registry's tools: by id, in the registry's order, and indexed when first searched. */
export class CatalogVersion {
  readonly tools: readonly Tool[];
  readonly byId: ReadonlyMap<string, Tool>;
  #index: ToolIndex | null = null;

  constructor(tools: readonly Tool[]) {
    this.tools = tools;
    this.byId = new Map(tools.map((tool) => [tool.spec.id, tool]));
  }

  get index(): ToolIndex {
    this.#index ??= new ToolIndex(this.tools);
    return this.#index;
  }
}

/** The tools one caller may call, by `callableTools`' rule, over one version of the catalog. */
export class CallerTools {
  readonly #version: CatalogVersion;
  readonly #grants: GrantSet;
  readonly #offered: ((id: string) => boolean) | undefined;
  readonly #keep: (tool: Tool) => boolean;

  constructor(version: CatalogVersion, grants: GrantSet, offered: ((id: string) => boolean) | undefined) {
    this.#version = version;
    this.#grants = grants;
    this.#offered = offered;
    this.#keep = (tool) => mayCall(tool, this.#grants, this.#offered);
  }

  /** Every callable tool, in the registry's order. */
  list(): Tool[] {
    return this.#version.tools.filter(this.#keep);
  }

  /** The callable tool with this id; undefined for one that is not, or not callable here (the two look alike). */
  get(id: string): Tool | undefined {
    const tool = this.#version.byId.get(id);
    return tool && this.#keep(tool) ? tool : undefined;
  }

  search(query: string, limit: number): SearchHit[] {
    return this.#version.index.search(query, limit, this.#keep);
  }

  /** The ids of every callable tool (for "did you mean"). */
  ids(): string[] {
    return this.list().map((tool) => tool.spec.id);
  }
}
