import { MAX_WALK_DEPTH, OPENAI_STRICT_FORMATS, OPENAI_STRICT_KEYWORDS } from '../vendor-rules.js';
import { brief, clone, hint, isNode, type Node, type Notes, own, pointerKey, put, Unpublishable } from './node.js';
import { normalize } from './normalize.js';
import { stringList } from './top-level.js';

/** OpenAI strict mode: every property required, the optional ones nullable, what strict mode lacks said in descriptions. */

/** Annotations strict mode does not take and that say nothing the engine needs the model to know. */
export const DROPPED_ANNOTATIONS = new Set([
  'default',
  'examples',
  '$comment',
  '$id',
  'readOnly',
  'writeOnly',
  'deprecated',
  'contentEncoding',
  'contentMediaType',
]);

/** Narrowing keywords a description can say instead; the engine checks them. */
export function sayInstead(node: Node, key: string, value: unknown): string | null {
  switch (key) {
    case 'minLength':
      return Object.hasOwn(node, 'maxLength')
        ? `${value} to ${own(node, 'maxLength')} characters`
        : `at least ${value} character${value === 1 ? '' : 's'}`;
    case 'maxLength':
      return Object.hasOwn(node, 'minLength') ? '' : `at most ${value} characters`;
    case 'uniqueItems':
      return value === true ? 'no duplicates' : '';
    case 'minProperties':
      return `at least ${value} keys`;
    case 'maxProperties':
      return `at most ${value} keys`;
    case 'format':
      return `format: ${value}`;
    case 'exclusiveMinimum':
      return `greater than ${value}`;
    case 'exclusiveMaximum':
      return `less than ${value}`;
    case 'multipleOf':
      return `a multiple of ${value}`;
    case 'not':
      return `not ${brief(value)}`;
    case 'minContains':
    case 'maxContains':
    case 'contains':
      return `${key}: ${brief(value)}`;
    case 'dependentRequired':
      return `when one key is given, these are also needed: ${brief(value)}`;
    case 'if':
      return `if ${brief(value)} then ${brief(own(node, 'then') ?? {})}${Object.hasOwn(node, 'else') ? ` else ${brief(own(node, 'else'))}` : ''}`;
    case 'then':
    case 'else':
      return '';
    default:
      return null;
  }
}

export class StrictPass {
  constructor(
    private readonly notes: Notes,
    private readonly nullable: string[][],
  ) {}

  object(root: Node): Node {
    return this.node(root, [], '', 0);
  }

