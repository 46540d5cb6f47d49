import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { Script } from 'node:vm';
import type AjvModule from 'ajv';
import type { ErrorObject, Options } from 'ajv';

/**
 * JSON Schema validation behind one small interface (the MCP SDK keeps its validator behind one too).
 * Schemas are compiled once and cached by content, so reloading an unchanged tool definition, or two
 * tools sharing a schema, costs no second compile.
 */

// ajv and ajv-formats are CommonJS, required when first needed: each draft's class and the formats
// took tens of ms to load, paid by every engine start (every CLI command) whether or not a schema was
// compiled, and a schema without "format" never needs the formats.
type AjvClass = typeof AjvModule.default;
const require = createRequire(import.meta.url);
const DRAFT_MODULES = { '2020-12': 'ajv/dist/2020.js', '2019-09': 'ajv/dist/2019.js', 'draft-07': 'ajv' } as const;
const ajvClass = (draft: Draft): AjvClass => (require(DRAFT_MODULES[draft]) as { default: AjvClass }).default;
const addFormats = (ajv: InstanceType<AjvClass>): void => (require('ajv-formats') as { default: (ajv: InstanceType<AjvClass>) => void }).default(ajv);

export interface Violation {
  /** JSON pointer into the validated value ("" is the value itself). */
  pointer: string;
  message: string;
  keyword: string;
  params: Record<string, unknown>;
}

export interface Validator {
  (value: unknown): Violation[] | null;
  /** The draft the schema was compiled as. */
  readonly draft: Draft;
}

export type Draft = '2020-12' | '2019-09' | 'draft-07';

export class SchemaError extends Error {
  override readonly name = 'SchemaError';
  /** JSON pointer into the schema where it is wrong, when known. */
  readonly pointer: string | undefined;

  constructor(message: string, options: { cause?: unknown; pointer?: string } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.pointer = options.pointer;
  }
}

const OPTIONS: Options = {
  allErrors: true,
  // Strict mode turns typos such as "requried" into load errors instead of silently ignored keywords.
  strict: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  allowUnionTypes: true,
  // Compiled schemas are kept by our cache, not registered by $id: two tools may reuse one $id.
  addUsedSchema: false,
  validateFormats: true,
  // ajv has no time limit of its own: the dispatcher's input size and depth checks bound its work,
  // except for regular expressions (see PATTERN_CHECK_MS).
  logger: false,
};

/**
 * How long checking one value against a schema with `pattern` or `patternProperties` may take. Those
 * regular expressions come from the tool's author and run, in V8's backtracking engine, on values a
 * model wrote: `^(a+)+$` against 30 a's and a b takes about 45 s here, and on the engine's thread that
 * would hold every call. Such a check is run under V8's own interruption (a `node:vm` script with a
 * timeout), which costs about 60 µs per check, so schemas without regular expressions skip it.
 */
export const PATTERN_CHECK_MS = 1000;

/** Where the bounded script finds the check to run (a global the script and withinTime both name). */
const RUN_KEY = 'arium.validation.bounded';
const RUN = Symbol.for(RUN_KEY);
const bounded = new Script(`globalThis[Symbol.for(${JSON.stringify(RUN_KEY)})]()`, { filename: 'arium:validation' });

const STOPPED = Symbol('stopped');

/** Runs `check` and stops it if it takes over `ms`: returns STOPPED then. */
function withinTime<T>(check: () => T, ms: number): T | typeof STOPPED {
  const slot = globalThis as unknown as Record<symbol, unknown>;
  slot[RUN] = check;
  try {
    return bounded.runInThisContext({ timeout: ms }) as T;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return STOPPED;
    throw error;
  } finally {
    delete slot[RUN];
  }
}

/** Whether a schema has a regular expression of its author's anywhere (`pattern`, `patternProperties`). */
function usesPatterns(value: unknown, depth = 0): boolean {
  if (typeof value !== 'object' || value === null || depth > 64) return false;
  if (Array.isArray(value)) return value.some((v) => usesPatterns(v, depth + 1));
  for (const [key, v] of Object.entries(value)) {
    if ((key === 'pattern' && typeof v === 'string') || (key === 'patternProperties' && typeof v === 'object')) return true;
    if (usesPatterns(v, depth + 1)) return true;
  }
  return false;
}

