import { resolve } from 'node:path';
import { type Engine, ToolFailure } from '../../../index.js';
import { bool, maxPositionals as noExtra, UsageError } from '../args.js';
import type { CommandSpec } from '../command.js';
import { type Context, withEngine } from '../context.js';
import { EXIT } from '../io.js';
import { progress } from './history.js';

async function importCmd(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 2, 'arium import <host-dir> [vfs-path]');
  const [hostDir, vfsPath = '/'] = ctx.parsed.positionals;
  if (!hostDir) throw new UsageError('arium import needs a host folder: arium import <host-dir> [vfs-path]');
  return withEngine(ctx, (engine) => {
    const r = engine.importFrom(resolve(ctx.io.cwd, hostDir), vfsPath, progress(ctx, 'imported files'));
    if (ctx.json) ctx.emit(r);
    else {
      ctx.out(`${ctx.c.green('imported')} ${r.files} files, ${r.dirs} folders, ${r.bytes} bytes into ${vfsPath}`);
      for (const s of r.skipped) ctx.out(ctx.c.yellow(`  skipped ${s.path}: ${s.reason}`));
    }
    return EXIT.ok;
  });
}

async function exportCmd(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 2, 'arium export <vfs-path> <host-dir> [--overwrite]');
  const [vfsPath, hostDir] = ctx.parsed.positionals;
  if (!vfsPath || !hostDir) throw new UsageError('arium export needs a VFS path and a host folder: arium export <vfs-path> <host-dir>');
  return withEngine(ctx, (engine) => {
    let r: ReturnType<Engine['exportTo']>;
    try {
      r = engine.exportTo(vfsPath, resolve(ctx.io.cwd, hostDir), { overwrite: bool(ctx.parsed, 'overwrite') }, progress(ctx, 'exported files'));
    } catch (error) {
      // The library names its option; here the way to say it is the command's flag.
      if (error instanceof ToolFailure && error.details?.option === 'overwrite') {
        throw new ToolFailure(
          error.stage,
          error.code,
          `The target folder ${String(error.details.path)} is not empty (add --overwrite to write into it)`,
          {
            details: error.details,
          },
        );
      }
      throw error;
    }
    if (ctx.json) ctx.emit(r);
    else ctx.out(`${ctx.c.green('exported')} ${r.files} files, ${r.dirs} folders, ${r.bytes} bytes to ${hostDir}`);
    return EXIT.ok;
  });
}

export const importSpec: CommandSpec = {
  name: 'import',
  usage: 'arium import <host-dir> [vfs-path]',
  summary: 'copy a host folder into the VFS as one atomic change (links are never followed)',
  flags: {},
  run: importCmd,
};

export const exportSpec: CommandSpec = {
  name: 'export',
  usage: 'arium export <vfs-path> <host-dir> [--overwrite]',
  summary: 'copy a VFS folder or file to a host folder, never writing outside it',
  flags: { overwrite: { help: 'write into a host folder that is not empty' } },
  run: exportCmd,
};
