import { ToolFailure } from '../../src/errors.js';
import type { RunContext } from '../../src/runner.js';
import { diff, restore } from '../../src/vfs/history.js';
import type { VfsState } from '../../src/vfs/state.js';
import { type Builtin, defineBuiltin, objectSchema } from './define.js';

const REF = { type: 'string', minLength: 1, maxLength: 200, description: 'A snapshot id (or 4+ character prefix), a label, "latest", or "live"' };

/**
 * Snapshots see and restore the whole tree, so these tools need their permissions on "/" itself:
 * a caller granted only `vfs.read:/docs/**` cannot read other folders through a diff.
 */
function requireWhole(ctx: RunContext, permission: 'vfs.read' | 'vfs.write', operation: string): void {
  ctx.vfs.demand(permission, operation, '/');
}

export const vfsSnapshot = defineBuiltin(
  {
    id: 'vfs.snapshot',
    name: 'Snapshot',
    description: 'Saves the whole VFS as a snapshot (content-addressed: unchanged files cost nothing) and returns its id.',
    schema: objectSchema({
      label: { type: 'string', minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' },
      message: { type: 'string', maxLength: 2000 },
    }),
    permissions: ['vfs.read'],
  },
  (input, ctx) => {
    requireWhole(ctx, 'vfs.read', 'vfs.snapshot');
    const options: { label?: string; message?: string } = {};
    if (typeof input.label === 'string') options.label = input.label;
    if (typeof input.message === 'string') options.message = input.message;
    return history(ctx).snapshot(options);
  },
);

export const vfsLog = defineBuiltin(
  {
    id: 'vfs.log',
    name: 'Snapshot log',
    description: 'Lists snapshots, newest first, with time, label, file count and size.',
    schema: objectSchema({ limit: { type: 'integer', minimum: 1, maximum: 10_000, default: 100 } }),
    permissions: ['vfs.read'],
  },
  (input, ctx) => {
    const all = [...history(ctx).snapshots].reverse();
    const limit = (input.limit as number | undefined) ?? 100;
    return { snapshots: all.slice(0, limit), total: all.length };
  },
);

export const vfsDiff = defineBuiltin(
  {
    id: 'vfs.diff',
    name: 'Diff',
    description: 'Compares two trees (snapshots or "live"), file by file, with unified patches. Default: newest snapshot against live.',
    schema: objectSchema({
      from: REF,
      to: REF,
      path: { type: 'string', minLength: 1, maxLength: 4096, description: 'Only files matching this glob, e.g. /src/**' },
      stat_only: { type: 'boolean', default: false, description: 'File list and counts, without patches' },
    }),
    permissions: ['vfs.read'],
  },
  (input, ctx) => {
    requireWhole(ctx, 'vfs.read', 'vfs.diff');
    const options: Parameters<typeof diff>[3] = { stat_only: input.stat_only === true };
    if (typeof input.path === 'string') options.path = input.path;
    // Leave room in the output for the file list around the patches.
    options.max_patch_chars = Math.max(1024, Math.floor(ctx.limits.output_bytes / 2));
    return diff(history(ctx), input.from as string | undefined, input.to as string | undefined, options);
  },
);

export const vfsRestore = defineBuiltin(
  {
    id: 'vfs.restore',
    name: 'Restore',
    description: 'Brings the whole VFS back to a snapshot. The live tree is saved as a snapshot first, so a restore can be undone.',
    schema: objectSchema({ snapshot: REF }, ['snapshot']),
    permissions: ['vfs.read', 'vfs.write'],
  },
  (input, ctx) => {
    requireWhole(ctx, 'vfs.write', 'vfs.restore');
    requireWhole(ctx, 'vfs.read', 'vfs.restore');
    const result = restore(history(ctx), input.snapshot as string, ctx.vfs);
    return { ...result, undo: result.backup ? `restore snapshot ${result.backup.id}` : null };
  },
);

export const VFS_BUILTINS: readonly Builtin[] = [vfsSnapshot, vfsLog, vfsDiff, vfsRestore];

/** The durable state, which the builtin runner asks for (`capabilities`); a call without it is an engine fault. */
function history(ctx: RunContext): VfsState {
  if (!ctx.history)
    throw new ToolFailure('execution', 'INTERNAL', `${ctx.tool.spec.id} needs the history capability, which its runner was not given`);
  return ctx.history;
}