  /** `path`: where in the input this value sits (null inside $defs, whose nulls are not tracked). */
  private node(value: unknown, path: string[] | null, at: string, depth: number): Node {
    if (depth > MAX_WALK_DEPTH) throw new Unpublishable(at, 'depth', `nested more than ${MAX_WALK_DEPTH} levels deep`);
    if (!isNode(value)) throw new Unpublishable(at, 'type', `${at || '/'} accepts anything, which OpenAI strict mode cannot say`);
    const node = normalize(value, this.notes);
    if (Array.isArray(own(node, 'items')) || Object.hasOwn(node, 'prefixItems')) {
      throw new Unpublishable(`${at}/items`, 'items', `${at || '/'} is a tuple (a schema per position), which OpenAI strict mode cannot say`);
    }
    const out: Node = {};
    const hints: string[] = [];
    for (const [key, sub] of Object.entries(node)) {
      if (DROPPED_ANNOTATIONS.has(key)) continue;
      if (key === 'format' && typeof sub === 'string' && OPENAI_STRICT_FORMATS.has(sub)) {
        put(out, key, sub);
        continue;
      }
      if (key === 'oneOf') {
        put(out, 'anyOf', sub);
        hints.push('exactly one of these');
        this.notes.add('oneOf published as anyOf (strict mode has no oneOf); Arium checks that exactly one matches');
        continue;
      }
      const said = key === 'format' || !STRICT_KEPT.has(key) ? sayInstead(node, key, sub) : null;
      if (said !== null) {
        if (said !== '') hints.push(said);
        this.notes.add(`"${key}" said in the description (strict mode does not take it); Arium checks it`);
        continue;
      }
      if (key === 'propertyNames' || key === 'patternProperties') {
        throw new Unpublishable(
          `${at}/${pointerKey(key)}`,
          key,
          `${at || '/'} takes keys of any name (a map, "${key}"), which OpenAI strict mode cannot say: it needs every key listed in "properties"`,
        );
      }
      if (!STRICT_KEPT.has(key))
        throw new Unpublishable(`${at}/${pointerKey(key)}`, key, `${at || '/'} uses "${key}", which OpenAI strict mode cannot say`);
      put(out, key, sub);
    }
    if (hints.length > 0) hint(out, hints.join('; '));
    const type = own(out, 'type');
    const isObject = type === 'object' || (Array.isArray(type) && type.includes('object')) || Object.hasOwn(out, 'properties');
    if (
      !isObject &&
      !Object.hasOwn(out, 'type') &&
      !Object.hasOwn(out, 'anyOf') &&
      !Object.hasOwn(out, '$ref') &&
      !Object.hasOwn(out, 'enum') &&
      !Object.hasOwn(out, 'const')
    ) {
      throw new Unpublishable(at, 'type', `${at || '/'} has no type: it accepts anything, which OpenAI strict mode cannot say`);
    }
    if (isObject) {
      const extra = own(out, 'additionalProperties');
      if (extra !== undefined && extra !== false) {
        throw new Unpublishable(
          `${at}/additionalProperties`,
          'additionalProperties',
          `${at || '/'} takes keys of any name (a map), which OpenAI strict mode cannot say: list the keys as properties`,
        );
      }
      const props = isNode(own(out, 'properties')) ? (own(out, 'properties') as Node) : {};
      const required = new Set(stringList(own(out, 'required')));
      const converted: Node = {};
      for (const [name, sub] of Object.entries(props)) {
        const subPath = path === null ? null : [...path, name];
        let schema = this.node(sub, subPath, `${at}/properties/${pointerKey(name)}`, depth + 1);
        if (!required.has(name)) {
          schema = makeNullable(schema);
          if (subPath) this.nullable.push(subPath);
          this.notes.add('optional properties made required and nullable; a null from the model is dropped, so the default applies');
        }
        put(converted, name, schema);
      }
      put(out, 'properties', converted);
      put(out, 'required', Object.keys(converted));
      put(out, 'additionalProperties', false);
    }
    const items = own(out, 'items');
    if (items !== undefined) put(out, 'items', this.node(items, path === null ? null : [...path, '*'], `${at}/items`, depth + 1));
    const anyOf = own(out, 'anyOf');
    if (Array.isArray(anyOf))
      put(
        out,
        'anyOf',
        anyOf.map((sub, i) => this.node(sub, path, `${at}/anyOf/${i}`, depth + 1)),
      );
    for (const defs of ['$defs', 'definitions']) {
      const value = own(out, defs);
      if (!isNode(value)) continue;
      const converted: Node = {};
      for (const [name, sub] of Object.entries(value)) put(converted, name, this.node(sub, null, `${at}/${defs}/${pointerKey(name)}`, depth + 1));
      put(out, defs, converted);
    }
    return out;
  }
}

// The keywords strict mode takes are written down once, with their source, in vendor-rules.ts; `format`
// among them is said in the description instead (above), so it never reaches the copy.
export const STRICT_KEPT: ReadonlySet<string> = OPENAI_STRICT_KEYWORDS;

export function makeNullable(schema: Node): Node {
  const type = own(schema, 'type');
  const values = own(schema, 'enum');
  if (typeof type === 'string' || Array.isArray(type)) {
    const types = Array.isArray(type) ? type : [type];
    const out: Node = { ...clone(schema) };
    put(out, 'type', types.includes('null') ? types : [...types, 'null']);
    if (Array.isArray(values) && !values.includes(null)) put(out, 'enum', [...values, null]);
    return out;
  }
  return { anyOf: [schema, { type: 'null' }] };
}
