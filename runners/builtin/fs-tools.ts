import { executionFailure, ToolFailure } from '../../src/errors.js';
import { asText, diffFiles } from '../../src/vfs/text-diff.js';
import { type Builtin, defineBuiltin, objectSchema, PATH } from './define.js';

/** Bytes kept back from `output_bytes` for the fields around file content. */
const ENVELOPE_BYTES = 1024;
const ENCODING = { enum: ['utf8', 'base64'], default: 'utf8', description: 'utf8 for text, base64 for any bytes' };

type In = Record<string, unknown>;

function decodeContent(content: string, encoding: unknown): Buffer {
  if (encoding !== 'base64') return Buffer.from(content, 'utf8');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(content) || content.length % 4 === 1) {
    // An input error like any schema violation: stage validation, with the violation at its pointer
    // (it was an execution-stage error with a bare pointer, unlike every other INVALID_INPUT).
    throw new ToolFailure('validation', 'INVALID_INPUT', 'Invalid input for fs.write: /content: is not valid base64', {
      details: {
        violations: [{ pointer: '/content', message: 'is not valid base64', keyword: 'contentEncoding', params: { contentEncoding: 'base64' } }],
      },
    });
  }
  return Buffer.from(content, 'base64');
}

export const fsRead = defineBuiltin(
  {
    id: 'fs.read',
    name: 'Read file',
    description: 'Reads a file from the VFS as UTF-8 text or base64, optionally a byte range of it.',
    schema: objectSchema(
      {
        path: PATH,
        encoding: ENCODING,
        offset: { type: 'integer', minimum: 0, description: 'First byte to read (default 0)' },
        length: { type: 'integer', minimum: 0, description: 'Bytes to read (default: to the end)' },
      },
      ['path'],
    ),
    permissions: ['vfs.read'],
  },
  (input: In, ctx) => {
    const whole = ctx.vfs.read(input.path);
    const path = ctx.vfs.resolve(input.path);
    const offset = Math.min((input.offset as number | undefined) ?? 0, whole.length);
    const end = input.length === undefined ? whole.length : Math.min(whole.length, offset + (input.length as number));
    const bytes = offset === 0 && end === whole.length ? whole : whole.subarray(offset, end);
    const encoding = input.encoding === 'base64' ? 'base64' : 'utf8';
    const budget = ctx.limits.output_bytes - ENVELOPE_BYTES;
    const cost = encoding === 'base64' ? Math.ceil(bytes.length / 3) * 4 : bytes.length;
    if (cost > budget) {
      throw executionFailure(
        'OUTPUT_LIMIT',
        `${path} is ${whole.length} bytes; reading it would exceed the output limit of ${ctx.limits.output_bytes} bytes`,
        {
          details: { path, size: whole.length, limit_bytes: ctx.limits.output_bytes, hint: 'read a range with offset and length' },
        },
      );
    }
    let content: string;
    if (encoding === 'base64') {
      content = bytes.toString('base64');
    } else {
      const text = asText(bytes);
      if (text === null) {
        throw executionFailure('NOT_TEXT', `${path} is not UTF-8 text; read it with "encoding": "base64"`, { details: { path, size: whole.length } });
      }
      content = text;
    }
    return { path, content, encoding, size: whole.length, offset, length: bytes.length };
  },
);

