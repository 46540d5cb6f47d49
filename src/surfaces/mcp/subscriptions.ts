import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

interface Node {
  readonly children: Map<string, Node>;
  readonly uris: Set<string>;
}

const node = (): Node => ({ children: new Map(), uris: new Set() });

/**
 * One MCP session's resource subscriptions, kept as a tree of VFS path segments. A change finds the
 * subscriptions it concerns by walking its own path (those at it and above it) and the part of the tree
 * below it, so what a write costs depends on its path and on what it notifies, not on how many other
 * paths this session, or any other, has subscribed to. A scan of every subscription per change made
 * each write wait on 20,000 subscriptions held by an idle session.
 */
export class Subscriptions {
  readonly #root = node();
  readonly #paths = new Map<string, string[]>();
  #examined = 0;

  constructor(readonly max: number) {}

  /** Subscriptions held. */
  get size(): number {
    return this.#paths.size;
  }

  /** Subscriptions looked at by every change so far: the work changes have cost this session. */
  get examined(): number {
    return this.#examined;
  }

  add(uri: string, path: string): void {
    if (this.#paths.has(uri)) return;
    if (this.#paths.size >= this.max) {
      throw new McpError(
        ErrorCode.InvalidRequest,
        `This session already holds ${this.max} subscriptions, the most it may (mcp_subscriptions): unsubscribe from one, subscribe to a folder above several, or open another session`,
        { limit: this.max },
      );
    }
    const segments = segmentsOf(path);
    let at = this.#root;
    for (const segment of segments) {
      let next = at.children.get(segment);
      if (!next) {
        next = node();
        at.children.set(segment, next);
      }
      at = next;
    }
    at.uris.add(uri);
    this.#paths.set(uri, segments);
  }

  delete(uri: string): void {
    const segments = this.#paths.get(uri);
    if (!segments) return;
    this.#paths.delete(uri);
    const trail: Node[] = [this.#root];
    for (const segment of segments) trail.push((trail.at(-1) as Node).children.get(segment) as Node);
    (trail.at(-1) as Node).uris.delete(uri);
    // Folders nothing is subscribed at or under go, so the tree stays the size of what is subscribed.
    for (let i = segments.length; i > 0; i--) {
      const at = trail[i] as Node;
      if (at.uris.size > 0 || at.children.size > 0) break;
      (trail[i - 1] as Node).children.delete(segments[i - 1] as string);
    }
  }

  /** The subscribed URIs whose path is one of `changed`, a folder above one, or below one. */
  affected(changed: Iterable<string>): Set<string> {
    const found = new Set<string>();
    const take = (at: Node) => {
      this.#examined += at.uris.size;
      for (const uri of at.uris) found.add(uri);
    };
    for (const path of changed) {
      let at: Node | undefined = this.#root;
      take(at);
      for (const segment of segmentsOf(path)) {
        at = at.children.get(segment);
        if (!at) break;
        take(at);
      }
      if (!at) continue;
      const below = [...at.children.values()];
      for (let next = below.pop(); next; next = below.pop()) {
        take(next);
        below.push(...next.children.values());
      }
    }
    return found;
  }
}

/** `/a/b/` and `/a//b` are `/a/b`, as the VFS reads them. */
function segmentsOf(path: string): string[] {
  return path.split('/').filter((segment) => segment !== '');
}