/**
 * Validators compiled at build time (scripts/precompile-schemas.mjs, ajv's standalone code): the
 * default tool meta-schema and the drafts' meta-schemas, which every engine start that loads a tool
 * definition needs, and which took ajv most of a CLI command's time to compile (a 2020-12 meta-schema
 * and the tool meta-schema: 220 ms of a 890 ms profiled `arium call`). Keyed like the cache below, by
 * the schema's text, so a schema changed since the build is simply compiled. Absent (a build without
 * the step), everything is compiled as before.
 */
type Standalone = ((value: unknown) => boolean) & { errors?: ErrorObject[] | null };
let precompiled: Record<string, Standalone> | null | undefined;

function precompiledValidator(key: string): Standalone | undefined {
  if (precompiled === undefined) {
    precompiled = null;
    // From dist/src/validation.js the file is dist/generated/; from src/validation.ts (tests), the build's.
    for (const candidate of ['../generated/validators.cjs', '../dist/generated/validators.cjs']) {
      try {
        precompiled = require(new URL(candidate, import.meta.url).pathname) as Record<string, Standalone>;
        break;
      } catch {}
    }
  }
  return precompiled?.[key];
}

/** The key of a draft's meta-schema validator among the precompiled ones. */
export const metaKey = (draft: Draft): string => `meta:${draft}`;

/** The cache key of a schema compiled with these options (the precompiled validators use it too). */
export function schemaKey(schema: unknown, options: { defaults?: boolean; trusted?: boolean } = {}): string {
  return keyOfText(JSON.stringify(schema), options);
}

function keyOfText(text: string, options: { defaults?: boolean; trusted?: boolean }): string {
  return `${options.defaults ? 'd' : 'p'}${options.trusted ? 't' : ''}${createHash('sha256').update(text).digest('hex')}`;
}

/**
 * For the build: standalone code of the validators of `schemas` (each compiled as `compileSchema`
 * compiles it with the same options) and of every draft's meta-schema, as one CommonJS module.
 */
export function precompileSource(schemas: ReadonlyArray<{ schema: unknown; defaults?: boolean; trusted?: boolean }>): string {
  const standaloneCode = require('ajv/dist/standalone').default as (ajv: unknown, fn: unknown) => string;
  const parts: string[] = ['"use strict";'];
  const add = (ajv: InstanceType<AjvClass>, fn: unknown, key: string) => {
    // The generated module sets module.exports; a local `module` takes it, and its require()s of ajv's
    // runtime resolve from where the file is written.
    parts.push(
      `exports[${JSON.stringify(key)}] = (function () { const module = { exports: {} }; ${standaloneCode(ajv, fn)}; return module.exports; })();`,
    );
  };
  for (const draft of ['2020-12', '2019-09', 'draft-07'] as const) {
    const ajv = new (ajvClass(draft))({ ...OPTIONS, code: { source: true } });
    addFormats(ajv);
    const meta = ajv.getSchema(String((ajv as unknown as { defaultMeta(): string }).defaultMeta()));
    if (!meta) throw new Error(`no meta-schema for ${draft}`);
    add(ajv, meta, metaKey(draft));
  }
  for (const { schema, defaults = false, trusted = false } of schemas) {
    const draft = draftOf(schema);
    // The options the instance compiling it at run time would have (see instance()).
    const ajv = new (ajvClass(draft))({ ...ajvOptions(defaults, trusted), code: { source: true } });
    if (JSON.stringify(schema).includes('"format"')) addFormats(ajv);
    add(ajv, ajv.compile(JSON.parse(JSON.stringify(schema))), schemaKey(schema, { defaults, trusted }));
  }
  return `${parts.join('\n')}\n`;
}

const instances = new Map<string, InstanceType<AjvClass>>();
/** Instances given the formats (on the first schema of theirs that names a "format"). */
const withFormats = new WeakSet<InstanceType<AjvClass>>();

function ajvOptions(defaults: boolean, checked: boolean): Options {
  const options = defaults ? { ...OPTIONS, useDefaults: true, strictSchema: false } : OPTIONS;
  return checked ? { ...options, validateSchema: false } : options;
}

