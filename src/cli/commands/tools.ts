import { type Context, withEngine } from '../context.js';
import { table } from '../format.js';
import { EXIT } from '../io.js';

export async function toolsCommand(ctx: Context): Promise<number> {
  return withEngine(ctx, (engine) => {
    const tools = engine.tools();
    const problems = engine.problems();
    if (ctx.json) {
      ctx.emit({ project: engine.project, tools, problems });
      return EXIT.ok;
    }
    const { c } = ctx;
    ctx.out(c.bold(`${tools.length} tools in project ${engine.project}`));
    ctx.out(table(tools.map((t) => [c.cyan(t.id), t.runner, t.permissions.join(',') || '-', t.description])));
    if (problems.length > 0) {
      ctx.out('');
      ctx.out(c.yellow(`${problems.length} definition file${problems.length === 1 ? '' : 's'} did not load:`));
      for (const p of problems) {
        ctx.out(`  ${c.bold(p.file)}${p.at ? c.dim(` at ${p.at}`) : ''}: ${p.message}${p.stale ? c.dim(' [stale]') : ''}`);
      }
    }
    return EXIT.ok;
  });
}
