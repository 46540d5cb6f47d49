import { exportTools, VENDORS, type Vendor } from '../../export.js';
import { DISCOVERY_MODES, type Discovery } from '../../mcp/profile.js';
import { bool, maxPositionals, str, UsageError } from '../args.js';
import type { CommandSpec } from '../command.js';
import { type Context, withEngine } from '../context.js';
import { table } from '../format.js';
import { EXIT } from '../io.js';

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, toolsSpec.usage);
  const format = str(ctx.parsed, 'format');
  if (format !== undefined && !(VENDORS as readonly string[]).includes(format)) {
    throw new UsageError(`Option --format takes ${VENDORS.join(', ')} (got "${format}")`);
  }
  if (bool(ctx.parsed, 'strict') && format !== 'openai') throw new UsageError('Option --strict is for --format openai');
  const discovery = str(ctx.parsed, 'discovery');
  if (discovery !== undefined && !(DISCOVERY_MODES as readonly string[]).includes(discovery)) {
    throw new UsageError(`Option --discovery takes ${DISCOVERY_MODES.join(' or ')} (got "${discovery}")`);
  }
  if (discovery !== undefined && format === undefined) throw new UsageError('Option --discovery is for --format');
  // Warmed up: the listing reports each tool's syntax errors, which only the code checks find.
  return withEngine(
    ctx,
    async (engine) => {
      // Lazy providers start for the listing, so that their tools are in it.
      if (engine.config.providers) await engine.refresh();
      const tools = engine.tools();
      if (format !== undefined) {
        // One JSON document, --json or not: it is meant for another program.
        const exported = exportTools(tools, format as Vendor, {
          strict: bool(ctx.parsed, 'strict'),
          ...(discovery ? { discovery: discovery as Discovery } : {}),
        });
        ctx.emit(exported);
        for (const p of exported.problems) ctx.io.stderr.write(`arium: ${p.tool}: ${p.message}\n`);
        return EXIT.ok;
      }
      const problems = engine.problems();
      if (ctx.json) {
        ctx.emit({ project: engine.project, tools, problems });
        return EXIT.ok;
      }
      const { c } = ctx;
      // By where each comes from: the engine and its runners (the builtins, code.run), the project's
      // tools/ folder, its packs, its providers.
      const own = tools.filter((t) => t.source.startsWith('tools/')).length;
      const packed = tools.filter((t) => t.source.startsWith('packs/')).length;
      const provided = tools.filter((t) => t.runner === 'provider').length;
      const fromProviders = `${packed > 0 ? `, ${packed} from packs` : ''}${provided > 0 ? `, ${provided} from providers` : ''}`;
      ctx.out(
        c.bold(
          `${tools.length} tools in project ${engine.project} (${tools.length - own - packed - provided} builtin, ${own} from tools/${fromProviders})`,
        ),
      );
      ctx.out(table(tools.map((t) => [c.cyan(t.id), t.runner, t.permissions.join(',') || '-', t.description])));
      const load = problems.filter((p) => p.vendor === undefined);
      const publishing = problems.filter((p) => p.vendor !== undefined);
      if (load.length > 0) {
        ctx.out('');
        ctx.out(c.yellow(`${load.length} definition file${load.length === 1 ? '' : 's'} did not load:`));
        for (const p of load) {
          const stale = p.stale ? c.dim(' (the last good version is still served)') : '';
          ctx.out(`  ${c.bold(p.file)}${p.at ? c.dim(` at ${p.at}`) : ''}: ${p.message}${stale}`);
        }
      }
      if (publishing.length > 0) {
        ctx.out('');
        ctx.out(
          c.yellow(`${publishing.length} tool schema problem${publishing.length === 1 ? '' : 's'} (the tool runs, but a model API cannot take it):`),
        );
        for (const p of publishing) ctx.out(`  ${c.bold(p.id ?? p.file)}${p.at ? c.dim(` at ${p.at}`) : ''}: ${p.message}`);
      }
      return EXIT.ok;
    },
    { warmUp: true },
  );
}

export const toolsSpec: CommandSpec = {
  name: 'tools',
  usage: 'arium tools [--format openai|anthropic|gemini|mcp] [--strict] [--discovery all|search]',
  summary: 'list the tools (builtins and the project’s own) and the definition files that did not load',
  details: [
    'Columns: id, runner, permissions, description. With --json: { project, tools, problems }, each tool with its schemas.',
    'With --format: the tools as a function-calling API takes them, as JSON: { vendor, tools, names, problems, rewrites }',
    '(names maps each vendor name back to its tool id; dots become "__"; rewrites says which schemas were reshaped for',
    'the vendor, problems which tools were left out or are not strict, and why). --strict (openai): strict-mode schemas.',
    'gemini: function declarations, sent as tools: [{ functionDeclarations: tools }].',
  ].join('\n'),
  flags: {
    format: { value: true, arg: '<vendor>', help: 'openai, anthropic, gemini or mcp: print the tools in that tool schema' },
    strict: { help: "with --format openai: OpenAI's strict mode (every property required, optional ones nullable)" },
    discovery: {
      value: true,
      arg: '<mode>',
      help: 'with --format: all (default) exports every tool; search only tools.search, tools.describe, tools.call (and code.run)',
    },
  },
  run,
};
