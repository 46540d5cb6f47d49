import MiniSearch from 'minisearch';
import type { Tool } from '../tool.js';

/**
 * A full-text index of tools (minisearch): over each tool's id, name, description and the property
 * names of its input schema, built once for a set of tools and queried many times. Ranking: the id
 * weighs most, then the name, the property names, the description; a query that is a tool's exact id
 * puts that tool first. Words are split at punctuation and at camelCase humps, so `word_freq`,
 * `word-freq` and `wordFreq` all find "word" and "freq".
 */

const BOOST = { id: 4, name: 2, props: 1.5, description: 1 } as const;
/**
 * A query word found in more than this share of the tools is left out when the query has rarer words:
 * it barely moves the ranking (its inverse document frequency is near nothing), while scoring every
 * tool that has it was most of a search's time (a word in each of 5,000 schemas: about 10 ms).
 */
const COMMON_SHARE = 0.5;
/** Words shorter than this are matched exactly or as a prefix, not fuzzily: fuzzy matching of short words finds noise and costs most. */
const FUZZY_FROM = 6;
/** How many property names of one schema are indexed: bounds the index of a hostile definition. */
const MAX_PROPS = 500;

interface Doc {
  id: string;
  name: string;
  description: string;
  props: string;
}

export interface SearchHit {
  tool: Tool;
  score: number;
}

export function tokenize(text: string): string[] {
  return text
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((word) => word.length > 0);
}

export class ToolIndex {
  readonly #search: MiniSearch<Doc>;
  readonly #byId: ReadonlyMap<string, Tool>;
  /** How many tools each word occurs in (any field). */
  readonly #frequency = new Map<string, number>();

  constructor(tools: readonly Tool[]) {
    this.#byId = new Map(tools.map((tool) => [tool.spec.id, tool]));
    this.#search = new MiniSearch<Doc>({
      fields: ['id', 'name', 'description', 'props'],
      tokenize,
      searchOptions: { boost: { ...BOOST }, prefix: true, fuzzy: (term) => (term.length >= FUZZY_FROM ? 0.2 : false) },
    });
    const docs = tools.map((tool) => ({
      id: tool.spec.id,
      name: tool.spec.name ?? '',
      description: tool.spec.description ?? '',
      props: propertyNames(tool.spec.schema).join(' '),
    }));
    for (const doc of docs) {
      for (const word of new Set(tokenize(`${doc.id} ${doc.name} ${doc.description} ${doc.props}`))) {
        this.#frequency.set(word, (this.#frequency.get(word) ?? 0) + 1);
      }
    }
    this.#search.addAll(docs);
  }

  get size(): number {
    return this.#byId.size;
  }

  /** The best `limit` tools for `query` among those `keep` accepts, best first (ties by id). */
  search(query: string, limit: number, keep: (tool: Tool) => boolean): SearchHit[] {
    const exact = this.#byId.get(query.trim().toLowerCase());
    const hits: SearchHit[] = [];
    if (exact && keep(exact)) hits.push({ tool: exact, score: Number.POSITIVE_INFINITY });
    const words = tokenize(query);
    const rare = words.filter((word) => (this.#frequency.get(word) ?? 0) <= this.#byId.size * COMMON_SHARE);
    const asked = rare.length > 0 && rare.length < words.length ? rare.join(' ') : query;
    // Best first; equal scores in the order the tools were given (the registry's), so a query always
    // gives the same list.
    const found = this.#search.search(asked, {
      filter: (result) => {
        const tool = this.#byId.get(result.id as string);
        return tool !== undefined && tool !== exact && keep(tool);
      },
    });
    for (const result of found) {
      if (hits.length >= limit) break;
      hits.push({ tool: this.#byId.get(result.id as string) as Tool, score: result.score });
    }
    return hits.slice(0, limit);
  }
}

/** The property names anywhere in a schema (nested objects, items, compositions, definitions), each once. */
export function propertyNames(schema: unknown): string[] {
  const names = new Set<string>();
  const seen = new Set<unknown>();
  const walk = (node: unknown, depth: number) => {
    if (node === null || typeof node !== 'object' || seen.has(node) || depth > 32 || names.size >= MAX_PROPS) return;
    seen.add(node);
    if (Array.isArray(node)) {
      for (const item of node) walk(item, depth + 1);
      return;
    }
    const record = node as Record<string, unknown>;
    const properties = record.properties;
    if (properties !== null && typeof properties === 'object' && !Array.isArray(properties)) {
      for (const [key, value] of Object.entries(properties)) {
        if (names.size >= MAX_PROPS) return;
        names.add(key);
        walk(value, depth + 1);
      }
    }
    for (const key of ['items', 'prefixItems', 'additionalProperties', 'anyOf', 'oneOf', 'allOf', '$defs', 'definitions']) {
      const value = record[key];
      if (key === '$defs' || key === 'definitions') {
        if (value !== null && typeof value === 'object') for (const inner of Object.values(value)) walk(inner, depth + 1);
      } else walk(value, depth + 1);
    }
  };
  walk(schema, 0);
  return [...names];
}
