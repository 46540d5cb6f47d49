import { resolve } from 'node:path';
import { bool, int, str, UsageError } from '../args.js';
import { type Context, withEngine } from '../context.js';
import { colourPatch, formatResult, table } from '../format.js';
import { EXIT } from '../io.js';

export const SNAPSHOT_FLAGS = { label: { value: true }, message: { value: true } } as const;
export const LOG_FLAGS = { limit: { value: true } } as const;
export const DIFF_FLAGS = { stat: {}, path: { value: true } } as const;
export const EXPORT_FLAGS = { overwrite: {} } as const;

function noExtra(ctx: Context, max: number, usage: string): void {
  if (ctx.parsed.positionals.length > max) throw new UsageError(`Too many arguments; usage: ${usage}`);
}

/** Progress on stderr, so stdout stays the result (and --json stays one document). */
function progress(ctx: Context, what: string): (n: number | string, count?: number) => void {
  return (a, b) => {
    if (!ctx.json) ctx.io.stderr.write(ctx.c.dim(`${what}: ${b === undefined ? a : `${a} ${b}`}\n`));
  };
}

export async function snapshotCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 0, 'arium snapshot [--label L] [--message M]');
  const label = str(ctx.parsed, 'label');
  const message = str(ctx.parsed, 'message');
  return withEngine(ctx, async (engine) => {
    const result = await engine.call('vfs.snapshot', { ...(label ? { label } : {}), ...(message ? { message } : {}) }, { caller: 'cli' });
    if (!result.ok) {
      if (ctx.json) ctx.emit(result);
      else ctx.out(formatResult(result, ctx.c));
      return EXIT.toolFailed;
    }
    const s = result.data as { id: string; files: number; bytes: number };
    if (ctx.json) ctx.emit(s);
    else ctx.out(`${ctx.c.green('snapshot')} ${ctx.c.bold(s.id)}${label ? ` (${label})` : ''}: ${s.files} files, ${s.bytes} bytes`);
    return EXIT.ok;
  });
}

export async function logCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 0, 'arium log [--limit N]');
  const limit = int(ctx.parsed, 'limit') ?? 50;
  return withEngine(ctx, (engine) => {
    const all = engine.snapshots().reverse();
    const shown = all.slice(0, limit);
    if (ctx.json) {
      ctx.emit({ snapshots: shown, total: all.length });
      return EXIT.ok;
    }
    if (all.length === 0) ctx.out('no snapshots yet (arium snapshot --label NAME takes one)');
    const { c } = ctx;
    ctx.out(table(shown.map((s) => [c.bold(s.id), s.at, s.label ?? '-', `${s.files} files`, `${s.bytes} bytes`, s.message ?? ''])));
    if (all.length > shown.length) ctx.out(c.dim(`… ${all.length - shown.length} older (--limit)`));
    return EXIT.ok;
  });
}

export async function diffCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 2, 'arium diff [from] [to] [--stat] [--path GLOB]');
  const [from, to] = ctx.parsed.positionals;
  const path = str(ctx.parsed, 'path');
  const stat = bool(ctx.parsed, 'stat');
  return withEngine(ctx, (engine) => {
    const d = engine.diff(from, to, { ...(path ? { path } : {}), stat_only: stat });
    if (ctx.json) {
      ctx.emit(d);
      return EXIT.ok;
    }
    const { c } = ctx;
    const name = (r: { ref: string; snapshot: { id: string } | null }) => (r.snapshot ? r.snapshot.id : r.ref);
    ctx.out(c.dim(`diff ${name(d.from)} → ${name(d.to)}`));
    for (const f of d.files) {
      const mark = { added: c.green('A'), modified: c.yellow('M'), deleted: c.red('D'), renamed: c.cyan('R') }[f.status];
      const counts = f.binary ? c.dim('binary') : `${c.green(`+${f.lines_added}`)} ${c.red(`-${f.lines_removed}`)}`;
      ctx.out(`${mark} ${f.from ? `${f.from} → ` : ''}${f.path}  ${counts}${f.note ? c.dim(`  (${f.note})`) : ''}`);
      if (!stat && f.patch) ctx.out(colourPatch(f.patch.trimEnd(), c));
    }
    const s = d.stats;
    ctx.out(
      c.bold(
        `${s.files_changed} files changed (${s.added} added, ${s.modified} modified, ${s.deleted} deleted, ${s.renamed} renamed), +${s.lines_added} -${s.lines_removed} lines`,
      ),
    );
    if (d.note) ctx.out(c.yellow(d.note));
    return EXIT.ok;
  });
}

export async function restoreCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 1, 'arium restore <snapshot>');
  const [ref] = ctx.parsed.positionals;
  if (!ref) throw new UsageError('arium restore needs a snapshot id, prefix or label (see arium log)');
  return withEngine(ctx, (engine) => {
    const r = engine.restore(ref);
    if (ctx.json) ctx.emit(r);
    else {
      ctx.out(`${ctx.c.green('restored')} ${ctx.c.bold(r.restored.id)}: ${r.written} files written, ${r.deleted} removed`);
      if (r.backup) ctx.out(ctx.c.dim(`the previous live tree is snapshot ${r.backup.id}; arium restore ${r.backup.id} undoes this`));
    }
    return EXIT.ok;
  });
}

export async function gcCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 0, 'arium gc');
  return withEngine(ctx, (engine) => {
    const r = engine.gc(progress(ctx, 'gc'));
    if (ctx.json) ctx.emit(r);
    else ctx.out(`${ctx.c.green('gc')}: kept ${r.kept} objects, removed ${r.removed} (${r.removed_bytes} bytes)`);
    return EXIT.ok;
  });
}

export async function importCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 2, 'arium import <host-dir> [vfs-path]');
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

export async function exportCommand(ctx: Context): Promise<number> {
  noExtra(ctx, 2, 'arium export <vfs-path> <host-dir> [--overwrite]');
  const [vfsPath, hostDir] = ctx.parsed.positionals;
  if (!vfsPath || !hostDir) throw new UsageError('arium export needs a VFS path and a host folder: arium export <vfs-path> <host-dir>');
  return withEngine(ctx, (engine) => {
    const r = engine.exportTo(vfsPath, resolve(ctx.io.cwd, hostDir), { overwrite: bool(ctx.parsed, 'overwrite') }, progress(ctx, 'exported files'));
    if (ctx.json) ctx.emit(r);
    else ctx.out(`${ctx.c.green('exported')} ${r.files} files, ${r.dirs} folders, ${r.bytes} bytes to ${hostDir}`);
    return EXIT.ok;
  });
}
