import { createHash } from 'node:crypto';

/** Deterministic test bytes: byte i is (i * 31 + seed) & 255. Tools make the same in their language. */
export function pattern(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 255;
  return b;
}

export const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
