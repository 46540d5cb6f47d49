import { clone, isNode, type Node, type Notes, own, put } from './node.js';

/** Equivalent forms a vendor takes, for every target. */

/**
 * An object whose keys are an enum (`propertyNames: {enum}`) and whose values one schema
 * (`additionalProperties`) is, exactly, an object with one optional property per key.
 */
export function expandKeyEnum(node: Node, notes: Notes): Node {
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
export function normalize(node: Node, notes: Notes): Node {
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

export function without(node: Node, key: string): Node {
  const out: Node = {};
  for (const [k, v] of Object.entries(node)) if (k !== key) put(out, k, v);
  return out;
}
