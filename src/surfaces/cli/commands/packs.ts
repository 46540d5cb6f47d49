import { basename, dirname, resolve } from 'node:path';
import { projectLocation } from '../../../engine-options.js';
import { installProject } from '../../../install.js';
import { buildPack } from '../../../packs/build.js';
import { addPack, type GrantRequest, listPacks, type PackOperationOptions, type PackReport, removePack, updatePack } from '../../../packs/install.js';
import { bool, maxPositionals, str, UsageError } from '../args.js';
import type { CommandSpec } from '../command.js';
import type { Context } from '../context.js';
import { EXIT } from '../io.js';

function projectDir(ctx: Context): string {
  return projectLocation({ workspace: ctx.workspace, project: ctx.project }).projectDir;
}

/** What `arium add` and `arium update` need: where, how to ask, how to install npm packages. */
function operation(ctx: Context): PackOperationOptions {
  return {
    projectDir: projectDir(ctx),
    confirm: (request) => confirm(ctx, request),
    installDependencies: async (dir) => {
      await installProject({ workspace: dirname(dir), project: basename(dir), offline: bool(ctx.parsed, 'offline') });
    },
  };
}

/** Shows what a pack asks for and takes an explicit yes: --yes, or "y" typed at a terminal. Never a default. */
async function confirm(ctx: Context, request: GrantRequest): Promise<boolean> {
  const { c } = ctx;
  const lines = [
    request.previous
      ? `${c.bold(request.name)} ${request.previous.version} → ${request.version} asks for more than the installed version was granted:`
      : `${c.bold(request.name)} ${request.version} asks for:`,
    ...request.grants.map((g) => `  ${request.added.includes(g) ? c.yellow('+') : ' '} ${g}`),
  ];
  if (request.secrets.length > 0) lines.push(`  secrets it needs (arium.json "secrets"): ${request.secrets.join(', ')}`);
  if (request.tools.length > 0) lines.push(`  tools: ${request.tools.join(', ')}`);
  for (const note of request.notes) lines.push(`  ${c.dim(`note: ${note}`)}`);
  ctx.io.stderr.write(`${lines.join('\n')}\n`);
  if (bool(ctx.parsed, 'yes')) return true;
  const ask = ctx.io.ask;
  if (!ask) {
    ctx.io.stderr.write('no terminal to ask, and --yes was not given: nothing is granted\n');
    return false;
  }
  const answer = await ask(`Grant ${request.added.join(', ')} to pack ${request.name}? [y/N] `, ctx.io.interrupt());
  return answer !== null && /^y(es)?$/i.test(answer.trim());
}

function printReport(ctx: Context, verb: string, report: PackReport): number {
  if (ctx.json) {
    ctx.emit({ ok: true, ...report });
    return EXIT.ok;
  }
  const { c } = ctx;
  const from = report.previous_version ? ` ${report.previous_version} →` : '';
  ctx.out(
    `${c.green(verb)} ${report.name}${from} ${report.version} (${report.tools.length} tools: ${report.tools.join(', ') || 'none'}) sha256:${report.hash.slice(0, 16)}…`,
  );
  if (report.granted.length > 0) ctx.out(`  granted in arium.json: ${report.granted.join(', ')}`);
  if (report.skills.length > 0) ctx.out(`  skills copied to skills/: ${report.skills.join(', ')}`);
  for (const note of report.notes) ctx.out(`  ${c.dim(`note: ${note}`)}`);
  return EXIT.ok;
}

export const addSpec: CommandSpec = {
  name: 'add',
  usage: 'arium add <folder | tarball | git URL> [--yes] [--offline]',
  summary: 'install a tool pack into the project as packs/<name>, its tools named <name>.<tool>',
  details: [
    'A pack is a folder, a tarball (npm pack or arium pack) or a git URL (git+file:///…, …/repo.git#tag) holding',
    'arium-pack.yaml (name, version, permissions, secrets), tools/ and optionally package.json, skills/.',
    'What the pack asks for is shown and granted (written into arium.json "grants") only after an explicit',
    'yes at the terminal, or --yes. Its version and sha256 are recorded in arium-lock.json; a pack whose files',
    'later differ from that hash is not loaded.',
  ].join('\n'),
  flags: {
    yes: { help: 'grant what the pack asks for without asking' },
    offline: { help: 'npm takes the pack’s packages from its cache (--prefer-offline)' },
  },
  run: async (ctx) => {
    maxPositionals(ctx.parsed, 1, addSpec.usage);
    const source = ctx.parsed.positionals[0];
    if (!source) throw new UsageError('give the pack to add: a folder, a tarball or a git URL');
    return printReport(ctx, 'added', await addPack(source, ctx.io.cwd, operation(ctx)));
  },
};

