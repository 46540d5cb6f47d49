import { MACRO_LIMITS } from '../../src/limits.js';
import type { LinkLookup, LinkProblem } from '../../src/runner.js';
import type { Tool } from '../../src/tool.js';
import { summarize, type Violation } from '../../src/validation.js';
import { conditionPointers, placeholders, tokens, withStandIns } from './template.js';

/** Schema keywords that combine subschemas: their failure may come from a placeholder's unknown value anywhere below. */
const COMBINATORS: ReadonlySet<string> = new Set(['anyOf', 'oneOf', 'not', 'if', 'then', 'else', 'contains', 'dependentSchemas']);

/**
 * What the registry checks of a macro once every definition is read: each step's tool exists, no
 * template reads a step that has not run yet, no chain of macros calls itself or nests deeper than
 * MACRO_LIMITS.max_depth, and each step's input template can match its tool's input schema.
 */
export function linkMacro(macro: Tool, lookup: LinkLookup): LinkProblem[] {
  const problems: LinkProblem[] = [];
  const steps = macro.spec.steps ?? [];
  for (const [index, step] of steps.entries()) {
    const at = `/steps/${index}`;
    if (step.when !== undefined) problems.push(...checkCondition(step.when, `${at}/when`));
    const refs = [...placeholders(step.input ?? {}, `${at}/input`), ...(step.when === undefined ? [] : conditionPointers(step.when, `${at}/when`))];
    for (const ref of refs) problems.push(...checkReference(ref.from, ref.at, index));
    const target = lookup(step.tool);
    if (target === undefined) {
      problems.push({ at: `${at}/tool`, message: `step ${index} calls "${step.tool}", which no tool of the project (or builtin) has as its id` });
      continue;
    }
    if (target === null) {
      problems.push({ at: `${at}/tool`, message: `step ${index} calls "${step.tool}", which is not served: its definition has problems` });
      continue;
    }
    const chain = longestChain(target, lookup, [macro.spec.id]);
    if (chain.cycle) {
      problems.push({ at: `${at}/tool`, message: `macros call each other in a cycle: ${chain.path.join(' → ')}` });
    } else if (chain.path.length > MACRO_LIMITS.max_depth) {
      problems.push({
        at: `${at}/tool`,
        message: `macros nest ${chain.path.length} deep, more than ${MACRO_LIMITS.max_depth}: ${chain.path.join(' → ')}`,
      });
    }
    problems.push(...checkShape(step.input ?? {}, target, `${at}/input`));
    problems.push(...checkTypes(macro, index, target, lookup));
  }
  if (macro.spec.output !== undefined) {
    for (const ref of placeholders(macro.spec.output, '/output')) problems.push(...checkReference(ref.from, ref.at, steps.length));
  }
  return problems;
}

/** A condition is exactly one of its three forms (the meta-schema has checked each key's type). */
function checkCondition(condition: unknown, at: string): LinkProblem[] {
  const keys = Object.keys(condition as object).sort();
  if (keys.length === 1 && keys[0] === 'not') return checkCondition((condition as { not: unknown }).not, `${at}/not`);
  const form = keys.join(',');
  if (form === '$from,equals' || form === '$from,exists') return [];
  return [
    {
      at,
      message: `a "when" is {"$from": pointer, "equals": value}, {"$from": pointer, "exists": true|false} or {"not": condition}; this one has the keys ${keys.map((k) => `"${k}"`).join(', ')}`,
    },
  ];
}

/** A `$from` must be a pointer into `/input` or the output of a step before `before`. */
function checkReference(from: unknown, at: string, before: number): LinkProblem[] {
  if (typeof from !== 'string' || (from !== '' && !from.startsWith('/'))) {
    return [{ at, message: `"$from" must be a JSON pointer string such as "/input/path" or "/steps/0/output", not ${JSON.stringify(from)}` }];
  }
  const [root, step, field] = tokens(from);
  if (root === 'input') return [];
  if (root === 'steps' && step !== undefined && /^(0|[1-9][0-9]*)$/.test(step) && field === 'output') {
    const n = Number(step);
    if (n < before) return [];
    const which = n === before ? 'the step itself' : `step ${n}, which runs later`;
    return [{ at, message: `"${from}" reads ${which}: a template may read only the input and the steps before it (0 to ${before - 1})` }];
  }
  return [{ at, message: `"${from}" points nowhere: a "$from" pointer starts with /input or /steps/<n>/output` }];
}

/**
 * The longest chain of macros through `tool`, with `path` the macros above it; `cycle` when a chain
 * comes back to a macro already on it. Bounded by the depth limit, so a long cycle costs little.
 */
