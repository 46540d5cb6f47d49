import { MAX_WALK_DEPTH } from '../vendor-rules.js';
import { brief, hint, isNode, type Node, type Notes, own, pointerKey, put, Unpublishable } from './node.js';

/** The top level, for every target: `allOf`, `oneOf` and `anyOf` of objects merged into one object. */

/**
 * Where `value` nests past MAX_WALK_DEPTH schemas, if it does (a schema level is two levels of JSON:
 * a keyword's map or list, then the schema); never recurses deeper, so a hostile schema cannot
 * exhaust the stack of the walks and copies that follow.
 */
export function tooDeep(value: unknown, at: string, depth: number): string | null {
  if (value === null || typeof value !== 'object') return null;
  if (depth > 2 * MAX_WALK_DEPTH) return at || '/';
  for (const [key, sub] of Object.entries(value)) {
    const found = tooDeep(sub, `${at}/${pointerKey(key)}`, depth + 1);
    if (found !== null) return found;
  }
  return null;
}

export function flattenRoot(root: Node, notes: Notes): Node {
  const allOf = own(root, 'allOf');
  if (allOf !== undefined) {
    for (const [i, branch] of branches(allOf, 'allOf').entries()) mergeObject(root, branch, `/allOf/${i}`, true);
    delete root.allOf;
    notes.add('top-level allOf merged into one object');
  }
  for (const keyword of ['oneOf', 'anyOf'] as const) {
    const list = own(root, keyword);
    if (list === undefined) continue;
    const alternatives = branches(list, keyword);
    let common: Set<string> | null = null;
    const said: string[] = [];
    for (const [i, branch] of alternatives.entries()) {
      mergeObject(root, branch, `/${keyword}/${i}`, false);
      const required = stringList(own(branch, 'required'));
      common = common === null ? new Set(required) : new Set(required.filter((name) => (common as Set<string>).has(name)));
      const props = own(branch, 'properties');
      const names = required.length > 0 ? required : isNode(props) ? Object.keys(props) : [];
      said.push(names.length > 0 ? names.map((n) => `"${n}"`).join(' and ') : brief(branch));
    }
    addRequired(root, [...(common ?? [])]);
    delete root[keyword];
    hint(root, `give ${keyword === 'oneOf' ? 'exactly one' : 'at least one'} of: ${said.join('; ')}`);
    notes.add(`top-level ${keyword} merged into one object; the alternatives are in the description, and Arium checks them`);
  }
  for (const keyword of ['not', 'enum', 'const']) {
    if (!Object.hasOwn(root, keyword)) continue;
    delete root[keyword];
    notes.add(`top-level ${keyword} left out; Arium checks it`);
  }
  return root;
}

export function branches(list: unknown, keyword: string): Node[] {
  if (!Array.isArray(list)) throw new Unpublishable('', keyword, `"${keyword}" must be a list of schemas`);
  return list.map((branch, i) => {
    const type = isNode(branch) ? own(branch, 'type') : undefined;
    if (!isNode(branch) || (type !== undefined && type !== 'object')) {
      throw new Unpublishable(
        `/${keyword}/${i}`,
        keyword,
        `a top-level ${keyword} can be published only when each alternative is an object; /${keyword}/${i} is not`,
      );
    }
    return branch;
  });
}

export function stringList(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

export function addRequired(node: Node, names: string[]): void {
  const required = new Set(stringList(own(node, 'required')));
  for (const name of names) required.add(name);
  if (required.size > 0) put(node, 'required', [...required]);
}

/** The properties of `branch` into `root` (a property both have differently becomes anyOf of the two). */
export function mergeObject(root: Node, branch: Node, at: string, requireAll: boolean): void {
  const props = own(branch, 'properties');
  if (isNode(props)) {
    const target = isNode(own(root, 'properties')) ? (own(root, 'properties') as Node) : {};
    for (const [name, sub] of Object.entries(props)) {
      const existing = own(target, name);
      put(target, name, existing === undefined || JSON.stringify(existing) === JSON.stringify(sub) ? sub : { anyOf: [existing, sub] });
    }
    put(root, 'properties', target);
  }
  if (requireAll) addRequired(root, stringList(own(branch, 'required')));
  for (const key of Object.keys(branch)) {
    if (!['type', 'properties', 'required', 'additionalProperties', 'description', 'title'].includes(key)) {
      throw new Unpublishable(`${at}/${pointerKey(key)}`, key, `the alternative at ${at} uses "${key}", which cannot be merged into one object`);
    }
  }
}