export const fsWrite = defineBuiltin(
  {
    id: 'fs.write',
    name: 'Write file',
    description: 'Writes a file in the VFS; with "diff": true also returns the unified diff against its previous content.',
    schema: objectSchema(
      {
        path: PATH,
        content: { type: 'string', description: 'The new content (or the bytes to append)' },
        encoding: ENCODING,
        append: { type: 'boolean', default: false, description: 'Add to the end instead of replacing' },
        overwrite: { type: 'boolean', default: true, description: 'When false, fail if the file exists' },
        create_parents: { type: 'boolean', default: true, description: 'Create missing parent folders' },
        diff: { type: 'boolean', default: false, description: 'Also return the unified diff against the previous content' },
      },
      ['path', 'content'],
    ),
    permissions: ['vfs.write'],
  },
  (input: In, ctx) => {
    const data = decodeContent(input.content as string, input.encoding);
    const outcome = ctx.vfs.write(input.path, data, {
      append: input.append === true,
      exclusive: input.overwrite === false,
      parents: input.create_parents !== false,
      previous: input.diff === true,
    });
    const path = outcome.path;
    const result: Record<string, unknown> = { path, created: outcome.created, size: outcome.size, bytes_written: data.length };
    // Asked for, not made by default: the diff was a fifth of a small write's time, and most writers
    // never look at it.
    if (input.diff !== true) return result;
    // The diff shows the old content: only callers who may read the file get to see it.
    if (!ctx.vfs.callerMay('vfs.read', path)) {
      Object.assign(result, { diff: null, added: 0, removed: 0, diff_note: 'diff omitted: no vfs.read permission for this path' });
      return result;
    }
    const after = input.append === true && outcome.previous ? Buffer.concat([outcome.previous, data]) : data;
    const diff = diffFiles(path, outcome.previous, after);
    Object.assign(result, { diff: diff.patch, added: diff.added, removed: diff.removed });
    if (diff.omitted) result.diff_note = `diff omitted: ${diff.omitted}`;
    return result;
  },
);

export const fsList = defineBuiltin(
  {
    id: 'fs.list',
    name: 'List folder',
    description: 'Lists the entries of a VFS folder, optionally recursively.',
    schema: objectSchema({
      path: { ...PATH, default: '/' },
      recursive: { type: 'boolean', default: false },
      limit: { type: 'integer', minimum: 1, maximum: 100_000, default: 1000, description: 'Most entries to return' },
    }),
    permissions: ['vfs.read'],
  },
  (input: In, ctx) => {
    const raw = input.path ?? '/';
    const { entries, truncated } = ctx.vfs.list(raw, { recursive: input.recursive === true, limit: (input.limit as number | undefined) ?? 1000 });
    return { path: ctx.vfs.resolve(raw), entries, truncated };
  },
);

export const fsStat = defineBuiltin(
  {
    id: 'fs.stat',
    name: 'Stat path',
    description: 'Tells whether a VFS path is a file or a folder, its size and times.',
    schema: objectSchema({ path: PATH }, ['path']),
    permissions: ['vfs.read'],
  },
  (input: In, ctx) => ctx.vfs.stat(input.path),
);

export const fsMkdir = defineBuiltin(
  {
    id: 'fs.mkdir',
    name: 'Make folder',
    description: 'Creates a VFS folder (and its parents unless parents is false). Succeeds if it exists.',
    schema: objectSchema({ path: PATH, parents: { type: 'boolean', default: true } }, ['path']),
    permissions: ['vfs.write'],
  },
  (input: In, ctx) => ctx.vfs.mkdir(input.path, { parents: input.parents !== false }),
);

export const fsDelete = defineBuiltin(
  {
    id: 'fs.delete',
    name: 'Delete',
    description: 'Deletes a file, or a folder with recursive: true. Deleting "/" also needs allow_root: true.',
    schema: objectSchema({ path: PATH, recursive: { type: 'boolean', default: false }, allow_root: { type: 'boolean', default: false } }, ['path']),
    permissions: ['vfs.write'],
  },
  (input: In, ctx) => {
    if (ctx.vfs.resolve(input.path) === '/' && input.allow_root !== true) {
      throw executionFailure('INVALID_PATH', 'Refusing to delete "/" (the whole VFS); pass allow_root: true and recursive: true to do it', {
        details: { path: '/' },
      });
    }
    return ctx.vfs.delete(input.path, { recursive: input.recursive === true });
  },
);

export const fsMove = defineBuiltin(
  {
    id: 'fs.move',
    name: 'Move',
    description: 'Moves or renames a file or folder in the VFS.',
    schema: objectSchema({ from: PATH, to: PATH, overwrite: { type: 'boolean', default: false } }, ['from', 'to']),
    permissions: ['vfs.read', 'vfs.write'],
  },
  (input: In, ctx) => ctx.vfs.move(input.from, input.to, { overwrite: input.overwrite === true }),
);

export const FS_BUILTINS: readonly Builtin[] = [fsRead, fsWrite, fsList, fsStat, fsMkdir, fsDelete, fsMove];