function longestChain(tool: Tool, lookup: LinkLookup, path: readonly string[]): { path: string[]; cycle: boolean } {
  const here = [...path, tool.spec.id];
  if (path.includes(tool.spec.id)) return { path: here, cycle: true };
  // Only macros count towards the depth: a chain ends with the macros above a tool that is not one.
  if (tool.spec.steps === undefined) return { path: [...path], cycle: false };
  if (here.length > MACRO_LIMITS.max_depth) return { path: here, cycle: false };
  let longest = { path: here, cycle: false };
  for (const step of tool.spec.steps) {
    const next = lookup(step.tool);
    if (!next) continue;
    const found = longestChain(next, lookup, here);
    if (found.cycle) return found;
    if (found.path.length > longest.path.length) longest = found;
  }
  return longest;
}

/**
 * The violations of the called tool's input schema that the template's literal parts cause whatever
 * values its placeholders take: each placeholder stands in as null, and a violation at, above or
 * below a placeholder is dropped (its value is unknown until the macro runs), as is everything under
 * a failed combinator (anyOf, oneOf…) that holds a placeholder.
 */
function checkShape(template: unknown, target: Tool, at: string): LinkProblem[] {
  const holes = placeholders(template, '').map((p) => p.at);
  if (holes.includes('')) return [];
  const violations = target.validateInput(structuredClone(withStandIns(template, null)));
  if (!violations) return [];
  const related = (pointer: string) => holes.some((h) => h === pointer || h.startsWith(`${pointer}/`) || pointer.startsWith(`${h}/`));
  const blind = violations.filter((v) => COMBINATORS.has(v.keyword) && related(v.pointer)).map((v) => v.pointer);
  const under = (v: Violation) => blind.some((b) => b === '' || v.pointer === b || v.pointer.startsWith(`${b}/`));
  const real = violations.filter((v) => !related(v.pointer) && !under(v));
  if (real.length === 0) return [];
  const first = real[0] as Violation;
  return [{ at: `${at}${first.pointer}`, message: `the input for ${target.spec.id} cannot match its schema: ${summarize(real)}` }];
}

/**
 * Placeholders whose value has a declared type (the macro's input schema for `/input/…`, a step
 * tool's output_schema for `/steps/<n>/output/…`) that the called tool's schema declares another type
 * for at the same place: such a step can never succeed. Only plain schemas are walked (properties,
 * items, prefixItems); anything else leaves the type unknown and unchecked.
 */
function checkTypes(macro: Tool, index: number, target: Tool, lookup: LinkLookup): LinkProblem[] {
  const steps = macro.spec.steps ?? [];
  const base = `/steps/${index}/input`;
  const problems: LinkProblem[] = [];
  for (const ref of placeholders(steps[index]?.input ?? {}, base)) {
    if (typeof ref.from !== 'string') continue;
    const [root, n, field, ...rest] = tokens(ref.from);
    let given: string[] | null = null;
    if (root === 'input') given = typesAt(macro.spec.schema, tokens(ref.from).slice(1));
    else if (root === 'steps' && field === 'output' && Number(n) < index) {
      const source = steps[Number(n)];
      const tool = source ? lookup(source.tool) : undefined;
      given = tool?.spec.output_schema ? typesAt(tool.spec.output_schema, rest) : null;
      // A step skipped by its condition has the output null.
      if (given && source?.when !== undefined && rest.length === 0) given = [...given, 'null'];
    }
    const wanted = typesAt(target.spec.schema, tokens(ref.at.slice(base.length)));
    if (
      !given ||
      !wanted ||
      given.some((t) => wanted.includes(t) || (t === 'integer' && wanted.includes('number')) || (t === 'number' && wanted.includes('integer')))
    )
      continue;
    problems.push({
      at: ref.at,
      message: `"${ref.from}" is ${given.join(' or ')}, but ${target.spec.id} wants ${wanted.join(' or ')} here: this step could never run`,
    });
  }
  return problems;
}

/** The JSON types a plain schema allows at `path` (object keys and array indexes), or null when unknown. */
function typesAt(schema: unknown, path: readonly string[]): string[] | null {
  let node = schema as Record<string, unknown> | undefined;
  for (const token of path) {
    if (!node || typeof node !== 'object') return null;
    const props = node.properties as Record<string, unknown> | undefined;
    if (props && Object.hasOwn(props, token)) node = props[token] as Record<string, unknown>;
    else if (/^(0|[1-9][0-9]*)$/.test(token) && Array.isArray(node.prefixItems) && Number(token) < node.prefixItems.length)
      node = node.prefixItems[Number(token)] as Record<string, unknown>;
    else if (/^(0|[1-9][0-9]*)$/.test(token) && node.items && typeof node.items === 'object' && !Array.isArray(node.items))
      node = node.items as Record<string, unknown>;
    else return null;
  }
  if (!node || typeof node !== 'object') return null;
  if (typeof node.type === 'string') return [node.type];
  if (Array.isArray(node.type) && node.type.every((t) => typeof t === 'string')) return node.type as string[];
  return null;
}
