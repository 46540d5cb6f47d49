import { MACRO_LIMITS, TOOL_LIMIT_CEILINGS } from '../limits.js';
import type { RunnerCatalog } from '../runner-catalog.js';

/**
 * The JSON Schema of a tool definition file. Published as `schema/tool.schema.json` for editors
 * (`arium schema` prints it; a test keeps the published file equal to this object).
 */

export const TOOL_ID_PATTERN = '^[a-z0-9][a-z0-9_-]*(\\.[a-z0-9][a-z0-9_-]*)*$';

/** The schema for the runners of `catalog`: their names, and the permissions they and the engine know. */
export function toolMetaSchema(catalog: RunnerCatalog) {
  const names = catalog.permissionNames();
  const unscoped = names.filter((n) => n !== 'vfs.read' && n !== 'vfs.write' && n !== 'secret.read').map((n) => n.replace(/[.-]/g, '\\$&'));
  const composite = catalog.composite();
  const runnerFields = [...catalog.toolFields()];
  const permissionPattern = `^(?:(?:vfs\\.read|vfs\\.write)(?::/[^\\u0000\\\\]*)?|secret\\.read(?::[A-Za-z][A-Za-z0-9_-]{0,63})?|${unscoped.join('|')})$`;
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    $id: 'urn:arium:schema:tool:v1',
    title: 'Arium tool definition',
    description: 'A tool the Arium engine loads from workspace/<project>/tools/*.json, or *.yaml and *.yml (the same data in YAML 1.2)',
    type: 'object',
    additionalProperties: false,
    required: ['id', 'description', 'runner', 'schema'],
    properties: {
      $schema: { type: 'string', description: 'Editors may point this at schema/tool.schema.json' },
      id: {
        type: 'string',
        minLength: 1,
        maxLength: 128,
        pattern: TOOL_ID_PATTERN,
        description: 'Dot-separated lowercase segments, unique in the project, e.g. "text.reverse"',
      },
      name: { type: 'string', minLength: 1, maxLength: 200, description: 'Human-readable name; defaults to the id' },
      description: { type: 'string', minLength: 1, maxLength: 4000, description: 'What the tool does, for people and models' },
      runner: { enum: catalog.names(), description: 'Which runner executes the tool' },
      entry: {
        type: 'string',
        minLength: 1,
        maxLength: 1024,
        description: 'File of the tool code, relative to the tools folder; must stay inside it',
      },
      schema: { type: 'object', description: 'JSON Schema (2020-12, 2019-09 or draft-07) of the input; its root type is "object"' },
      output_schema: { type: 'object', description: 'Optional JSON Schema the output is validated against' },
      permissions: {
        type: 'array',
        maxItems: 64,
        uniqueItems: true,
        items: { type: 'string', pattern: permissionPattern },
        description: `What the tool needs: ${names.join(', ')}; VFS permissions may carry a scope, e.g. "vfs.read:/docs/**"`,
      },
      examples: {
        type: 'array',
        maxItems: 10,
        items: { type: 'object' },
        description: 'Example inputs (each must match "schema"); shown to models and used by `arium demo`',
      },
      provides: {
        type: 'array',
        maxItems: 16,
        uniqueItems: true,
        items: { type: 'string', minLength: 1, maxLength: 128, pattern: TOOL_ID_PATTERN },
        description:
          'Capabilities this tool provides, e.g. ["summarize"]: a caller may ask for one instead of an id, and the one tool providing it that the caller may call runs',
      },
      steps: {
        type: 'array',
        minItems: 1,
        maxItems: MACRO_LIMITS.max_steps,
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['tool'],
          properties: {
            tool: { type: 'string', minLength: 1, maxLength: 128, pattern: TOOL_ID_PATTERN, description: 'The id of the tool this step calls' },
            input: {
              description:
                'The input of the call: any JSON, in which {"$from": "/input/…"} or {"$from": "/steps/<n>/output/…"} is replaced by the value that JSON pointer finds in { input, steps: [{ output }, …] }; {} when absent',
            },
            when: { $ref: '#/$defs/condition' },
          },
        },
        description: `A macro's steps (runner ${composite.join(', ') || 'none'}), run in order in one transaction; at most ${MACRO_LIMITS.max_steps}`,
      },
      output: {
        description: "A macro's output: a template over { input, steps } like a step's input; the last step's output when absent",
      },
      ...Object.fromEntries(runnerFields.map(([field, { schema }]) => [field, schema])),
      limits: {
        type: 'object',
        additionalProperties: false,
        properties: {
          timeout_ms: { type: 'integer', minimum: 1, maximum: TOOL_LIMIT_CEILINGS.timeout_ms },
          memory_mb: { type: 'integer', minimum: 8, maximum: TOOL_LIMIT_CEILINGS.memory_mb },
          output_bytes: { type: 'integer', minimum: 1, maximum: TOOL_LIMIT_CEILINGS.output_bytes },
          max_attempts: {
            type: 'integer',
            minimum: 1,
            maximum: TOOL_LIMIT_CEILINGS.max_attempts,
            description: 'Runs a call may take when another call changed what it read before it committed (1: never re-run; CONFLICT instead)',
          },
        },
      },
    },
    allOf: [
      {
        if: { properties: { runner: { enum: ['builtin', ...composite] } }, required: ['runner'] },
        // biome-ignore lint/suspicious/noThenProperty: "then" is a JSON Schema keyword here
        then: { not: { required: ['entry'] } },
        else: { required: ['entry'] },
      },
      {
        if: { properties: { runner: { enum: composite.length > 0 ? composite : [null] } }, required: ['runner'] },
        // biome-ignore lint/suspicious/noThenProperty: "then" is a JSON Schema keyword here
        then: { required: ['steps'] },
        else: { not: { anyOf: [{ required: ['steps'] }, { required: ['output'] }] } },
      },
      // A field one runner adds is refused in the definitions of the others.
      ...runnerFields.map(([field, { runners }]) => ({
        if: { not: { properties: { runner: { enum: runners } }, required: ['runner'] } },
        // biome-ignore lint/suspicious/noThenProperty: "then" is a JSON Schema keyword here
        then: { not: { required: [field] } },
      })),
    ],
    $defs: {
      condition: {
        description:
          'Runs the step only when it holds: {"$from": pointer, "equals": value}, {"$from": pointer, "exists": true|false}, or {"not": condition}; a skipped step has output null',
        type: 'object',
        additionalProperties: false,
        minProperties: 1,
        // The combinations are checked at load with a message naming them (ajv's oneOf errors list every branch).
        properties: {
          $from: { $ref: '#/$defs/pointer' },
          equals: { description: 'The value at $from must be this JSON value' },
          exists: { type: 'boolean', description: 'Whether $from must find a value' },
          not: { $ref: '#/$defs/condition' },
        },
      },
      pointer: {
        type: 'string',
        pattern: '^/(input|steps/(0|[1-9][0-9]*)/output)(/.*)?$',
        description: 'A JSON pointer into { input, steps: [{ output }, …] }',
      },
    },
  } as const;
}
