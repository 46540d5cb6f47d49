import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { pattern, sha256 as sha } from './support/bytes.js';
import { dataOf as ok } from './support/js-engine.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * Large write contents go from the JS sandbox to the engine as raw bytes on a pipe of their own, matched
 * to their requests by order; small ones as base64 in the message. These tests mix both, from many
 * calls at once, with requests the tool does not await, and check every byte and the order of effects.
 */

const tool = (id: string, body: string) => ({
  [`${id}.js`]: `export default async function run(input, ctx) {\n${body}\n}\n`,
  [`${id}.json`]: definition({ id, entry: `${id}.js`, permissions: ['exec.js', 'vfs.read', 'vfs.write'], limits: { memory_mb: 256 } }),
});

/** Deterministic bytes: byte i of file `seed` is (i * 31 + seed) & 255. */
const PATTERN = 'const pattern = (n, seed) => { const b = new Uint8Array(n); for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 255; return b; };';

let project: TempProject;
let engine: Engine;

beforeAll(async () => {
  project = tempProject({
    ...tool(
      'mixed',
      `${PATTERN}
      // Sizes on both sides of the bulk threshold (64 KiB), none awaited until the end.
      const sizes = [10, 65535, 65536, 65537, 1 << 20, 3, 5 << 20, 70000];
      const pending = sizes.map((n, i) => ctx.vfs.write(\`/\${input.tag}/b\${i}.bin\`, pattern(n, i + input.seed)));
      // A view into a larger buffer: only its bytes go.
      const big = pattern(200000, 9);
      pending.push(ctx.vfs.write(\`/\${input.tag}/view.bin\`, new Uint8Array(big.buffer, 1000, 100000)));
      pending.push(ctx.vfs.write(\`/\${input.tag}/ab.bin\`, pattern(90000, 4).buffer));
      await Promise.all(pending);
      return { done: true };`,
    ),
    ...tool(
      'ordered',
      `${PATTERN}
      // Not awaited: the engine must apply them in the order they were made.
      const a = ctx.vfs.write('/o.bin', pattern(300000, 1));
      const b = ctx.vfs.write('/o.bin', 'small', { append: true });
      const c = ctx.vfs.write('/o.bin', pattern(100000, 2), { append: true });
      const d = ctx.vfs.read('/o.bin', { encoding: 'bytes' });
      await Promise.all([a, b, c]);
      return { size: (await d).length };`,
    ),
    ...tool(
      'text',
      `const text = 'é'.repeat(input.n) + '\\u{1F600}' + '\\ud800' + 'end';
      await ctx.vfs.write('/t.txt', text);
      await ctx.vfs.write('/t64.txt', 'eHh4'.repeat(40000), { encoding: 'base64' });
      return { length: text.length };`,
    ),
  });
  engine = await openEngine(project);
});

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

describe('large writes from a JS tool', () => {
  it('arrive byte for byte from 8 calls at once, large and small mixed, views and ArrayBuffers', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => engine.call('mixed', { tag: `c${i}`, seed: i * 10 })));
    for (const result of results) ok(result);
    const sizes = [10, 65535, 65536, 65537, 1 << 20, 3, 5 << 20, 70000];
    for (let c = 0; c < 8; c++) {
      for (const [i, n] of sizes.entries()) expect(sha(engine.vfs.read(`/c${c}/b${i}.bin`)), `/c${c}/b${i}.bin`).toBe(sha(pattern(n, i + c * 10)));
      expect(engine.vfs.read(`/c${c}/view.bin`).equals(pattern(200000, 9).subarray(1000, 101000))).toBe(true);
      expect(engine.vfs.read(`/c${c}/ab.bin`).equals(pattern(90000, 4))).toBe(true);
    }
  });

  it('take effect in the order the tool made them, though none was awaited', async () => {
    expect(ok(await engine.call('ordered', {}))).toEqual({ size: 300000 + 5 + 100000 });
    expect(engine.vfs.read('/o.bin').equals(Buffer.concat([pattern(300000, 1), Buffer.from('small'), pattern(100000, 2)]))).toBe(true);
  });

  it('store large text as UTF-8, as small text is (a lone surrogate as U+FFFD), and leave base64 text to its encoding', async () => {
    expect(ok(await engine.call('text', { n: 100000 }))).toEqual({ length: 100000 + 2 + 1 + 3 });
    expect(engine.vfs.read('/t.txt').toString('utf8')).toBe(`${'é'.repeat(100000)}\u{1F600}\ufffdend`);
    expect(engine.vfs.read('/t64.txt').toString('utf8')).toBe('x'.repeat(120000));
  });
});

describe('the VFS keeps its own bytes', () => {
  it('a buffer the host wrote, or a buffer read back, can change without changing the file', async () => {
    const mine = Buffer.from('host bytes');
    engine.vfs.write('/host.txt', mine);
    mine.fill(0);
    const read = engine.vfs.read('/host.txt');
    read.fill(1);
    expect(engine.vfs.read('/host.txt').toString()).toBe('host bytes');
  });
});
