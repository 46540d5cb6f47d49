import { GeminiPass } from './publish-schema/gemini.js';
import { clone, isNode, type Node, Notes, own, Unpublishable } from './publish-schema/node.js';
import { StrictPass } from './publish-schema/openai-strict.js';
import { flattenRoot, tooDeep } from './publish-schema/top-level.js';
import { checkSchema, MAX_WALK_DEPTH, type RuleBreak, type SchemaTarget } from './vendor-rules.js';

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

/** For a tool whose schema breaks the rules of `target`: one line naming the keyword, where, and why. */
export function describeBreak(b: RuleBreak): string {
  return `${b.keyword} at ${b.pointer}: ${b.message}`;
}