export const updateSpec: CommandSpec = {
  name: 'update',
  usage: 'arium update [<pack>] [--yes] [--offline]',
  summary: 'install again what a pack’s source holds now; more permissions wait for an explicit yes',
  flags: addSpec.flags,
  run: async (ctx) => {
    maxPositionals(ctx.parsed, 1, updateSpec.usage);
    const dir = projectDir(ctx);
    const names = ctx.parsed.positionals[0] ? [ctx.parsed.positionals[0]] : (await listPacks(dir, false)).map((p) => p.name);
    const reports: PackReport[] = [];
    for (const name of names) reports.push(await updatePack(name, operation(ctx)));
    if (ctx.json) {
      ctx.emit({ ok: true, packs: reports });
      return EXIT.ok;
    }
    if (reports.length === 0) ctx.out('no packs installed');
    for (const report of reports) printReport(ctx, 'updated', report);
    return EXIT.ok;
  },
};

export const removeSpec: CommandSpec = {
  name: 'remove',
  usage: 'arium remove <pack>',
  summary: 'remove an installed pack, its skills, and the grants it added that no other pack needs',
  flags: {},
  run: async (ctx) => {
    maxPositionals(ctx.parsed, 1, removeSpec.usage);
    const name = ctx.parsed.positionals[0];
    if (!name) throw new UsageError('give the name of the pack to remove (see arium packs)');
    const removed = await removePack(name, projectDir(ctx));
    if (ctx.json) ctx.emit({ ok: true, ...removed });
    else
      ctx.out(
        `${ctx.c.green('removed')} ${removed.name} ${removed.version}${removed.revoked.length > 0 ? `; revoked ${removed.revoked.join(', ')}` : ''}`,
      );
    return EXIT.ok;
  },
};

export const packsSpec: CommandSpec = {
  name: 'packs',
  usage: 'arium packs [--offline]',
  summary: 'list the installed packs, and the newer version each source holds',
  flags: { offline: { help: 'do not read the sources again (no update check)' } },
  run: async (ctx) => {
    maxPositionals(ctx.parsed, 0, packsSpec.usage);
    const rows = await listPacks(projectDir(ctx), !bool(ctx.parsed, 'offline'));
    if (ctx.json) {
      ctx.emit({ ok: true, packs: rows });
      return EXIT.ok;
    }
    if (rows.length === 0) ctx.out('no packs installed (arium add <folder | tarball | git URL>)');
    for (const row of rows) {
      const update = row.available ? `  ${ctx.c.yellow(`update available: ${row.available}`)} (arium update ${row.name})` : '';
      const unread = row.available_error ? `  ${ctx.c.dim(`source not read: ${row.available_error}`)}` : '';
      ctx.out(`${ctx.c.bold(row.name)} ${row.version}  ${row.source.kind} ${row.source.ref}  ${row.tools.length} tools${update}${unread}`);
    }
    return EXIT.ok;
  },
};

export const packSpec: CommandSpec = {
  name: 'pack',
  usage: 'arium pack [--name <pack>] [--version <v>] [--out <file>]',
  summary: 'build a pack tarball from the project’s tools, skills and npm pins, for `arium add`',
  flags: {
    name: { value: true, arg: '<pack>', help: 'the pack’s name and namespace (default the project’s name)' },
    version: { value: true, arg: '<v>', help: 'the pack’s version (default 0.1.0)' },
    out: { value: true, arg: '<file>', help: 'where to write it (default ./<name>-<version>.tgz)' },
  },
  run: async (ctx) => {
    maxPositionals(ctx.parsed, 0, packSpec.usage);
    const name = str(ctx.parsed, 'name') ?? ctx.project.toLowerCase();
    const version = str(ctx.parsed, 'version') ?? '0.1.0';
    const out = resolve(ctx.io.cwd, str(ctx.parsed, 'out') ?? `${name}-${version}.tgz`);
    const built = await buildPack(projectDir(ctx), { name, version, out });
    if (ctx.json) ctx.emit({ ok: true, ...built });
    else
      ctx.out(
        `${ctx.c.green('packed')} ${built.manifest.name} ${built.manifest.version} → ${built.path} (${built.files} files, ${built.bytes} bytes, sha256 ${built.sha256}); permissions: ${built.manifest.permissions.join(', ') || 'none'}`,
      );
    return EXIT.ok;
  },
};
