/**
 * What each model API accepts as a tool's schema, written down once. The exports check what they
 * publish with it (src/surfaces/publish-schema.ts), and the scripted models of the agent-loop tests
 * refuse a request with it, as the real APIs do. Each rule cites where it is documented or, where the
 * documentation is silent, the public reports of the API refusing it.
 */

/** A place a schema is published to. `mcp` is MCP's `tools/list`, whose clients hand the schemas on to the other three. */
export type SchemaTarget = 'openai' | 'openai-strict' | 'anthropic' | 'gemini' | 'mcp';
export const SCHEMA_TARGETS: readonly SchemaTarget[] = ['openai', 'openai-strict', 'anthropic', 'gemini', 'mcp'];

/** One rule a schema breaks: where (a JSON pointer into the schema), which keyword, and how to fix it. */
export interface RuleBreak {
  target: SchemaTarget;
  pointer: string;
  keyword: string;
  message: string;
}

// --- The sources -------------------------------------------------------------------------------------

/** https://platform.openai.com/docs/guides/structured-outputs#supported-schemas */
const OPENAI_STRICT_DOC = 'platform.openai.com/docs/guides/structured-outputs#supported-schemas';

/**
 * Keywords strict mode takes. Its "Supported properties" list: for strings `pattern` and `format`, for
 * numbers `multipleOf`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, for arrays
 * `minItems`, `maxItems`; `anyOf` (not at the root), `$defs`/`$ref` (recursion included), `enum`,
 * `const`, type arrays with "null". `minLength`, `maxLength`, `uniqueItems`, `minProperties`,
 * `maxProperties`, `propertyNames`, `patternProperties`, `allOf`, `not`, `if`/`then`/`else`,
 * `dependentRequired`, `dependentSchemas` are not on it, and the API answers "'minLength' is not
 * permitted" for them.
 */
export const OPENAI_STRICT_KEYWORDS: ReadonlySet<string> = new Set([
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
  'format',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
  '$schema',
]);

/** The string formats strict mode takes (same page, "Supported properties"). */
export const OPENAI_STRICT_FORMATS = new Set(['date-time', 'time', 'date', 'duration', 'email', 'hostname', 'ipv4', 'ipv6', 'uuid']);

/** The size limits of a strict schema (same page, "Objects have limitations on nesting depth and size"). */
export const OPENAI_STRICT_LIMITS = {
  properties: 5000,
  depth: 10,
  /** Property names, definition names, enum and const values, together. */
  chars: 120_000,
  enumValues: 1000,
  /** A string enum of more than this many values … */
  bigEnum: 250,
  /** … may hold this many characters in all. */
  bigEnumChars: 15_000,
} as const;

/**
 * Gemini's `Schema`, "a select subset of an OpenAPI 3.0 schema object": the fields it has
 * (https://ai.google.dev/api/caching#Schema). Any other name is refused: "Invalid JSON payload received.
 * Unknown name "additionalProperties" … Cannot find field." (BerriAI/litellm#14330; `const`:
 * zed-industries/zed#44875; `$schema`, `exclusiveMinimum`, `propertyNames`: openswarm-ai/openswarm#24).
 */
export const GEMINI_FIELDS: ReadonlySet<string> = new Set([
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
  'example',
  'anyOf',
  'propertyOrdering',
  'default',
  'items',
  'minimum',
  'maximum',
]);

/** Gemini's `Type` values (same page); one value, never a list ("Proto field is not repeating, cannot start list": zed-industries/zed#53919). */
const GEMINI_TYPES = new Set(['string', 'number', 'integer', 'boolean', 'array', 'object']);

/**
 * Gemini's formats: "only 'enum' and 'date-time' are supported for STRING type" (google-gemini/gemini-cli#3178);
 * NUMBER "float", "double"; INTEGER "int32", "int64" (cloud.google.com/vertex-ai/docs/reference/rest/v1/Schema).
 */
const GEMINI_FORMATS: Record<string, Set<string>> = {
  string: new Set(['enum', 'date-time']),
  number: new Set(['float', 'double']),
  integer: new Set(['int32', 'int64']),
};

