import { createHash } from 'node:crypto';
import { Script } from 'node:vm';
import AjvModule, { type ErrorObject, type Options, type ValidateFunction } from 'ajv';
import Ajv2019Module from 'ajv/dist/2019.js';
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

/**
 * JSON Schema validation behind one small interface (the MCP SDK keeps its validator behind one too).
 * Schemas are compiled once and cached by content, so reloading an unchanged tool definition, or two
 * tools sharing a schema, costs no second compile.
 */

// ajv and ajv-formats are CommonJS; under NodeNext their default export arrives wrapped.
type AjvClass = typeof AjvModule.default;
const Ajv07 = (AjvModule as unknown as { default: AjvClass }).default;
const Ajv2019 = (Ajv2019Module as unknown as { default: AjvClass }).default;
const Ajv2020 = (Ajv2020Module as unknown as { default: AjvClass }).default;
const addFormats = (addFormatsModule as unknown as { default: (ajv: InstanceType<AjvClass>) => void }).default;

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

const instances = new Map<string, InstanceType<AjvClass>>();

function instance(draft: Draft, defaults: boolean): InstanceType<AjvClass> {
  const key = `${draft}${defaults ? '+defaults' : ''}`;
  let ajv = instances.get(key);
  if (!ajv) {
    const Cls = draft === '2020-12' ? Ajv2020 : draft === '2019-09' ? Ajv2019 : Ajv07;
    // useDefaults fills in a missing property (or array item) that declares a "default", in the value
    // being checked. ajv does not apply a default under oneOf/anyOf/not, and in strict mode refuses such
    // a schema; the schema is compiled strictly (without defaults) first, so this instance need not be.
    ajv = new Cls(defaults ? { ...OPTIONS, useDefaults: true, strictSchema: false } : OPTIONS);
    addFormats(ajv);
    instances.set(key, ajv);
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
export function compileSchema(schema: unknown, options: { defaults?: boolean } = {}): Validator {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    if (typeof schema === 'boolean') throw new SchemaError('a boolean schema is not allowed here; use an object schema');
    throw new SchemaError('a schema must be a JSON object');
  }
  const defaults = options.defaults === true;
  const text = JSON.stringify(schema);
  const key = `${defaults ? 'd' : 'p'}${createHash('sha256').update(text).digest('hex')}`;
  const hit = compiled.get(key);
  if (hit) return hit;
  // The strict compile finds the author's mistakes (an unknown keyword such as "requried"); the checks
  // are then made by the instance that applies defaults.
  if (defaults) compileSchema(schema);
  const draft = draftOf(schema);
  const ajv = instance(draft, defaults);
  // Compile a private copy: ajv keeps a reference, and the caller's object must not be shared.
  const copy = JSON.parse(text);
  // Checked here rather than left to compile(), whose error is one flat string: this way the author
  // learns where in the schema the mistake is ("/properties/n/type"), as a pointer.
  if (!ajv.validateSchema(copy)) {
    const violations = toViolations(ajv.errors ?? []);
    throw new SchemaError(`schema is invalid: ${summarize(violations)}`, { pointer: violations[0]?.pointer ?? '' });
  }
  let fn: ValidateFunction;
  try {
    fn = ajv.compile(copy);
  } catch (error) {
    const message = (error as Error).message;
    // ajv's strict-mode error names the keyword but not where it is; find it, so the report can point at it.
    const keyword = /^strict mode: unknown keyword: "(.+)"$/.exec(message)?.[1];
    const pointer = keyword === undefined ? undefined : findKey(copy, keyword, '');
    throw new SchemaError(message, pointer === undefined ? { cause: error } : { cause: error, pointer });
  }
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

/**
 * A validator compiled on its first use: for the engine's own schemas (the builtins'), which are known
 * good, so that starting an engine (every CLI command) does not pay for compiling schemas no call uses.
 */
export function lazyValidator(schema: Record<string, unknown>, options: { defaults?: boolean } = {}): Validator {
  let compiled: Validator | null = null;
  const check = (value: unknown) => {
    compiled ??= compileSchema(schema, options);
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
  return errors.map((e) => {
    let pointer = e.instancePath;
    let message = e.message ?? 'is invalid';
    if (e.keyword === 'required' && typeof e.params.missingProperty === 'string') {
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
