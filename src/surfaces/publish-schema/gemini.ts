import { checkSchema, GEMINI_FIELDS, MAX_WALK_DEPTH } from '../vendor-rules.js';
import { brief, clone, hint, isNode, type Node, type Notes, own, pointerKey, put, Unpublishable } from './node.js';
import { normalize } from './normalize.js';
import { sayInstead } from './openai-strict.js';
import { mergeObject, stringList } from './top-level.js';

/** Gemini: local `$ref`s inlined, type lists as `nullable`, keywords Gemini's Schema lacks said in descriptions. */

// The fields Gemini's Schema has are written down once, with their sources, in vendor-rules.ts; of them,
// the examples, defaults and ordering hints are not copied into a published declaration.
export const GEMINI_KEPT: ReadonlySet<string> = new Set(
  [...GEMINI_FIELDS].filter((key) => !['example', 'default', 'propertyOrdering'].includes(key)),
);
export const GEMINI_FORMATS: Record<string, string[]> = { string: ['enum', 'date-time'], number: ['float', 'double'], integer: ['int32', 'int64'] };
export const GEMINI_SILENT = new Set([
  '$schema',
  '$id',
  '$comment',
  'default',
  'readOnly',
  'writeOnly',
  'deprecated',
  'contentEncoding',
  'contentMediaType',
  '$defs',
  'definitions',
  'then',
  'else',
]);

export class GeminiPass {
  constructor(
    private readonly notes: Notes,
    private readonly rootSchema: Node,
  ) {}

  root(root: Node): Node {
    return this.node(root, '', 0, []);
  }

  private resolve(ref: string, at: string): Node {
    const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
    const defs = match ? own(this.rootSchema, match[1] as string) : undefined;
    const name = match ? (match[2] as string).replace(/~1/g, '/').replace(/~0/g, '~') : '';
    const target = isNode(defs) ? own(defs, name) : undefined;
    if (!isNode(target))
      throw new Unpublishable(
        at,
        '$ref',
        `Gemini takes no $ref, and "${ref}" at ${at || '/'} is not a local definition that could be written out in its place`,
      );
    return target;
  }

  private node(value: unknown, at: string, depth: number, refs: string[]): Node {
    if (depth > MAX_WALK_DEPTH) throw new Unpublishable(at, 'depth', `nested more than ${MAX_WALK_DEPTH} levels deep`);
    if (!isNode(value)) throw new Unpublishable(at, 'type', `${at || '/'} accepts anything, which Gemini cannot say (every schema has a type)`);
    let node = value;
    const ref = own(node, '$ref');
    if (typeof ref === 'string') {
      if (refs.includes(ref))
        throw new Unpublishable(at, '$ref', `"${ref}" refers to itself (a recursive schema), which Gemini cannot say: Gemini takes no $ref`);
      const { $ref: _ref, ...siblings } = node;
      node = { ...clone(this.resolve(ref, at)), ...siblings };
      this.notes.add('local $ref written out in place (Gemini takes no $ref)');
      return this.node(node, at, depth + 1, [...refs, ref]);
    }
    node = normalize(node, this.notes);
    const out: Node = {};
    const hints: string[] = [];
    for (const [key, sub] of Object.entries(node)) {
      if (GEMINI_SILENT.has(key)) continue;
      if (GEMINI_KEPT.has(key) && key !== 'type' && key !== 'enum' && key !== 'format') {
        put(out, key, sub);
        continue;
      }
      if (key === 'type' || key === 'enum' || key === 'format' || key === 'const') continue; // below
      if (key === 'oneOf') {
        put(out, 'anyOf', sub);
        hints.push('exactly one of these');
        this.notes.add('oneOf published as anyOf (Gemini has no oneOf); Arium checks that exactly one matches');
        continue;
      }
      if (key === 'prefixItems')
        throw new Unpublishable(`${at}/prefixItems`, key, `${at || '/'} is a tuple (a schema per position), which Gemini cannot say`);
      if (key === 'examples' && Array.isArray(sub) && sub.length > 0) {
        put(out, 'example', sub[0]);
        continue;
      }
      if (key === 'allOf') {
        const list = Array.isArray(sub) ? sub : [];
        for (const [i, branch] of list.entries()) {
          if (!isNode(branch)) throw new Unpublishable(`${at}/allOf/${i}`, 'allOf', 'allOf of a non-schema');
          mergeObject(out, this.node(branch, `${at}/allOf/${i}`, depth + 1, refs), `${at}/allOf/${i}`, true);
          if (!Object.hasOwn(out, 'type')) put(out, 'type', 'object');
        }
        this.notes.add('allOf merged into one object (Gemini has no allOf)');
        continue;
      }
      if (
        key === 'additionalProperties' ||
        key === 'patternProperties' ||
        key === 'propertyNames' ||
        key === 'prefixItems' ||
        key.startsWith('unevaluated')
      ) {
        // Closed objects are what Gemini assumes; the engine refuses other keys.
        if (key === 'additionalProperties' && sub === false) continue;
        hints.push(`${key}: ${brief(sub)}`);
        this.notes.add(`"${key}" said in the description (Gemini has no such field); Arium checks it`);
        continue;
      }
      const said = sayInstead(node, key, sub);
      if (said === null) throw new Unpublishable(`${at}/${pointerKey(key)}`, key, `${at || '/'} uses "${key}", which Gemini's Schema cannot say`);
      if (said !== '') hints.push(said);
      this.notes.add(`"${key}" said in the description (Gemini has no such field); Arium checks it`);
    }
    this.types(node, out, hints, at);
    if (hints.length > 0) hint(out, hints.join('; '));
    const props = own(out, 'properties');
    if (isNode(props)) {
      const converted: Node = {};
      const required = new Set(stringList(own(out, 'required')));
      for (const [name, sub] of Object.entries(props)) {
        const where = `${at}/properties/${pointerKey(name)}`;
        let converted_: Node;
        try {
          converted_ = this.node(sub, where, depth + 1, refs);
          const problems = required.has(name) ? [] : checkSchema({ type: 'object', properties: { x: converted_ } }, 'gemini');
          if (problems.length > 0) throw new Unpublishable(where, problems[0]?.keyword ?? 'type', problems[0]?.message ?? '');
        } catch (error) {
          // An optional property Gemini cannot describe is left out of the declaration: the tool stays
          // usable without it, where refusing the whole tool would lose it all.
          if (!(error instanceof Unpublishable) || required.has(name)) throw error;
          this.notes.add(`optional property ${where} left out (${error.message}); it cannot be given through Gemini`);
          continue;
        }
        put(converted, name, converted_);
      }
      put(out, 'properties', converted);
      if (!Object.hasOwn(out, 'type')) put(out, 'type', 'object');
    }
    if (stringList(own(out, 'required')).length === 0) delete out.required;
    const items = own(out, 'items');
    if (items !== undefined) {
      if (Array.isArray(items))
        throw new Unpublishable(`${at}/items`, 'items', `${at || '/'} is a tuple (a list of item schemas), which Gemini cannot say`);
      put(out, 'items', this.node(items, `${at}/items`, depth + 1, refs));
    }
    const anyOf = own(out, 'anyOf');
    if (Array.isArray(anyOf))
      put(
        out,
        'anyOf',
        anyOf.map((sub, i) => this.node(sub, `${at}/anyOf/${i}`, depth + 1, refs)),
      );
    if (!Object.hasOwn(out, 'type') && !Object.hasOwn(out, 'anyOf')) {
      throw new Unpublishable(at, 'type', `${at || '/'} has no type: it accepts anything, which Gemini cannot say`);
    }
    return out;
  }