/**
 * A parameter name, for Gemini: "must start with a letter or an underscore and must only contain chars
 * a-z, A-Z, 0-9, or underscores with a maximum length of 64"
 * (cloud.google.com/vertex-ai/docs/reference/rest/v1beta1/FunctionDeclaration, `parameters`).
 */
const GEMINI_PARAMETER_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/**
 * Tool names. OpenAI: `^[a-zA-Z0-9_-]{1,64}$` ("a-z, A-Z, 0-9, or contain underscores and dashes, with a
 * maximum length of 64": platform.openai.com/docs/api-reference/chat/create, `tools[].function.name`).
 * Anthropic: `^[a-zA-Z0-9_-]{1,128}$` ("tools.0.custom.name: String should match pattern
 * '^[a-zA-Z0-9_-]{1,128}$'": home-assistant/core#147760; anthropics/claude-code#96152). Gemini: starts
 * with a letter or an underscore, then letters, digits, underscores, dots, colons, dashes, 64 at most
 * (ai.google.dev/api/caching#FunctionDeclaration; cloud.google.com/vertex-ai/docs/reference/rest/v1beta1/FunctionDeclaration).
 * `vendorName` makes names of 64 characters at most, which all three take.
 */
export const TOOL_NAME: Record<'openai' | 'anthropic' | 'gemini', RegExp> = {
  openai: /^[a-zA-Z0-9_-]{1,64}$/,
  anthropic: /^[a-zA-Z0-9_-]{1,128}$/,
  gemini: /^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/,
};

/**
 * How deep a schema is walked. No vendor documents a larger depth than OpenAI strict's 10 levels of
 * objects; past this many levels of any keyword the schema is refused rather than walked further, so
 * a hostile definition cannot exhaust the stack of the process that publishes it.
 */
export const MAX_WALK_DEPTH = 64;

// --- The checks --------------------------------------------------------------------------------------

type Node = Record<string, unknown>;
const isNode = (value: unknown): value is Node => value !== null && typeof value === 'object' && !Array.isArray(value);
const own = (node: Node, key: string): unknown => (Object.hasOwn(node, key) ? node[key] : undefined);
const pointerKey = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');

/** Every rule `schema` breaks as the input (or MCP output) schema of a tool published to `target`; [] when it may be published as is. */
export function checkSchema(schema: unknown, target: SchemaTarget): RuleBreak[] {
  const out: RuleBreak[] = [];
  const add = (pointer: string, keyword: string, message: string) => out.push({ target, pointer: pointer || '/', keyword, message });
  if (!isNode(schema) || own(schema, 'type') !== 'object') {
    // MCP: `inputSchema: { type: "object", … }` (modelcontextprotocol.io/specification/2025-06-18/server/tools, schema.ts);
    // Anthropic: `input_schema` is an object schema (docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use);
    // OpenAI: "schema must be a JSON Schema of 'type: "object"'" (chatanywhere/GPT_API_free#403);
    // Gemini: "parameters schema should be of type OBJECT" (diegosouzapw/OmniRoute#3360).
    add('', 'type', 'the root must be a JSON object with "type": "object" (tools take named arguments)');
    return out;
  }
  if (target === 'anthropic' || target === 'mcp') checkAnthropicRoot(schema, add);
  if (target === 'openai' || target === 'openai-strict' || target === 'mcp') checkOpenaiRoot(schema, add);
  if (target === 'openai-strict') checkStrict(schema, add);
  if (target === 'gemini') checkGemini(schema, add);
  if (out.length === 0) checkDepth(schema, add);
  return out;
}

type Add = (pointer: string, keyword: string, message: string) => void;

function checkAnthropicRoot(schema: Node, add: Add): void {
  // "tools.N.custom.input_schema: input_schema does not support oneOf, allOf, or anyOf at the top level"
  // (anthropics/claude-code#5319, #5878, #5973): one such tool fails every request that lists it.
  for (const keyword of ['oneOf', 'allOf', 'anyOf']) {
    if (Object.hasOwn(schema, keyword))
      add('', keyword, `Anthropic refuses "${keyword}" at the top level of input_schema: describe one object instead`);
  }
}

