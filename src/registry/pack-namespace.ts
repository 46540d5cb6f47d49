import type { RegistryProblem } from '../events.js';
import type { Tool } from '../tool.js';

/**
 * A pack's tools are `<pack>.<tool>`, and only its tools: a pack definition outside its namespace, or a
 * project definition inside a pack's, is a problem and is not served.
 */
export function namespaceProblem(tool: Tool, pack: string | undefined, packs: ReadonlySet<string>): RegistryProblem | null {
  const id = tool.spec.id;
  const namespace = id.includes('.') ? id.slice(0, id.indexOf('.')) : '';
  if (pack !== undefined && namespace !== pack) {
    return { file: tool.source, id, at: '/id', message: `a tool of pack "${pack}" must have an id "${pack}.<name>", not "${id}"` };
  }
  if (pack === undefined && (packs.has(namespace) || packs.has(id))) {
    const name = packs.has(namespace) ? namespace : id;
    return { file: tool.source, id, at: '/id', message: `the id "${id}" is in the namespace of pack "${name}" (packs/${name}); choose another id` };
  }
  return null;
}
