import { createHash } from 'node:crypto';
import { open, readFile, realpath, stat } from 'node:fs/promises';
import { extname, isAbsolute, relative, resolve, sep } from 'node:path';
import type { RegistryProblem } from '../events.js';
import { describeDuplicate, findDuplicateKey } from '../json-keys.js';
import type { RegistryLimits } from '../limits.js';
import { PermissionSyntaxError, parsePermission } from '../permissions.js';
import type { RunnerCatalog } from '../runner-catalog.js';
import type { Tool, ToolSpec } from '../tool.js';
import { compileSchema, SchemaError, summarize, type Validator } from '../validation.js';
import { toolMetaSchema } from './meta-schema.js';
import { lineColumn } from './text-position.js';

export type LoadOutcome = { tool: Tool; problem?: undefined } | { tool?: undefined; problem: RegistryProblem };

export interface LoadContext {
  projectDir: string;
  /** The tools folder, already resolved with realpath. */
  toolsDir: string;
  limits: RegistryLimits;
  /** Ids that belong to builtin tools. */
  reserved: ReadonlySet<string>;
  /** The runners a definition may name, their entry extensions and permissions. */
  catalog: RunnerCatalog;
}

class DefinitionError extends Error {
  constructor(
    message: string,
    readonly at?: string,
    readonly id?: string,
  ) {
    super(message);
  }
}

/** Reads and checks one definition file. Never throws: every failure becomes a problem naming the file. */
export async function loadDefinition(file: string, ctx: LoadContext): Promise<LoadOutcome> {
  const shown = relative(ctx.projectDir, file).split(sep).join('/');
  let data: DefinitionData | undefined;
  try {
    const text = await readBounded(file, ctx.limits.max_definition_bytes);
    data = isYamlDefinition(file) ? await parseYaml(text, ctx.limits) : parseJson(text, ctx.limits);
    return { tool: await buildTool(data, text, shown, ctx) };
  } catch (error) {
    if (error instanceof DefinitionError) {
      const problem: RegistryProblem = { file: shown, message: error.message };
      // A YAML file's reader wants the line: the pointer stays in the message.
      const located = error.at?.startsWith('/') ? data?.locate?.(error.at) : undefined;
      if (located !== undefined) {
        problem.at = located;
        problem.message = `${error.message} (at ${error.at})`;
      } else if (error.at !== undefined) problem.at = error.at;
      if (error.id !== undefined) problem.id = error.id;
      return { problem };
    }
    const code = (error as NodeJS.ErrnoException).code;
    const message = code === 'ENOENT' ? 'the file disappeared while it was being read' : `could not be read: ${(error as Error).message}`;
    return { problem: { file: shown, message } };
  }
}