function checkOpenaiRoot(schema: Node, add: Add): void {
  // "Invalid schema for function 'x': schema must have type 'object' and not have
  // 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level" (langchain-ai/langchainjs#9804, nspady/google-calendar-mcp#39).
  for (const keyword of ['oneOf', 'anyOf', 'allOf', 'enum', 'not']) {
    if (Object.hasOwn(schema, keyword)) add('', keyword, `OpenAI refuses "${keyword}" at the top level of parameters: describe one object instead`);
  }
}

/** Calls `visit` on every subschema with its pointer and depth (in keywords); stops at MAX_WALK_DEPTH. */
function walk(schema: unknown, visit: (node: Node, pointer: string, depth: number) => void, tooDeep: (pointer: string) => void): void {
  const go = (node: unknown, pointer: string, depth: number) => {
    if (!isNode(node)) return;
    if (depth > MAX_WALK_DEPTH) {
      tooDeep(pointer);
      return;
    }
    visit(node, pointer, depth);
    for (const [key, value] of Object.entries(node)) {
      if (key === 'properties' || key === '$defs' || key === 'definitions' || key === 'patternProperties' || key === 'dependentSchemas') {
        if (isNode(value)) for (const [name, sub] of Object.entries(value)) go(sub, `${pointer}/${key}/${pointerKey(name)}`, depth + 1);
      } else if (key === 'anyOf' || key === 'oneOf' || key === 'allOf' || key === 'prefixItems' || (key === 'items' && Array.isArray(value))) {
        if (Array.isArray(value)) for (const [i, sub] of value.entries()) go(sub, `${pointer}/${key}/${i}`, depth + 1);
      } else if (SUBSCHEMA_KEYS.has(key)) {
        go(value, `${pointer}/${key}`, depth + 1);
      }
    }
  };
  go(schema, '', 0);
}

const SUBSCHEMA_KEYS = new Set([
  'items',
  'additionalProperties',
  'not',
  'if',
  'then',
  'else',
  'contains',
  'propertyNames',
  'unevaluatedProperties',
  'unevaluatedItems',
  'additionalItems',
]);

function checkDepth(schema: Node, add: Add): void {
  walk(
    schema,
    () => {},
    (pointer) => add(pointer, 'depth', `nested more than ${MAX_WALK_DEPTH} levels deep; no model API takes a schema this deep`),
  );
}

