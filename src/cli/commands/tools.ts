import { maxPositionals } from '../args.js';
import type { CommandSpec } from '../command.js';
import { type Context, withEngine } from '../context.js';
import { table } from '../format.js';
import { EXIT } from '../io.js';

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, toolsSpec.usage);
  return withEngine(ctx, (engine) => {
    const tools = engine.tools();
    const problems = engine.problems();
    if (ctx.json) {
      ctx.emit({ project: engine.project, tools, problems });
      return EXIT.ok;
    }
    const { c } = ctx;
    const own = tools.filter((t) => t.runner !== 'builtin').length;
    ctx.out(c.bold(`${tools.length} tools in project ${engine.project} (${tools.length - own} builtin, ${own} from tools/)`));
    ctx.out(table(tools.map((t) => [c.cyan(t.id), t.runner, t.permissions.join(',') || '-', t.description])));
    if (problems.length > 0) {
      ctx.out('');
      ctx.out(c.yellow(`${problems.length} definition file${problems.length === 1 ? '' : 's'} did not load:`));
      for (const p of problems) {
        const stale = p.stale ? c.dim(' (the last good version is still served)') : '';
        ctx.out(`  ${c.bold(p.file)}${p.at ? c.dim(` at ${p.at}`) : ''}: ${p.message}${stale}`);
      }
    }
    return EXIT.ok;
  });
}

export const toolsSpec: CommandSpec = {
  name: 'tools',
  usage: 'arium tools',
  summary: 'list the tools (builtins and the project’s own) and the definition files that did not load',
  details: 'Columns: id, runner, permissions, description. With --json: { project, tools, problems }, each tool with its schemas.',
  flags: {},
  run,
};