/** `checked`: schemas given to this instance are already known to match their draft (it does not check them again). */
function instance(draft: Draft, defaults: boolean, formats: boolean, checked = false): InstanceType<AjvClass> {
  const key = `${draft}${defaults ? '+defaults' : ''}${checked ? '+checked' : ''}`;
  let ajv = instances.get(key);
  if (!ajv) {
    const Cls = ajvClass(draft);
    // useDefaults fills in a missing property (or array item) that declares a "default", in the value
    // being checked. ajv does not apply a default under oneOf/anyOf/not, and in strict mode refuses such
    // a schema; the schema is compiled strictly (without defaults) first, so this instance need not be.
    // A trusted schema is not checked against its draft's meta-schema at all: compiling that meta-schema
    // was most of the first call's time in a fresh process (150 ms of 190 ms profiled for `arium call`).
    ajv = new Cls(ajvOptions(defaults, checked));
    instances.set(key, ajv);
  }
  if (formats && !withFormats.has(ajv)) {
    addFormats(ajv);
    withFormats.add(ajv);
  }
  return ajv;
}

const DRAFTS: ReadonlyArray<[RegExp, Draft]> = [
  [/json-schema\.org\/draft\/2020-12\/schema#?$/, '2020-12'],
  [/json-schema\.org\/draft\/2019-09\/schema#?$/, '2019-09'],
  [/json-schema\.org\/draft-07\/schema#?$/, 'draft-07'],
];

export function draftOf(schema: unknown): Draft {
  if (typeof schema !== 'object' || schema === null || !('$schema' in schema)) return '2020-12';
  const declared = (schema as { $schema: unknown }).$schema;
  if (typeof declared !== 'string') throw new SchemaError('"$schema" must be a string');
  for (const [pattern, draft] of DRAFTS) if (pattern.test(declared)) return draft;
  throw new SchemaError(`unsupported "$schema" ${JSON.stringify(declared)}; use draft 2020-12, 2019-09 or draft-07`);
}

const compiled = new Map<string, Validator>();
const MAX_CACHED = 5000;

/**
 * Compiles a schema once (cached by content). With `defaults`, checking a value also fills in the
 * properties it lacks that the schema gives a `default` (a tool's input: the tool sees them filled in);
 * the value is changed in place, so callers check their own copy.
 */
export function compileSchema(schema: unknown, options: { defaults?: boolean; trusted?: boolean } = {}): Validator {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    if (typeof schema === 'boolean') throw new SchemaError('a boolean schema is not allowed here; use an object schema');
    throw new SchemaError('a schema must be a JSON object');
  }
  const defaults = options.defaults === true;
  const trusted = options.trusted === true;
  const text = JSON.stringify(schema);
  const key = keyOfText(text, options);
  const hit = compiled.get(key);
  if (hit) return hit;
  const draft = draftOf(schema);
  // Compile a private copy: ajv keeps a reference, and the caller's object must not be shared.
  const copy = JSON.parse(text);
  const built = precompiledValidator(key);
  const fn = built ?? compileWithAjv(copy, text, draft, defaults, trusted);
  const check = (value: unknown) => (fn(value) ? null : toViolations(fn.errors ?? []));
  const bound = (value: unknown) => {
    const outcome = withinTime(() => check(value), PATTERN_CHECK_MS);
    return outcome === STOPPED ? [tooSlow()] : outcome;
  };
  const validator = Object.assign(usesPatterns(copy) ? bound : check, { draft });
  if (compiled.size >= MAX_CACHED) compiled.delete(compiled.keys().next().value as string);
  compiled.set(key, validator);
  return validator;
}

function compileWithAjv(copy: Record<string, unknown>, text: string, draft: Draft, defaults: boolean, trusted: boolean): Standalone {
  // The strict compile finds the author's mistakes (an unknown keyword such as "requried"); the checks
  // are then made by the instance that applies defaults.
  if (defaults && !trusted) compileSchema(copy);
  // The schema is checked against its draft here, by the build's validator when there is one (then
  // the instance need not compile the meta-schema to check it again), rather than left to compile(),
  // whose error is one flat string: this way the author learns where in the schema the mistake is
  // ("/properties/n/type"), as a pointer.
  const meta = trusted ? undefined : precompiledValidator(metaKey(draft));
  // A property named "format" also matches: the formats are then loaded for nothing, which is harmless.
  const ajv = instance(draft, defaults, text.includes('"format"'), trusted || meta !== undefined);
  if (!trusted) {
    const valid = meta ? meta(copy) : ajv.validateSchema(copy);
    if (!valid) {
      const violations = toViolations((meta ? meta.errors : ajv.errors) ?? []);
      throw new SchemaError(`schema is invalid: ${summarize(violations)}`, { pointer: violations[0]?.pointer ?? '' });
    }
  }
  try {
    return ajv.compile(copy);
  } catch (error) {
    const message = (error as Error).message;
    // ajv's strict-mode error names the keyword but not where it is; find it, so the report can point at it.
    const keyword = /^strict mode: unknown keyword: "(.+)"$/.exec(message)?.[1];
    const pointer = keyword === undefined ? undefined : findKey(copy, keyword, '');
    throw new SchemaError(message, pointer === undefined ? { cause: error } : { cause: error, pointer });
  }
}

/**
 * A validator compiled on its first use, without checking the schema itself: for the engine's own
 * schemas (the builtins'), which are known good (test/builtins.schemas.test.ts compiles each strictly),
 * so that starting an engine (every CLI command) does not pay for compiling schemas no call uses.
 */
export function lazyValidator(schema: Record<string, unknown>, options: { defaults?: boolean } = {}): Validator {
  let compiled: Validator | null = null;
  const check = (value: unknown) => {
    compiled ??= compileSchema(schema, { ...options, trusted: true });
    return compiled(value);
  };
  return Object.assign(check, { draft: draftOf(schema) });
}

/** What a check stopped by PATTERN_CHECK_MS reports: one violation, at the value itself. */
const tooSlow = (): Violation => ({
  pointer: '',
  keyword: 'pattern',
  params: { timeout_ms: PATTERN_CHECK_MS },
  message: `could not be checked within ${PATTERN_CHECK_MS} ms: a "pattern" of the schema backtracks too much on this value (catastrophic backtracking); the schema's author should simplify the pattern or bound the string with maxLength`,
});

/** Pointer to the first property named `key` in a JSON value (depth first), if any. */
function findKey(value: unknown, key: string, at: string, depth = 0): string | undefined {
  if (typeof value !== 'object' || value === null || depth > 64) return undefined;
  const entries: Array<[string, unknown]> = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  for (const [k] of entries) if (k === key && !Array.isArray(value)) return `${at}/${escapePointer(k)}`;
  for (const [k, v] of entries) {
    const found = findKey(v, key, `${at}/${escapePointer(k)}`, depth + 1);
    if (found !== undefined) return found;
  }
  return undefined;
}

function toViolations(errors: readonly ErrorObject[]): Violation[] {
  // A bad key of an object comes as its own failure (which names the key) and then a `propertyNames`
  // one that only says "property name must be valid": the first says it all.
  const named = errors.some((e) => e.propertyName !== undefined);
  return errors
    .filter((e) => !(named && e.keyword === 'propertyNames'))
    .map((e) => {
      let pointer = e.instancePath;
      let message = e.message ?? 'is invalid';
      if (e.propertyName !== undefined) {
        pointer = `${pointer}/${escapePointer(e.propertyName)}`;
        message = `the name ${JSON.stringify(e.propertyName)} ${message}`;
      } else if (e.keyword === 'required' && typeof e.params.missingProperty === 'string') {
        pointer = `${pointer}/${escapePointer(e.params.missingProperty)}`;
        message = 'is required';
      } else if (e.keyword === 'additionalProperties' && typeof e.params.additionalProperty === 'string') {
        pointer = `${pointer}/${escapePointer(e.params.additionalProperty)}`;
        message = 'is not an allowed property';
      } else if (e.keyword === 'enum' && Array.isArray(e.params.allowedValues)) {
        message = `must be one of ${e.params.allowedValues.map((v: unknown) => JSON.stringify(v)).join(', ')}`;
      }
      return { pointer, message, keyword: e.keyword, params: { ...e.params } };
    });
}

function escapePointer(token: string): string {
  return token.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** "/a/b: must be string; /c: is required" — a one-line summary for messages. */
export function summarize(violations: readonly Violation[], max = 5): string {
  const parts = violations.slice(0, max).map((v) => `${v.pointer || '/'}: ${v.message}`);
  if (violations.length > max) parts.push(`and ${violations.length - max} more`);
  return parts.join('; ');
}