function checkStrict(schema: Node, add: Add): void {
  let properties = 0;
  let chars = 0;
  let enumValues = 0;
  walk(
    schema,
    (node, pointer, _depth) => {
      const at = pointer || '/';
      for (const key of Object.keys(node)) {
        if (!OPENAI_STRICT_KEYWORDS.has(key)) add(pointer, key, `OpenAI strict mode does not take "${key}" (${at}; ${OPENAI_STRICT_DOC})`);
      }
      const type = own(node, 'type');
      const isObject = type === 'object' || (Array.isArray(type) && type.includes('object')) || Object.hasOwn(node, 'properties');
      if (
        !Object.hasOwn(node, 'type') &&
        !Object.hasOwn(node, 'anyOf') &&
        !Object.hasOwn(node, '$ref') &&
        !Object.hasOwn(node, 'enum') &&
        !Object.hasOwn(node, 'const')
      ) {
        add(pointer, 'type', `OpenAI strict mode needs a "type" (or anyOf, $ref, enum, const) at ${at}: it cannot say "anything"`);
      }
      if (isObject) {
        // "additionalProperties: false must always be set in objects" and "all fields must be required".
        if (own(node, 'additionalProperties') !== false)
          add(pointer, 'additionalProperties', `OpenAI strict mode needs "additionalProperties": false at ${at}`);
        const props = own(node, 'properties');
        const names = isNode(props) ? Object.keys(props) : [];
        const required = own(node, 'required');
        const listed = new Set(Array.isArray(required) ? required : []);
        for (const name of names) {
          chars += name.length;
          if (!listed.has(name))
            add(
              `${pointer}/properties/${pointerKey(name)}`,
              'required',
              `OpenAI strict mode needs every property required; "${name}" at ${at} is not`,
            );
        }
        properties += names.length;
      }
      for (const defs of ['$defs', 'definitions']) {
        const value = own(node, defs);
        if (isNode(value)) for (const name of Object.keys(value)) chars += name.length;
      }
      const format = own(node, 'format');
      if (typeof format === 'string' && !OPENAI_STRICT_FORMATS.has(format))
        add(pointer, 'format', `OpenAI strict mode does not take the format "${format}" (${at})`);
      const values = own(node, 'enum');
      if (Array.isArray(values)) {
        enumValues += values.length;
        const text = values.reduce((n: number, v) => n + (typeof v === 'string' ? v.length : JSON.stringify(v).length), 0);
        chars += text;
        if (values.length > OPENAI_STRICT_LIMITS.bigEnum && values.every((v) => typeof v === 'string') && text > OPENAI_STRICT_LIMITS.bigEnumChars) {
          add(
            pointer,
            'enum',
            `OpenAI strict mode takes at most ${OPENAI_STRICT_LIMITS.bigEnumChars} characters in an enum of more than ${OPENAI_STRICT_LIMITS.bigEnum} strings (${at} has ${text})`,
          );
        }
      }
      if (Object.hasOwn(node, 'const')) chars += JSON.stringify(own(node, 'const')).length;
    },
    () => {},
  );
  const depth = objectDepth(schema);
  if (depth > OPENAI_STRICT_LIMITS.depth)
    add('', 'depth', `OpenAI strict mode takes ${OPENAI_STRICT_LIMITS.depth} levels of nested objects at most; this schema has ${depth}`);
  if (properties > OPENAI_STRICT_LIMITS.properties)
    add(
      '',
      'properties',
      `OpenAI strict mode takes ${OPENAI_STRICT_LIMITS.properties} object properties in all at most; this schema has ${properties}`,
    );
  if (enumValues > OPENAI_STRICT_LIMITS.enumValues)
    add('', 'enum', `OpenAI strict mode takes ${OPENAI_STRICT_LIMITS.enumValues} enum values in all at most; this schema has ${enumValues}`);
  if (chars > OPENAI_STRICT_LIMITS.chars)
    add('', 'length', `OpenAI strict mode takes ${OPENAI_STRICT_LIMITS.chars} characters of names and values at most; this schema has ${chars}`);
}

/** Levels of objects: the root object is 1, an object in one of its properties (or their items) 2, … */
function objectDepth(schema: Node): number {
  let deepest = 0;
  const go = (node: unknown, level: number, hops: number) => {
    if (!isNode(node) || hops > MAX_WALK_DEPTH) return;
    const type = own(node, 'type');
    const isObject = type === 'object' || (Array.isArray(type) && type.includes('object')) || Object.hasOwn(node, 'properties');
    const here = isObject ? level + 1 : level;
    deepest = Math.max(deepest, here);
    const props = own(node, 'properties');
    if (isNode(props)) for (const sub of Object.values(props)) go(sub, here, hops + 1);
    go(own(node, 'items'), here, hops + 1);
    for (const key of ['anyOf', 'oneOf', 'allOf']) {
      const list = own(node, key);
      if (Array.isArray(list)) for (const sub of list) go(sub, here, hops + 1);
    }
  };
  go(schema, 0, 0);
  return deepest;
}

