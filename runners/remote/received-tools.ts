import { basename, join } from 'node:path';
import { ToolFailure } from '../../src/errors.js';
import { type Permission, parsePermission } from '../../src/permissions.js';
import type { Tool, ToolSpec } from '../../src/tool.js';
import type { ToolCache } from './cache.js';
import type { CallMessage, TreeEntry } from './wire.js';

/** A request to the engine on the call's inbox (the worker's, which may send and receive in parts). */
export type Ask = (message: Record<string, unknown>) => Promise<Record<string, unknown>>;

/** Tools kept ready, by definition and tree: a warm call looks its tool up and touches no file. */
const MAX_TOOLS = 512;

/**
 * The tools a worker was sent, as `Tool`s its local runners take: the definition from the call, the
 * files from the cache, fetched from the engine (tree, then each file it lacks by sha256) the first
 * time a version is seen.
 */
export class ReceivedTools {
  readonly #cache: ToolCache;
  readonly #tools = new Map<string, Tool>();

  constructor(cache: ToolCache) {
    this.#cache = cache;
  }

  async tool(call: CallMessage, ask: Ask): Promise<Tool> {
    const spec = call.tool.spec as unknown as ToolSpec;
    // The definition's own hash names it; a worker that was sent a spec not matching it only fools itself.
    const key = `${String(call.tool.hash)}:${call.tool.tree}`;
    const known = this.#tools.get(key);
    if (known) return known;
    if (!this.#cache.hasTree(call.tool.tree)) {
      const answer = await ask({ t: 'tree' });
      const entries = (Array.isArray(answer.entries) ? answer.entries : []) as TreeEntry[];
      for (const [, sha] of entries) {
        if (!this.#cache.hasBlob(sha)) this.#cache.putBlob(sha, await fetchBlob(ask, sha));
      }
      this.#cache.putTree(call.tool.tree, entries);
    }
    const declared: Permission[] = [];
    for (const text of Array.isArray(spec.permissions) ? spec.permissions : []) {
      try {
        declared.push(parsePermission(text));
      } catch {
        // The engine checked the definition; a permission it knows and this version does not is not one to act on.
      }
    }
    const tool: Tool = {
      spec,
      source: String(call.tool.source),
      entryPath: call.tool.entry ? join(this.#cache.treeDir(call.tool.tree), call.tool.entry) : null,
      // One tools folder for every version: the runners' processes (and the JS sandbox's read
      // permissions) are made per tools folder, so a version is a folder below it, not one of its own.
      toolsDir: this.#cache.toolsDir,
      root: basename(this.#cache.treeDir(call.tool.tree)),
      declared,
      // The engine validated the input and checks the output; the runners never call these.
      validateInput: (() => null) as unknown as Tool['validateInput'],
      validateOutput: null,
      hash: key,
    };
    if (this.#tools.size >= MAX_TOOLS) this.#tools.delete(this.#tools.keys().next().value as string);
    this.#tools.set(key, tool);
    return tool;
  }
}

async function fetchBlob(ask: Ask, sha: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let got = 0;
  for (;;) {
    const answer = await ask({ t: 'blob', sha, offset: got });
    if (typeof answer.data !== 'string' || !Number.isSafeInteger(answer.size)) {
      throw new ToolFailure('transport', 'UNAVAILABLE', `The engine could not send a tool file: ${String(answer.error ?? 'no data')}`);
    }
    const part = Buffer.from(answer.data, 'base64');
    parts.push(part);
    got += part.length;
    if (got >= (answer.size as number) || part.length === 0) return Buffer.concat(parts);
  }
}
