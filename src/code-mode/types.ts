import { ToolFailure } from '../errors.js';
import { DISCOVERY_LIMITS } from '../limits.js';
import { jsPath } from './names.js';

/**
 * TypeScript declarations for the tools a program may call: `declare const tools: { fs: { read(input:
 * …): Promise<…> } … }`, one property per id part (names.ts), a tool whose id is a prefix of another's
 * being a function with properties. Input and output types come from the tools' JSON Schemas: objects
 * (required or optional properties; `additionalProperties` as an index signature when it is `true` or
 * a schema), arrays and tuples, `enum`, `const`, `oneOf`/`anyOf` as unions, `allOf` as an intersection,
 * `nullable`, and `$ref` within the same schema (a type alias in `namespace ToolTypes`, so recursive
 * schemas stay recursive). What TypeScript cannot say (`not`, a `$ref` to another document, a circular
 * alias, nesting past `schema_depth`) is `unknown` with a comment saying why. Descriptions become doc
 * comments. Tools and properties come in a fixed order (ids sorted, properties as written), so the
 * same tools give the same text.
 */

export interface TypedTool {
  id: string;
  description?: string;
  schema: unknown;
  output_schema?: unknown;
}

type Schema = Record<string, unknown>;

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** The declarations text of `tools`; throws OUTPUT_LIMIT past `maxBytes`. */
export function typeDeclarations(tools: readonly TypedTool[], maxBytes: number = DISCOVERY_LIMITS.types_bytes): string {
  const sorted = [...tools].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const aliases: string[] = [];
  const root = new PathNode();
  for (const tool of sorted) {
    let node = root;
    for (const part of jsPath(tool.id)) {
      let next = node.children.get(part);
      if (!next) {
        next = new PathNode();
        node.children.set(part, next);
      }
      node = next;
    }
    const prefix = jsPath(tool.id)
      .map((part) => part.replace(/^[a-z_$]/, (c) => c.toUpperCase()))
      .join('_');
    const input = new SchemaTypes(tool.schema, `${prefix}_input`, aliases).root();
    const output = tool.output_schema === undefined ? 'unknown' : new SchemaTypes(tool.output_schema, `${prefix}_output`, aliases).root();
    node.tool = { id: tool.id, description: tool.description ?? '', input, output };
  }
  const lines = [
    '// The tools this program may call, generated from their JSON Schemas: `await tools.<path>(input)`.',
    '// Each call runs the tool through the engine (validation, permissions, events), as a call from outside would.',
  ];
  if (aliases.length > 0) lines.push('declare namespace ToolTypes {', ...aliases.map((a) => indent(a, 1)), '}');
  lines.push(`declare const tools: ${objectOf(root, 0)};`, '');
  const text = lines.join('\n');
  const bytes = Buffer.byteLength(text);
  if (bytes > maxBytes) {
    throw new ToolFailure(
      'execution',
      'OUTPUT_LIMIT',
      `The declarations of the ${tools.length} callable tools are ${bytes} bytes, over the limit of ${maxBytes} (DISCOVERY_LIMITS.types_bytes): offer fewer tools to this surface (its profile's "tools"), or look tools up with tools.search and tools.describe`,
      { details: { bytes, limit_bytes: maxBytes, tools: tools.length } },
    );
  }
  return text;
}

class PathNode {
  tool: { id: string; description: string; input: string; output: string } | null = null;
  readonly children = new Map<string, PathNode>();
}

