import { PackageInstallError } from '../../../../runners/js/packages.js';
import { installProject } from '../../../install.js';
import { bool, maxPositionals } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, installSpec.usage);
  const stop = ctx.io.interrupt();
  let report: Awaited<ReturnType<typeof installProject>>;
  try {
    report = await installProject({ workspace: ctx.workspace, project: ctx.project, offline: bool(ctx.parsed, 'offline'), signal: stop });
  } catch (error) {
    if (error instanceof PackageInstallError) throw new HostError(error.message);
    throw error;
  }
  if (ctx.json) {
    ctx.emit(report);
    return EXIT.ok;
  }
  const { c } = ctx;
  if (!report.js) {
    ctx.out(`${c.dim('nothing to install:')} project ${ctx.project} pins no packages (package.json for JS tools)`);
    return EXIT.ok;
  }
  const js = report.js;
  ctx.out(
    js.changed
      ? `${c.green('installed')} ${js.packages} npm packages for JS tools in ${js.seconds} s → ${js.path}${js.lock_written ? ' (wrote package-lock.json next to package.json)' : ''}`
      : `${c.green('up to date')} ${js.packages} npm packages for JS tools (${js.path})`,
  );
  return EXIT.ok;
}

export const installSpec: CommandSpec = {
  name: 'install',
  usage: 'arium install [--offline]',
  summary: 'install the project’s pinned dependencies (package.json for JS tools) into its .arium folder',
  details: [
    'JS tools: the project’s package.json (next to tools/) and its lock file are installed with npm into',
    '<project>/.arium/js-packages (`npm ci` with a lock file; without one `npm install`, whose lock file is',
    'copied next to package.json). Install scripts are not run. Tools importing those packages are bundled',
    'for the sandbox when they load. --offline takes packages from npm’s cache when it has them.',
  ].join('\n'),
  flags: {
    offline: { value: false, help: 'prefer npm’s cache (--prefer-offline)' },
  },
  run,
};