function checkGemini(schema: Node, add: Add): void {
  walk(
    schema,
    (node, pointer) => {
      const at = pointer || '/';
      for (const key of Object.keys(node)) {
        if (!GEMINI_FIELDS.has(key)) add(pointer, key, `Gemini's Schema has no field "${key}" (${at}): the API answers "Unknown name"`);
      }
      const type = own(node, 'type');
      if (type !== undefined && (typeof type !== 'string' || !GEMINI_TYPES.has(type))) {
        add(
          pointer,
          'type',
          `Gemini takes one type of ${[...GEMINI_TYPES].join(', ')} at ${at}, not ${JSON.stringify(type)} (use "nullable" for null)`,
        );
      }
      const values = own(node, 'enum');
      // "function declaration enum only allowed for STRING type" (decolua/9router#380; microsoft/vscode#328147).
      if (values !== undefined && (type !== 'string' || !Array.isArray(values) || !values.every((v) => typeof v === 'string'))) {
        add(pointer, 'enum', `Gemini takes an enum of strings only, on "type": "string" (${at})`);
      }
      const format = own(node, 'format');
      if (format !== undefined && !(typeof type === 'string' && GEMINI_FORMATS[type]?.has(format as string))) {
        add(pointer, 'format', `Gemini does not take the format ${JSON.stringify(format)} for type ${JSON.stringify(type)} (${at})`);
      }
      if (type === 'object') {
        // "parameters.properties: should be non-empty for OBJECT type" (agno-agi/agno#2112; pipecat-ai/pipecat-flows#110).
        const props = own(node, 'properties');
        if (!isNode(props) || Object.keys(props).length === 0) {
          add(
            pointer,
            'properties',
            `Gemini needs a non-empty "properties" on every object (${at}); a tool without parameters is declared without "parameters"`,
          );
        } else {
          for (const name of Object.keys(props)) {
            if (!GEMINI_PARAMETER_NAME.test(name))
              add(
                `${pointer}/properties/${pointerKey(name)}`,
                'properties',
                `Gemini takes property names of [A-Za-z_][A-Za-z0-9_]{0,63}, not ${JSON.stringify(name)} (${at})`,
              );
          }
        }
      }
      if (Array.isArray(own(node, 'items'))) add(pointer, 'items', `Gemini takes one schema in "items", not a list (tuples) (${at})`);
    },
    () => {},
  );
}

// --- Requests, as a model API receives them -----------------------------------------------------------

export type ApiVendor = 'openai' | 'anthropic' | 'gemini';

/** A refused tool of a request: its place in the request (as the API names it) and the rule it breaks. */
export interface RequestBreak extends RuleBreak {
  param: string;
}

/**
 * Every rule the tool list of a request to `vendor` breaks, in the request's own shape: OpenAI's
 * `tools: [{ type: "function", function: { name, parameters, strict } }]`, Anthropic's
 * `tools: [{ name, input_schema }]`, Gemini's `tools: [{ functionDeclarations: [{ name, parameters }] }]`.
 * What a scripted model checks before it answers; a real API refuses the whole request for any one.
 */
export function checkRequestTools(vendor: ApiVendor, tools: unknown): RequestBreak[] {
  if (tools === undefined) return [];
  if (!Array.isArray(tools)) return [{ target: vendor, pointer: '/', keyword: 'tools', message: 'tools must be a list', param: 'tools' }];
  const out: RequestBreak[] = [];
  const names = new Set<string>();
  const named = (name: unknown, param: string) => {
    if (typeof name !== 'string' || !TOOL_NAME[vendor].test(name)) {
      out.push({
        target: vendor,
        pointer: '/',
        keyword: 'name',
        message: `${JSON.stringify(name)} is not a tool name ${vendor} takes (${TOOL_NAME[vendor].source})`,
        param,
      });
    } else if (names.has(name)) {
      out.push({ target: vendor, pointer: '/', keyword: 'name', message: `tool names must be unique; "${name}" is given twice`, param });
    } else names.add(name);
  };
  const schema = (value: unknown, target: SchemaTarget, param: string) => {
    for (const b of checkSchema(value, target)) out.push({ ...b, param });
  };
  tools.forEach((tool, i) => {
    if (!isNode(tool)) return;
    if (vendor === 'openai') {
      const fn = own(tool, 'function');
      if (!isNode(fn)) return;
      named(own(fn, 'name'), `tools[${i}].function.name`);
      const parameters = own(fn, 'parameters');
      if (parameters !== undefined) schema(parameters, own(fn, 'strict') === true ? 'openai-strict' : 'openai', `tools[${i}].function.parameters`);
    } else if (vendor === 'anthropic') {
      named(own(tool, 'name'), `tools.${i}.name`);
      schema(own(tool, 'input_schema'), 'anthropic', `tools.${i}.custom.input_schema`);
    } else {
      const declarations = own(tool, 'functionDeclarations') ?? own(tool, 'function_declarations');
      if (!Array.isArray(declarations)) return;
      declarations.forEach((fn, j) => {
        if (!isNode(fn)) return;
        named(own(fn, 'name'), `tools[${i}].function_declarations[${j}].name`);
        const parameters = own(fn, 'parameters');
        if (parameters !== undefined) schema(parameters, 'gemini', `tools[${i}].function_declarations[${j}].parameters`);
      });
    }
  });
  return out;
}
