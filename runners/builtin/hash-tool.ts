import { createHash } from 'node:crypto';
import { executionFailure } from '../../src/errors.js';
import { defineBuiltin, objectSchema, PATH } from './define.js';

export const systemHash = defineBuiltin(
  {
    id: 'system.hash',
    name: 'Hash',
    description: 'Computes a hash (sha256, sha512, sha1 or md5) of a VFS file or of a given text.',
    schema: {
      ...objectSchema({
        path: PATH,
        text: { type: 'string', description: 'Hash this UTF-8 text instead of a file' },
        algorithm: { enum: ['sha256', 'sha512', 'sha1', 'md5'], default: 'sha256' },
        format: { enum: ['hex', 'base64'], default: 'hex' },
      }),
      oneOf: [{ required: ['path'] }, { required: ['text'] }],
    },
    permissions: ['vfs.read'],
  },
  (input, ctx) => {
    const algorithm = (input.algorithm as string | undefined) ?? 'sha256';
    const format = input.format === 'base64' ? 'base64' : 'hex';
    const hash = createHash(algorithm);
    let size: number;
    if (typeof input.text === 'string') {
      const bytes = Buffer.from(input.text, 'utf8');
      size = bytes.length;
      hash.update(bytes);
    } else if (typeof input.path === 'string') {
      const bytes = ctx.vfs.read(input.path);
      size = bytes.length;
      hash.update(bytes);
    } else {
      throw executionFailure('INVALID_INPUT', 'give either "path" or "text"');
    }
    const result: Record<string, unknown> = { algorithm, format, digest: hash.digest(format), size };
    if (typeof input.path === 'string') result.path = ctx.vfs.resolve(input.path);
    return result;
  },
);
