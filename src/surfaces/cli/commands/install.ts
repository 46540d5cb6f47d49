import { ProjectConfigError } from '../../../config.js';
import { EngineConfigError } from '../../../engine.js';
import { type InstallOptions, type InstallReport, installProject, isInstallFailure } from '../../../install.js';
import { bool, list, maxPositionals, str } from '../args.js';
import { type CommandSpec, HostError } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

function pipOptions(ctx: Context): InstallOptions['pip'] {
  const findLinks = list(ctx.parsed, 'find-links');
  const indexUrl = str(ctx.parsed, 'index-url');
  const noIndex = bool(ctx.parsed, 'no-index');
  if (!findLinks && !indexUrl && !noIndex) return undefined;
  return { ...(findLinks ? { findLinks } : {}), ...(indexUrl ? { indexUrl } : {}), ...(noIndex ? { noIndex } : {}) };
}

async function run(ctx: Context): Promise<number> {
  maxPositionals(ctx.parsed, 0, installSpec.usage);
  const stop = ctx.io.interrupt();
  const pip = pipOptions(ctx);
  let report: InstallReport;
  try {
    report = await installProject({
      workspace: ctx.workspace,
      project: ctx.project,
      offline: bool(ctx.parsed, 'offline'),
      ...(pip ? { pip } : {}),
      signal: stop,
    });
  } catch (error) {
    // Both carry a message that says what failed and how to fix it (pip's or npm's own words included).
    if (isInstallFailure(error)) throw new HostError(error.message);
    if (error instanceof ProjectConfigError) throw new EngineConfigError(error.message, 'arium.json');
    throw error;
  }
  if (ctx.json) {
    ctx.emit(report);
    return EXIT.ok;
  }
  const { c } = ctx;
  if (!report.js && !report.python) {
    ctx.out(`${c.dim('nothing to install:')} project ${ctx.project} pins no packages (package.json for JS tools, requirements.txt for Python tools)`);
    return EXIT.ok;
  }
  const { js, python } = report;
  if (js) {
    ctx.out(
      js.changed
        ? `${c.green('installed')} ${js.packages} npm packages for JS tools in ${js.seconds} s → ${js.path}${js.lock_written ? ' (wrote package-lock.json next to package.json)' : ''}`
        : `${c.green('up to date')} ${js.packages} npm packages for JS tools (${js.path})`,
    );
  }
  if (python) {
    const names = python.packages.map((p) => `${p.name}==${p.version}`).join(', ') || 'no packages';
    ctx.out(
      python.changed
        ? `${c.green('installed')} a Python ${python.python_version} environment in ${python.seconds} s → ${python.path} (${names})`
        : `${c.green('up to date')} Python ${python.python_version} environment (${python.path}: ${names})`,
    );
  }
  return EXIT.ok;
}

export const installSpec: CommandSpec = {
  name: 'install',
  usage: 'arium install [--offline] [--find-links <dir|url>]… [--no-index] [--index-url <url>]',
  summary: 'install the project’s pinned dependencies (package.json, requirements.txt) into its .arium folder',
  details: [
    'JS tools: the project’s package.json (next to tools/) and its lock file are installed with npm into',
    '<project>/.arium/js-packages (`npm ci` with a lock file; without one `npm install`, whose lock file is',
    'copied next to package.json). Install scripts are not run. Tools importing those packages are bundled',
    'for the sandbox when they load. --offline takes packages from npm’s cache when it has them.',
    '',
    'Python tools: the project’s requirements.txt (every line pinned with ==, every file with --hash) is',
    'installed into a virtual environment, <project>/.arium/python-env, made from arium.json’s `python`',
    '(default python3). Only wheels are accepted, so no package code runs at install time. The Python runner',
    'then runs the project’s tools with that environment. pip finds the wheels through its own configuration',
    '(pip.conf, PIP_INDEX_URL), arium.json’s `pip` ({"find_links": ["wheels"], "no_index": true}), or the',
    'flags below, which add to arium.json’s.',
  ].join('\n'),
  flags: {
    offline: { value: false, help: 'prefer npm’s cache (--prefer-offline)' },
    'find-links': { value: true, repeat: true, arg: '<dir|url>', help: 'a folder or URL of wheels for pip (repeatable)' },
    'no-index': { value: false, help: 'pip uses no package index, only --find-links and arium.json’s find_links' },
    'index-url': { value: true, arg: '<url>', help: 'the package index pip uses instead of its default' },
  },
  run,
};
