import { ToolFailure } from '../../../errors.js';
import type { RestoreResult } from '../../../vfs/history.js';
import { bool, int, maxPositionals as noExtra, str, UsageError } from '../args.js';
import type { CommandSpec } from '../command.js';
import { type Context, withEngine } from '../context.js';
import { colourPatch, formatResult, table } from '../format.js';
import { EXIT } from '../io.js';
import { approvalOptions } from './call.js';

/** Progress on stderr, so stdout stays the result (and --json stays one document). */
export function progress(ctx: Context, what: string): (n: number | string, count?: number) => void {
  return (a, b) => {
    if (!ctx.json) ctx.io.stderr.write(ctx.c.dim(`${what}: ${b === undefined ? a : `${a} ${b}`}\n`));
  };
}

async function snapshot(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 0, 'arium snapshot [--label L] [--message M]');
  const label = str(ctx.parsed, 'label');
  const message = str(ctx.parsed, 'message');
  const approve = bool(ctx.parsed, 'approve');
  return withEngine(ctx, async (engine) => {
    const result = await engine.call(
      'vfs.snapshot',
      { ...(label ? { label } : {}), ...(message ? { message } : {}) },
      { caller: 'cli', ...approvalOptions(ctx, engine, approve), signal: ctx.io.interrupt() },
    );
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

async function log(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 0, 'arium log [--limit N]');
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

async function diffCmd(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 2, 'arium diff [from] [to] [--stat] [--path GLOB]');
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

async function restore(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 1, 'arium restore <snapshot>');
  const [ref] = ctx.parsed.positionals;
  if (!ref) throw new UsageError('arium restore needs a snapshot id, prefix or label (see arium log)');
  const approve = bool(ctx.parsed, 'approve');
  return withEngine(ctx, async (engine) => {
    // A call of vfs.restore, as from every surface: permissions, approvals, events and the audit log apply.
    const result = await engine.call(
      'vfs.restore',
      { snapshot: ref },
      { caller: 'cli', ...approvalOptions(ctx, engine, approve), signal: ctx.io.interrupt() },
    );
    if (!result.ok) {
      // Reported as a refused restore always was: the error on stderr, and with --json on stdout.
      const { stage, code, message, details } = result.error;
      throw new ToolFailure(stage, code, message, details === undefined ? {} : { details });
    }
    const r = result.data as RestoreResult;
    if (ctx.json) ctx.emit(r);
    else {
      ctx.out(`${ctx.c.green('restored')} ${ctx.c.bold(r.restored.id)}: ${r.written} files written, ${r.deleted} removed`);
      if (r.backup) ctx.out(ctx.c.dim(`the previous live tree is snapshot ${r.backup.id}; arium restore ${r.backup.id} undoes this`));
    }
    return EXIT.ok;
  });
}

async function gc(ctx: Context): Promise<number> {
  noExtra(ctx.parsed, 0, 'arium gc');
  return withEngine(ctx, (engine) => {
    const r = engine.gc(progress(ctx, 'gc'));
    if (ctx.json) ctx.emit(r);
    else ctx.out(`${ctx.c.green('gc')}: kept ${r.kept} objects, removed ${r.removed} (${r.removed_bytes} bytes)`);
    return EXIT.ok;
  });
}

const APPROVE_FLAG = { help: 'approve it beforehand, if an approvals rule matches it (recorded as by your OS user name)' };

export const snapshotSpec: CommandSpec = {
  name: 'snapshot',
  usage: 'arium snapshot [--label <label>] [--message <text>] [--approve]',
  summary: 'save the VFS as a snapshot (content-addressed: it stores only what changed)',
  flags: {
    approve: APPROVE_FLAG,
    label: { value: true, arg: '<label>', help: 'a name to refer to the snapshot by (arium diff <label>, arium restore <label>)' },
    message: { value: true, arg: '<text>', help: 'what the snapshot is for' },
  },
  run: snapshot,
};

export const logSpec: CommandSpec = {
  name: 'log',
  usage: 'arium log [--limit <n>]',
  summary: 'list the snapshots, newest first',
  flags: { limit: { value: true, arg: '<n>', help: 'show at most n snapshots (default 50)' } },
  run: log,
};

export const diffSpec: CommandSpec = {
  name: 'diff',
  usage: 'arium diff [from] [to] [--stat] [--path <glob>]',
  summary: 'compare snapshots or the live tree (default: newest snapshot → live)',
  details: 'from and to are a snapshot id, an id prefix, a label, "latest" or "live".',
  flags: {
    stat: { help: 'only the changed files and line counts, no patches' },
    path: { value: true, arg: '<glob>', help: 'only paths matching the glob, e.g. /docs/**' },
  },
  run: diffCmd,
};

export const restoreSpec: CommandSpec = {
  name: 'restore',
  usage: 'arium restore <snapshot> [--approve]',
  summary: 'bring the VFS back to a snapshot (the live tree is saved first, so it can be undone)',
  flags: { approve: APPROVE_FLAG },
  run: restore,
};

export const gcSpec: CommandSpec = {
  name: 'gc',
  usage: 'arium gc',
  summary: 'delete stored objects that no snapshot and not the live tree need',
  flags: {},
  run: gc,
};
