import { checkSchema, MAX_WALK_DEPTH, OPENAI_STRICT_FORMATS, type RuleBreak, type SchemaTarget } from './vendor-rules.js';

/**
 * A tool's input schema in the shape a model API takes (src/surfaces/vendor-rules.ts says which).
 * Only what is published changes: the engine validates every call against the tool's own schema, so a
 * constraint left out here (said in the description instead) is still enforced, and nothing is loosened.
 *
 * Every target: a top-level `oneOf`/`anyOf` of objects becomes one object with the union of their
 * properties, the properties all of them require, and the alternatives in the description; a top-level
 * `allOf` is merged; a top-level `not`, `enum` or `const` is left to the engine.
 * OpenAI strict: every property required, the optional ones nullable; `minLength`, `maxLength`,
 * `uniqueItems`, `minProperties`, `maxProperties` and formats strict mode lacks go into the description;
 * `oneOf` becomes `anyOf`; an object whose keys are an enum (`propertyNames: {enum}`) gets one property
 * per key. Gemini: local `$ref`s inlined, type lists become `nullable`, `const` and non-string enums go
 * into the description (string ones become enums), `oneOf` becomes `anyOf`, `allOf` of objects merged,
 * keywords Gemini's Schema lacks dropped with what they say put into the description.
 */
export interface PublishedSchema {
  /**
   * The schema to publish; null when the target cannot take it (then `problems` says why), or, for
   * Gemini with no problems, when the tool has no parameters (declared without `parameters`).
   */
  schema: Record<string, unknown> | null;
  /** What was changed, one line per kind of change. */
  rewrites: string[];
  /** The rules the tool's schema breaks for this target that no rewrite answers. */
  problems: RuleBreak[];
  /** OpenAI strict: the paths of the properties made nullable (`*` for array items); a null there is dropped again. */
  nullable: string[][];
}

type Node = Record<string, unknown>;
const isNode = (value: unknown): value is Node => value !== null && typeof value === 'object' && !Array.isArray(value);
const own = (node: Node, key: string): unknown => (Object.hasOwn(node, key) ? node[key] : undefined);
/** Sets an own property whatever its name: `__proto__` from a definition is a property like any other. */
function put(node: Node, key: string, value: unknown): void {
  Object.defineProperty(node, key, { value, enumerable: true, writable: true, configurable: true });
}
const pointerKey = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');
/** A deep copy; JSON.parse makes `__proto__` an own property, never a prototype. */
const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;
const brief = (value: unknown) => {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
};

class Unpublishable extends Error {
  constructor(
    readonly pointer: string,
    readonly keyword: string,
    message: string,
  ) {
    super(message);
  }
}

/** Collects the changes made, and the hints added to descriptions. */
class Notes {
  readonly lines = new Set<string>();
  add(line: string): void {
    this.lines.add(line);
  }
}

function hint(node: Node, text: string): void {
  const description = own(node, 'description');
  put(node, 'description', typeof description === 'string' && description !== '' ? `${description} (${text})` : text);
}

export function publishSchema(schema: unknown, target: SchemaTarget): PublishedSchema {
  const notes = new Notes();
  const nullable: string[][] = [];
  let result: Node;
  try {
    if (!isNode(schema) || own(schema, 'type') !== 'object')
      throw new Unpublishable('', 'type', 'the root must be an object schema ("type": "object")');
    const deep = tooDeep(schema, '', 0);
    if (deep !== null)
      throw new Unpublishable(deep, 'depth', `nested more than ${MAX_WALK_DEPTH} levels deep; no model API takes a schema this deep`);
    result = flattenRoot(clone(schema), notes);
    if (target === 'openai-strict') result = new StrictPass(notes, nullable).object(result);
    if (target === 'gemini') {
      result = new GeminiPass(notes, result).root(result);
      const props = own(result, 'properties');
      if (!isNode(props) || Object.keys(props).length === 0) {
        notes.add('no parameters: declared without "parameters", as Gemini wants');
        return { schema: null, rewrites: [...notes.lines], problems: [], nullable };
      }
    }
  } catch (error) {
    if (!(error instanceof Unpublishable)) throw error;
    return {
      schema: null,
      rewrites: [],
      problems: [{ target, pointer: error.pointer || '/', keyword: error.keyword, message: error.message }],
      nullable: [],
    };
  }
  const problems = checkSchema(result, target);
  if (problems.length > 0) return { schema: null, rewrites: [], problems, nullable: [] };
  return { schema: result, rewrites: [...notes.lines], problems: [], nullable };
}

/**
 * Where `value` nests past MAX_WALK_DEPTH schemas, if it does (a schema level is two levels of JSON:
 * a keyword's map or list, then the schema); never recurses deeper, so a hostile schema cannot
 * exhaust the stack of the walks and copies that follow.
 */
