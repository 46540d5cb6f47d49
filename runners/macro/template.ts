// The template language of macro steps: plain JSON in which an object of the one key "$from" stands for
// the value a JSON pointer (RFC 6901) finds in the document { input, steps: [{ output }, …] }. No code
// runs: a template is data, so a macro is as deterministic as the tools it calls.

/** A template placeholder: `{"$from": "/steps/0/output/path"}`. */
export interface Placeholder {
  $from: string;
}

/** What templates are evaluated against: the macro's input and the outputs of the steps run so far. */
export interface MacroDocument {
  input: unknown;
  steps: Array<{ output: unknown }>;
}

/** A pointer that finds nothing at run time: `at` is where in the definition the template is. */
export class TemplateError extends Error {
  constructor(
    message: string,
    readonly pointer: string,
    readonly at: string,
  ) {
    super(message);
  }
}

/** An object whose only key is `$from` (with any value: a non-string one is reported at load). */
export function isPlaceholder(value: unknown): value is { $from: unknown } {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === '$from';
}

/** The tokens of a JSON pointer; `~1` is "/" and `~0` is "~". */
export function tokens(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** The value `pointer` finds in `doc`; `found: false` when a token names nothing (own properties only). */
export function lookup(doc: unknown, pointer: string): { found: true; value: unknown } | { found: false } {
  let here: unknown = doc;
  for (const token of tokens(pointer)) {
    if (Array.isArray(here)) {
      if (!/^(0|[1-9][0-9]*)$/.test(token) || Number(token) >= here.length) return { found: false };
      here = here[Number(token)];
    } else if (here !== null && typeof here === 'object' && Object.hasOwn(here, token)) {
      here = (here as Record<string, unknown>)[token];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: here };
}

/** The template with every placeholder replaced by its value; throws TemplateError for a pointer that finds nothing. */
export function fill(template: unknown, doc: MacroDocument, at: string): unknown {
  if (template === null || typeof template !== 'object') return template;
  if (Array.isArray(template)) return template.map((item, i) => fill(item, doc, `${at}/${i}`));
  if (isPlaceholder(template)) {
    const pointer = String(template.$from);
    const found = lookup(doc, pointer);
    if (!found.found) {
      throw new TemplateError(
        `${at}: {"$from": "${pointer}"} finds no value (no such key or index in the macro's input or step outputs)`,
        pointer,
        at,
      );
    }
    return found.value;
  }
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(template)) define(out, key, fill(value, doc, `${at}/${escapeToken(key)}`));
  return out;
}

/**
 * Whether a step's `when` holds: `{"$from": p, "equals": v}` (the value at p is v; nothing there is
 * not v), `{"$from": p, "exists": bool}` (whether p finds a value), `{"not": condition}`.
 */
export function holds(condition: unknown, doc: MacroDocument): boolean {
  const c = condition as { $from?: string; equals?: unknown; exists?: boolean; not?: unknown };
  if (Object.hasOwn(c, 'not')) return !holds(c.not, doc);
  const found = lookup(doc, String(c.$from));
  if (Object.hasOwn(c, 'exists')) return found.found === c.exists;
  return found.found && sameJson(found.value, c.equals);
}

/** Every placeholder in a template, with where it is (`at`, a pointer into the definition). */
export function placeholders(template: unknown, at: string, out: Array<{ from: unknown; at: string }> = []): Array<{ from: unknown; at: string }> {
  if (template === null || typeof template !== 'object') return out;
  if (Array.isArray(template)) {
    for (const [i, item] of template.entries()) placeholders(item, `${at}/${i}`, out);
  } else if (isPlaceholder(template)) {
    out.push({ from: template.$from, at });
  } else {
    for (const [key, value] of Object.entries(template)) placeholders(value, `${at}/${escapeToken(key)}`, out);
  }
  return out;
}

/** The pointers a `when` condition reads, with where each is. */
export function conditionPointers(condition: unknown, at: string): Array<{ from: unknown; at: string }> {
  const c = condition as { $from?: unknown; not?: unknown };
  if (Object.hasOwn(c, 'not')) return conditionPointers(c.not, `${at}/not`);
  return Object.hasOwn(c, '$from') ? [{ from: c.$from, at: `${at}/$from` }] : [];
}

/** The template with each placeholder replaced by `stand`, for checking its literal parts against a schema. */
export function withStandIns(template: unknown, stand: unknown): unknown {
  if (template === null || typeof template !== 'object') return template;
  if (Array.isArray(template)) return template.map((item) => withStandIns(item, stand));
  if (isPlaceholder(template)) return stand;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(template)) define(out, key, withStandIns(value, stand));
  return out;
}

/** An own property even for the key "__proto__", which plain assignment would take as the prototype. */
function define(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

export function escapeToken(token: string): string {
  return token.replace(/~/g, '~0').replace(/\//g, '~1');
}

function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.hasOwn(b, k) && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}
