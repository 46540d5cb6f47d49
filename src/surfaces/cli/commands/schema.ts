import { TOOL_META_SCHEMA } from '../../../index.js';
import { maxPositionals } from '../args.js';
import type { CommandSpec } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, schemaSpec.usage);
  // The schema is JSON whatever the mode: --json changes nothing here.
  ctx.emit(TOOL_META_SCHEMA);
  return EXIT.ok;
}

export const schemaSpec: CommandSpec = {
  name: 'schema',
  usage: 'arium schema',
  summary: 'print the JSON Schema of tool definition files',
  details: 'The same document as schema/tool.schema.json; point a definition\'s "$schema" at it for editor completion.',
  flags: {},
  run,
};