function objectOf(node: PathNode, depth: number): string {
  const members: string[] = [];
  if (node.tool)
    members.push(`${docComment(node.tool.description, `\`${node.tool.id}\``)}(input: ${node.tool.input}): Promise<${node.tool.output}>;`);
  for (const [name, child] of node.children) {
    if (child.children.size === 0 && child.tool) {
      const tool = child.tool;
      members.push(`${docComment(tool.description, `\`${tool.id}\``)}${name}(input: ${tool.input}): Promise<${tool.output}>;`);
    } else {
      members.push(`${child.tool ? docComment(child.tool.description, `\`${child.tool.id}\``) : ''}${name}: ${objectOf(child, depth + 1)};`);
    }
  }
  if (members.length === 0) return '{}';
  return `{\n${members.map((m) => indent(m, 1)).join('\n')}\n}`;
}

function indent(text: string, levels: number): string {
  const pad = '  '.repeat(levels);
  return text
    .split('\n')
    .map((line) => (line.length > 0 ? pad + line : line))
    .join('\n');
}

/** Text made safe inside a block comment: nothing in it can end the comment. */
function commentText(text: string): string {
  return text.replace(/\*\//g, '*\\/').replace(/\r\n?/g, '\n');
}

/** A `/** … *\/` doc comment and a newline; empty when there is nothing to say. */
function docComment(description: string, tag?: string): string {
  const parts = [description.trim(), tag ?? ''].filter((p) => p.length > 0);
  if (parts.length === 0) return '';
  const body = commentText(parts.join('\n\n'));
  const lines = body.split('\n');
  if (lines.length === 1) return `/** ${lines[0]} */\n`;
  return `/**\n${lines.map((l) => ` * ${l}`.trimEnd()).join('\n')}\n */\n`;
}

function unknownBecause(why: string): string {
  return `unknown /* ${commentText(why)} */`;
}

function isSchema(value: unknown): value is Schema {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A JSON value as a literal type (const, enum members). */
function literal(value: unknown, depth = 0): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return stringLiteral(value);
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number') return Number.isFinite(value) ? (value < 0 ? `(${value})` : String(value)) : 'number';
  if (depth > 8) return 'unknown';
  if (Array.isArray(value)) return `readonly [${value.map((v) => literal(v, depth + 1)).join(', ')}]`;
  if (isSchema(value)) {
    const entries = Object.entries(value).map(([k, v]) => `${propertyKey(k)}: ${literal(v, depth + 1)}`);
    return entries.length === 0 ? '{}' : `{ ${entries.join('; ')} }`;
  }
  return 'unknown';
}

function propertyKey(key: string): string {
  return IDENTIFIER.test(key) ? key : stringLiteral(key);
}

/** A string as a TypeScript string literal (JSON's, with the line separators JSON leaves raw escaped too). */
function stringLiteral(text: string): string {
  return JSON.stringify(text)
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

function primitiveOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'unknown[]';
  if (typeof value === 'object') return 'Record<string, unknown>';
  return typeof value === 'number' ? 'number' : typeof value === 'string' ? 'string' : typeof value === 'boolean' ? 'boolean' : 'unknown';
}

function union(members: string[]): string {
  const unique = [...new Set(members)];
  if (unique.includes('unknown')) return 'unknown';
  if (unique.length === 0) return 'never';
  return unique.length === 1 ? (unique[0] as string) : unique.map((m) => (m.includes('=>') ? `(${m})` : m)).join(' | ');
}

/**
 * The types of one schema document (a tool's input or output): its `$ref`s within the document become
 * aliases named after the tool and the order they are met in, added to `aliases`.
 */
class SchemaTypes {
  readonly #doc: unknown;
  readonly #prefix: string;
  readonly #aliases: string[];
  /** Alias name by JSON pointer ('' is the document). */
  readonly #named = new Map<string, string>();
  /** Pointers each pointer's schema reaches through $ref, anyOf, oneOf and allOf alone (no object or array between). */
  readonly #bare = new Map<string, string[]>();

  constructor(doc: unknown, prefix: string, aliases: string[]) {
    this.#doc = doc;
    this.#prefix = prefix;
    this.#aliases = aliases;
  }

  root(): string {
    return this.#type(this.#doc, 0, '');
  }

