import { TOOL_META_SCHEMA } from '../../index.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

export async function schemaCommand(ctx: Context): Promise<number> {
  ctx.emit(TOOL_META_SCHEMA);
  return EXIT.ok;
}