function tooDeep(value: unknown, at: string, depth: number): string | null {
  if (value === null || typeof value !== 'object') return null;
  if (depth > 2 * MAX_WALK_DEPTH) return at || '/';
  for (const [key, sub] of Object.entries(value)) {
    const found = tooDeep(sub, `${at}/${pointerKey(key)}`, depth + 1);
    if (found !== null) return found;
  }
  return null;
}

// --- The top level, for every target ---------------------------------------------------------------

function flattenRoot(root: Node, notes: Notes): Node {
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

function branches(list: unknown, keyword: string): Node[] {
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

function stringList(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function addRequired(node: Node, names: string[]): void {
  const required = new Set(stringList(own(node, 'required')));
  for (const name of names) required.add(name);
  if (required.size > 0) put(node, 'required', [...required]);
}

/** The properties of `branch` into `root` (a property both have differently becomes anyOf of the two). */
function mergeObject(root: Node, branch: Node, at: string, requireAll: boolean): void {
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

// --- OpenAI strict -----------------------------------------------------------------------------------

/** Annotations strict mode does not take and that say nothing the engine needs the model to know. */
const DROPPED_ANNOTATIONS = new Set([
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
function sayInstead(node: Node, key: string, value: unknown): string | null {
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

class StrictPass {
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

const STRICT_KEPT = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'enum',
  'const',
  'anyOf',
  'description',
  'title',
  '$defs',
  'definitions',
  '$ref',
  'pattern',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
  '$schema',
]);

function makeNullable(schema: Node): Node {
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

/**
 * An object whose keys are an enum (`propertyNames: {enum}`) and whose values one schema
 * (`additionalProperties`) is, exactly, an object with one optional property per key.
 */
function expandKeyEnum(node: Node, notes: Notes): Node {
  const names = own(node, 'propertyNames');
  const values = own(node, 'additionalProperties');
  if (
    !isNode(names) ||
    !Array.isArray(own(names, 'enum')) ||
    !isNode(values) ||
    Object.hasOwn(node, 'properties') ||
    Object.hasOwn(node, 'patternProperties')
  )
    return node;
  const keys = (own(names, 'enum') as unknown[]).filter((k): k is string => typeof k === 'string');
  const out: Node = {};
  for (const [key, value] of Object.entries(node)) if (key !== 'propertyNames' && key !== 'additionalProperties') put(out, key, value);
  const props: Node = {};
  for (const key of keys) put(props, key, clone(values));
  put(out, 'properties', props);
  put(out, 'additionalProperties', false);
  notes.add('an object whose keys are an enum (propertyNames) published with one property per key');
  return out;
}

/**
 * Equivalent forms a vendor takes: `unevaluatedProperties: false` on an object that combines no other
 * schema is `additionalProperties: false`; a tuple whose item schemas and rest schema are all the
 * same is an array of that schema.
 */
function normalize(node: Node, notes: Notes): Node {
  let out = expandKeyEnum(node, notes);
  const applies = ['allOf', 'anyOf', 'oneOf', '$ref', 'if', 'dependentSchemas'].some((k) => Object.hasOwn(out, k));
  if (own(out, 'unevaluatedProperties') === false && !applies && own(out, 'additionalProperties') === undefined) {
    out = without(out, 'unevaluatedProperties');
    put(out, 'additionalProperties', false);
  }
  const tuple = Array.isArray(own(out, 'prefixItems')) ? 'prefixItems' : Array.isArray(own(out, 'items')) ? 'items' : null;
  if (tuple) {
    const rest = tuple === 'prefixItems' ? own(out, 'items') : own(out, 'additionalItems');
    const entries = own(out, tuple) as unknown[];
    if (isNode(rest) && entries.every((e) => JSON.stringify(e) === JSON.stringify(rest))) {
      out = without(without(out, 'prefixItems'), 'additionalItems');
      put(out, 'items', rest);
      notes.add('a tuple whose items all have one schema published as an array of it');
    }
  }
  return out;
}

function without(node: Node, key: string): Node {
  const out: Node = {};
  for (const [k, v] of Object.entries(node)) if (k !== key) put(out, k, v);
  return out;
}

// --- Gemini ------------------------------------------------------------------------------------------

const GEMINI_KEPT = new Set([
  'type',
  'format',
  'title',
  'description',
  'nullable',
  'enum',
  'maxItems',
  'minItems',
  'properties',
  'required',
  'minProperties',
  'maxProperties',
  'minLength',
  'maxLength',
  'pattern',
  'anyOf',
  'items',
  'minimum',
  'maximum',
]);
const GEMINI_FORMATS: Record<string, string[]> = { string: ['enum', 'date-time'], number: ['float', 'double'], integer: ['int32', 'int64'] };
const GEMINI_SILENT = new Set([
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

class GeminiPass {
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

function jsonType(value: unknown): string {
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  if (Array.isArray(value)) return 'array';
  if (value !== null && typeof value === 'object') return 'object';
  return typeof value;
}

/** For a tool whose schema breaks the rules of `target`: one line naming the keyword, where, and why. */
export function describeBreak(b: RuleBreak): string {
  return `${b.keyword} at ${b.pointer}: ${b.message}`;
}