  /** `schema`'s type; `alias` is the pointer of the alias whose body this is, while no object or array has been entered. */
  #type(schema: unknown, depth: number, alias: string | null): string {
    if (schema === true || (isSchema(schema) && Object.keys(schema).length === 0)) return 'unknown';
    if (schema === false) return 'never';
    if (!isSchema(schema)) return unknownBecause('not a schema');
    if (depth > DISCOVERY_LIMITS.schema_depth) return unknownBecause(`nested deeper than ${DISCOVERY_LIMITS.schema_depth}`);
    const parts: string[] = [];
    if (typeof schema.$ref === 'string') parts.push(this.#ref(schema.$ref, alias));
    if ('const' in schema) parts.push(literal(schema.const));
    else if (Array.isArray(schema.enum)) parts.push(this.#enum(schema.enum));
    else {
      const own = this.#own(schema, depth);
      if (own !== null) parts.push(own);
    }
    for (const key of ['oneOf', 'anyOf'] as const) {
      const members = schema[key];
      if (!Array.isArray(members)) continue;
      const types = members.map((m) => this.#type(m, depth + 1, alias));
      // Members that only add constraints (`{ required: [...] }`) say nothing of the type.
      const typed = types.filter((t) => t !== 'unknown');
      if (typed.length === types.length) parts.push(`(${union(types)})`);
    }
    if (Array.isArray(schema.allOf)) {
      for (const member of schema.allOf) {
        const t = this.#type(member, depth + 1, alias);
        if (t !== 'unknown') parts.push(`(${t})`);
      }
    }
    let type = parts.length === 0 ? (isSchema(schema.not) ? unknownBecause('"not" has no TypeScript type') : 'unknown') : parts.join(' & ');
    if (schema.nullable === true && type !== 'unknown') type = `${parts.length > 1 ? `(${type})` : type} | null`;
    return type;
  }

  /** The type `type` and the keywords of its kind give, or null when the schema names none. */
  #own(schema: Schema, depth: number): string | null {
    let kinds: unknown[] | null = null;
    if (typeof schema.type === 'string') kinds = [schema.type];
    else if (Array.isArray(schema.type)) kinds = schema.type;
    // `required` alone names no type: `oneOf: [{ required: ["a"] }, …]` only constrains the object around it.
    else if (isSchema(schema.properties) || schema.additionalProperties !== undefined) kinds = ['object'];
    else if (schema.items !== undefined || Array.isArray(schema.prefixItems)) kinds = ['array'];
    if (kinds === null) return null;
    return union(kinds.map((kind) => this.#kind(kind, schema, depth)));
  }

  #kind(kind: unknown, schema: Schema, depth: number): string {
    switch (kind) {
      case 'string':
        return 'string';
      case 'number':
      case 'integer':
        return 'number';
      case 'boolean':
        return 'boolean';
      case 'null':
        return 'null';
      case 'array':
        return this.#array(schema, depth);
      case 'object':
        return this.#object(schema, depth);
      default:
        return unknownBecause(`unknown type ${JSON.stringify(kind)}`);
    }
  }

  #enum(members: unknown[]): string {
    if (members.length > DISCOVERY_LIMITS.enum_members) {
      return `${union(members.map(primitiveOf))} /* one of ${members.length} values: too many to list (DISCOVERY_LIMITS.enum_members) */`;
    }
    return union(members.map((m) => literal(m)));
  }

  #array(schema: Schema, depth: number): string {
    if (Array.isArray(schema.prefixItems)) {
      const fixed = schema.prefixItems.map((item) => this.#type(item, depth + 1, null));
      const rest = schema.items === false ? '' : `, ...${wrap(this.#type(schema.items ?? true, depth + 1, null))}[]`;
      return `[${fixed.join(', ')}${rest}]`;
    }
    if (Array.isArray(schema.items)) {
      // Draft 4-7 tuples: `items` a list, `additionalItems` the rest.
      const fixed = schema.items.map((item) => this.#type(item, depth + 1, null));
      const rest = schema.additionalItems === false ? '' : `, ...${wrap(this.#type(schema.additionalItems ?? true, depth + 1, null))}[]`;
      return `[${fixed.join(', ')}${rest}]`;
    }
    return `${wrap(this.#type(schema.items ?? true, depth + 1, null))}[]`;
  }

  #object(schema: Schema, depth: number): string {
    const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === 'string') : []);
    const members: string[] = [];
    const properties = isSchema(schema.properties) ? schema.properties : {};
    for (const [key, value] of Object.entries(properties)) {
      const description = isSchema(value) && typeof value.description === 'string' ? value.description : '';
      members.push(`${docComment(description)}${propertyKey(key)}${required.has(key) ? '' : '?'}: ${this.#type(value, depth + 1, null)};`);
    }
    const extra = schema.additionalProperties;
    if (extra === true || (isSchema(extra) && Object.keys(properties).length > 0)) {
      // An index signature must admit every named property's type too: with named ones, any value.
      members.push('[key: string]: unknown;');
    } else if (isSchema(extra)) {
      members.push(`[key: string]: ${this.#type(extra, depth + 1, null)};`);
    } else if (extra === undefined && Object.keys(properties).length === 0 && schema.type === 'object') {
      // An object schema that names nothing takes any object.
      return 'Record<string, unknown>';
    }
    if (members.length === 0) return 'Record<string, never>';
    return `{\n${members.map((m) => indent(m, 1)).join('\n')}\n}`;
  }

  /** A `$ref` within this document as its alias (made on first use); outside it, or circular without an object between, `unknown`. */
  #ref(ref: string, alias: string | null): string {
    if (ref !== '#' && !ref.startsWith('#/')) return unknownBecause(`$ref ${ref} points outside this schema`);
    const pointer = ref.slice(1);
    const target = resolvePointer(this.#doc, pointer);
    if (target === undefined) return unknownBecause(`$ref ${ref} names nothing in this schema`);
    // `type A = A | string` is an error in TypeScript: an alias may name itself only inside an object or array.
    if (alias !== null && this.#reaches(pointer, alias, new Set()))
      return unknownBecause(`$ref ${ref} refers to itself without an object or array between`);
    let name = this.#named.get(pointer);
    if (name === undefined) {
      name = `${this.#prefix}_${this.#named.size + 1}`;
      this.#named.set(pointer, name);
      const body = this.#type(target, 1, pointer);
      const doc = docComment(isSchema(target) && typeof target.description === 'string' ? target.description : '', `\`${ref}\``);
      this.#aliases.push(`${doc}export type ${name} = ${body};`);
    }
    return `ToolTypes.${name}`;
  }

  /** Whether the schema at `from` comes back to `to` through $ref and compositions alone. */
  #reaches(from: string, to: string, seen: Set<string>): boolean {
    if (from === to) return true;
    if (seen.has(from)) return false;
    seen.add(from);
    return this.#bareRefs(from).some((next) => this.#reaches(next, to, seen));
  }

  #bareRefs(pointer: string): string[] {
    let found = this.#bare.get(pointer);
    if (found) return found;
    found = [];
    const walk = (node: unknown, depth: number) => {
      if (!isSchema(node) || depth > DISCOVERY_LIMITS.schema_depth) return;
      if (typeof node.$ref === 'string' && (node.$ref === '#' || node.$ref.startsWith('#/'))) found?.push(node.$ref.slice(1));
      for (const key of ['oneOf', 'anyOf', 'allOf']) {
        const members = node[key];
        if (Array.isArray(members)) for (const member of members) walk(member, depth + 1);
      }
    };
    walk(resolvePointer(this.#doc, pointer), 0);
    this.#bare.set(pointer, found);
    return found;
  }
}

function wrap(type: string): string {
  return /^[A-Za-z0-9_.<>, ]+$/.test(type) && !type.includes(' ') ? type : `(${type})`;
}

/** The value at a JSON pointer (RFC 6901) in `doc`; undefined when there is none. */
function resolvePointer(doc: unknown, pointer: string): unknown {
  if (pointer === '') return doc;
  if (!pointer.startsWith('/')) return undefined;
  let node: unknown = doc;
  for (const raw of pointer.slice(1).split('/')) {
    let token: string;
    try {
      token = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    } catch {
      return undefined;
    }
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, token)) return undefined;
    node = (node as Record<string, unknown>)[token];
  }
  return node;
}