async function readBounded(file: string, max: number): Promise<string> {
  const handle = await open(file, 'r');
  try {
    const { size } = await handle.stat();
    if (size > max) {
      throw new DefinitionError(`the file is ${size} bytes, over the limit of ${max} bytes for a tool definition`);
    }
    // Read at most max+1 bytes: the file may grow between stat and read.
    const buffer = Buffer.alloc(Math.min(size, max) + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    if (bytesRead > max) throw new DefinitionError(`the file grew past the limit of ${max} bytes while being read`);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

/** The extensions of a definition file, in both forms. */
export const DEFINITION_EXTENSIONS: readonly string[] = ['.json', '.yaml', '.yml'];

export const isDefinitionFile = (name: string) => DEFINITION_EXTENSIONS.includes(extname(name).toLowerCase()) && !name.startsWith('.');
const isYamlDefinition = (name: string) => extname(name).toLowerCase() !== '.json';

interface DefinitionData {
  value: unknown;
  /** `line:column` of a JSON pointer (YAML only: a JSON file's problems keep the pointer). */
  locate?: (pointer: string) => string | undefined;
}

/** The YAML reader and the `yaml` package, loaded with the first YAML file: a project of JSON files does not pay for them. */
let yamlData: Promise<typeof import('./yaml-data.js')> | null = null;

async function parseYaml(raw: string, limits: RegistryLimits): Promise<DefinitionData> {
  if (raw.replace(/^\ufeff/, '').trim() === '') throw new DefinitionError('the file is empty (a half-written file?); expected a YAML mapping');
  yamlData ??= import('./yaml-data.js');
  const { parseYamlData, YamlDataError } = await yamlData;
  try {
    return parseYamlData(raw, { max_bytes: limits.max_definition_bytes, max_depth: limits.max_definition_depth });
  } catch (error) {
    if (error instanceof YamlDataError) throw new DefinitionError(error.message, error.at);
    throw error;
  }
}

function parseJson(raw: string, limits: RegistryLimits): DefinitionData {
  // Some editors save UTF-8 with a byte order mark, which JSON.parse refuses (RFC 8259 §8.1 lets a
  // parser ignore it): such a file is not malformed.
  const text = raw.charCodeAt(0) === 0xfeff ? raw.slice(1) : raw;
  if (text.trim() === '') throw new DefinitionError('the file is empty (a half-written file?); expected a JSON object');
  const deep = jsonDepthPast(text, limits.max_definition_depth);
  if (deep !== null) {
    throw new DefinitionError(
      `nested deeper than ${limits.max_definition_depth} levels of arrays and objects, the most a definition may have`,
      lineColumn(text, deep),
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    const position = /position (\d+)/.exec(message);
    let at: string | undefined;
    if (position) {
      const offset = Number(position[1]);
      const before = text.slice(0, offset);
      const line = before.split('\n').length;
      const column = offset - before.lastIndexOf('\n');
      at = `${line}:${column}`;
    }
    throw new DefinitionError(`malformed JSON: ${message}`, at);
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate) {
    const id = typeof (value as { id?: unknown })?.id === 'string' ? (value as { id: string }).id : undefined;
    throw new DefinitionError(describeDuplicate(duplicate), `${duplicate.line}:${duplicate.column}`, id);
  }
  return { value };
}

/** The offset of the bracket that takes a JSON text past `max` levels of nesting (strings skipped); null if none does. */
function jsonDepthPast(text: string, max: number): number | null {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return i;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return null;
}

const metaValidators = new Map<string, Validator>();

/** The meta-schema of a catalog, compiled once per set of runners (without `$id`: ajv keeps one schema per id). */
function metaValidator(catalog: RunnerCatalog): Validator {
  const key = catalog.signature();
  let validator = metaValidators.get(key);
  if (!validator) {
    const { $id: _id, ...schema } = toolMetaSchema(catalog);
    validator = compileSchema(schema);
    metaValidators.set(key, validator);
  }
  return validator;
}

/**
 * Id segments that name members of `Object.prototype` (and `prototype`), compared in lower case as the
 * id pattern allows only lower case: `constructor`, `tostring`, `hasownproperty`, `__proto__`…
 */
const OBJECT_MEMBER_NAMES: ReadonlySet<string> = new Set(
  [...Object.getOwnPropertyNames(Object.prototype), 'prototype'].map((name) => name.toLowerCase()),
);

async function buildTool(data: DefinitionData, text: string, shown: string, ctx: LoadContext): Promise<Tool> {
  const raw = data.value;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    const form = data.locate ? 'a YAML mapping' : 'a JSON object';
    throw new DefinitionError(`a tool definition must be ${form}, not ${raw === null ? 'null' : Array.isArray(raw) ? 'an array' : typeof raw}`);
  }
  const declaredId = typeof (raw as { id?: unknown }).id === 'string' ? ((raw as { id: string }).id as string) : undefined;
  // Before the meta-schema: its if/then for builtin only says "/: must NOT be valid" when an entry is given.
  const runner = (raw as { runner?: unknown }).runner;
  if (typeof runner === 'string' && ctx.catalog.get(runner)?.definable === false) {
    const usable = ctx.catalog
      .definable()
      .map((n) => `"${n}"`)
      .join(' or ');
    throw new DefinitionError(`runner "${runner}" is reserved for the engine's own tools; use ${usable}`, '/runner', declaredId);
  }
  // Before the meta-schema too, whose if/then would only say "must NOT be valid".
  const composite = typeof runner === 'string' && ctx.catalog.get(runner)?.composite === true;
  if (composite && Object.hasOwn(raw, 'entry')) {
    throw new DefinitionError(`a ${runner} tool has no "entry": it lists "steps" (other tools to call) instead`, '/entry', declaredId);
  }
  if (!composite && typeof runner === 'string' && (Object.hasOwn(raw, 'steps') || Object.hasOwn(raw, 'output'))) {
    const field = Object.hasOwn(raw, 'steps') ? 'steps' : 'output';
    const which = ctx.catalog
      .composite()
      .map((n) => `"${n}"`)
      .join(' or ');
    throw new DefinitionError(`"${field}" belongs to a macro (runner ${which}); a ${runner} tool has an "entry" instead`, `/${field}`, declaredId);
  }
  // Before the meta-schema too: a field of another runner would only be "must NOT be valid" there.
  if (typeof runner === 'string') {
    for (const [field, { runners }] of ctx.catalog.toolFields()) {
      if (Object.hasOwn(raw, field) && !runners.includes(runner)) {
        const which = runners.map((n) => `"${n}"`).join(' or ');
        throw new DefinitionError(`"${field}" is a field of ${which} tools; a ${runner} tool does not take it`, `/${field}`, declaredId);
      }
    }
  }
  const violations = metaValidator(ctx.catalog)(raw);
  if (violations) {
    const first = violations[0];
    throw new DefinitionError(`does not match the tool definition schema: ${summarize(violations)}`, first?.pointer || '/', declaredId);
  }
  const spec = raw as ToolSpec;
  const id = spec.id;
  const member = id.split('.').find((segment) => OBJECT_MEMBER_NAMES.has(segment));
  if (member !== undefined) {
    throw new DefinitionError(
      `the id "${id}" has the segment "${member}", the name of a member every JavaScript object has; surfaces that key objects by id (HTTP routes, exports, MCP names) would reach that member, so choose another name`,
      '/id',
      id,
    );
  }
  if (ctx.reserved.has(id)) throw new DefinitionError(`the id "${id}" belongs to a builtin tool; choose another id`, '/id', id);
  if (spec.schema.type !== 'object') {
    throw new DefinitionError('the input schema must have "type": "object" at its root (tools take named arguments)', '/schema/type', id);
  }
  let validateInput: Tool['validateInput'];
  let validateOutput: Tool['validateOutput'] = null;
  try {
    validateInput = compileSchema(spec.schema, { defaults: true });
  } catch (error) {
    throw new DefinitionError(`invalid input schema: ${(error as Error).message}`, `/schema${schemaPointer(error)}`, id);
  }
  for (const [i, example] of (spec.examples ?? []).entries()) {
    // A secret reference stands for a string the engine fills in at call time.
    const bad = validateInput(withSecretPlaceholders(structuredClone(example)));
    if (bad) throw new DefinitionError(`example ${i} does not match the input schema: ${summarize(bad)}`, `/examples/${i}`, id);
  }
  if (spec.output_schema !== undefined) {
    try {
      validateOutput = compileSchema(spec.output_schema);
    } catch (error) {
      throw new DefinitionError(`invalid output schema: ${(error as Error).message}`, `/output_schema${schemaPointer(error)}`, id);
    }
  }
  const permissions = spec.permissions ?? [];
  const declared = permissions.map((p, i) => {
    try {
      return parsePermission(p);
    } catch (error) {
      if (error instanceof PermissionSyntaxError) throw new DefinitionError(error.message, `/permissions/${i}`, id);
      throw error;
    }
  });
  const needed = ctx.catalog.get(spec.runner)?.permission;
  if (needed && !permissions.includes(needed)) {
    throw new DefinitionError(`runner "${spec.runner}" needs the permission "${needed}" in "permissions"`, '/permissions', id);
  }
  const entry = composite ? { path: null, content: Buffer.alloc(0) } : await checkEntry(spec, ctx);
  const normalized: ToolSpec = { ...spec, name: spec.name ?? spec.id, permissions };
  return Object.freeze({
    spec: Object.freeze(normalized),
    source: shown,
    entryPath: entry.path,
    toolsDir: ctx.toolsDir,
    declared: Object.freeze(declared),
    validateInput,
    validateOutput,
    hash: createHash('sha256').update(text).update('\u0000').update(entry.content).digest('hex'),
  });
}

function schemaPointer(error: unknown): string {
  return error instanceof SchemaError && error.pointer ? error.pointer : '';
}

/** Largest entry file the registry reads (to hash it; runners read it again). */
const MAX_ENTRY_BYTES = 8 * 1024 * 1024;

async function checkEntry(spec: ToolSpec, ctx: LoadContext): Promise<{ path: string; content: Buffer }> {
  const entry = spec.entry as string;
  const id = spec.id;
  if (entry.includes('\u0000')) throw new DefinitionError('"entry" contains a NUL byte', '/entry', id);
  if (isAbsolute(entry) || /^[a-zA-Z]:[\\/]/.test(entry)) {
    throw new DefinitionError(`"entry" must be relative to the tools folder, not an absolute path ("${entry}")`, '/entry', id);
  }
  const resolved = resolve(ctx.toolsDir, entry);
  if (!isInside(ctx.toolsDir, resolved)) {
    throw new DefinitionError(`"entry" must stay inside the tools folder ("${entry}" points outside it)`, '/entry', id);
  }
  const allowed = ctx.catalog.get(spec.runner)?.extensions ?? [];
  if (!allowed.includes(extname(resolved).toLowerCase())) {
    throw new DefinitionError(`"entry" of a ${spec.runner} tool must end in ${allowed.join(', ')} ("${entry}")`, '/entry', id);
  }
  let real: string;
  try {
    real = await realpath(resolved);
  } catch {
    throw new DefinitionError(`entry file "${entry}" was not found in the tools folder`, '/entry', id);
  }
  if (!isInside(ctx.toolsDir, real)) {
    throw new DefinitionError(`entry file "${entry}" is a link that leads outside the tools folder`, '/entry', id);
  }
  const info = await stat(real);
  if (!info.isFile()) throw new DefinitionError(`entry "${entry}" is not a regular file`, '/entry', id);
  if (info.size > MAX_ENTRY_BYTES) {
    throw new DefinitionError(`entry file "${entry}" is ${info.size} bytes, over the limit of ${MAX_ENTRY_BYTES}`, '/entry', id);
  }
  return { path: real, content: await readFile(real) };
}

function isInside(dir: string, path: string): boolean {
  const rel = relative(dir, path);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
}

/** `{"$secret": NAME}` objects replaced by a string, as the engine replaces them by the secret's value. */
function withSecretPlaceholders(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(withSecretPlaceholders);
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record);
  if (keys.length === 1 && keys[0] === '$secret' && typeof record.$secret === 'string') return `[secret:${record.$secret}]`;
  return Object.fromEntries(keys.map((key) => [key, withSecretPlaceholders(record[key])]));
}