  /** type, enum, const and format: Gemini wants one type, nullable for null, string enums, its own formats. */
  private types(node: Node, out: Node, hints: string[], at: string): void {
    const raw = own(node, 'type');
    let types = raw === undefined ? [] : Array.isArray(raw) ? [...raw] : [raw];
    if (types.includes('null')) {
      put(out, 'nullable', true);
      types = types.filter((t) => t !== 'null');
      this.notes.add('"null" in a type list published as "nullable": true');
    }
    let values = own(node, 'enum');
    if (Object.hasOwn(node, 'const')) values = [own(node, 'const')];
    if (Array.isArray(values)) {
      if (values.includes(null)) put(out, 'nullable', true);
      const kept = values.filter((v) => v !== null);
      if (kept.length > 0 && kept.every((v) => typeof v === 'string') && types.every((t) => t === 'string')) {
        put(out, 'enum', kept);
        types = ['string'];
      } else {
        hints.push(`one of: ${kept.map((v) => JSON.stringify(v)).join(', ')}`);
        this.notes.add('an enum or const of values other than strings said in the description (Gemini takes string enums only); Arium checks it');
        if (types.length === 0) types = [...new Set(kept.map(jsonType))];
      }
    }
    if (types.length === 1) put(out, 'type', types[0]);
    else if (types.length > 1) {
      if (Object.hasOwn(out, 'anyOf'))
        throw new Unpublishable(at, 'type', `${at || '/'} has both a list of types and anyOf, which Gemini cannot say`);
      put(
        out,
        'anyOf',
        types.map((t) => ({ type: t })),
      );
      this.notes.add('a list of types published as anyOf');
    }
    const format = own(node, 'format');
    if (format !== undefined) {
      const type = own(out, 'type');
      if (typeof type === 'string' && typeof format === 'string' && GEMINI_FORMATS[type]?.includes(format)) put(out, 'format', format);
      else {
        hints.push(`format: ${format}`);
        this.notes.add('formats Gemini lacks said in the description; Arium checks them');
      }
    }
  }
}

export function jsonType(value: unknown): string {
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  if (Array.isArray(value)) return 'array';
  if (value !== null && typeof value === 'object') return 'object';
  return typeof value;
}
