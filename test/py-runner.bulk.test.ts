import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { pattern, sha256 as sha } from './support/bytes.js';
import { dataOf as ok } from './support/js-engine.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * Large write contents from a Python tool follow their request as raw bytes (a blob), relayed by the
 * fork server; small ones go as base64 in the JSON. Every byte must arrive, from calls running at once.
 */

const tool = (id: string, body: string) => ({
  [`${id}.py`]: `def pattern(n, seed):\n    return bytes((i * 31 + seed) & 255 for i in range(n))\n\n\ndef run(input, ctx):\n${body
    .split('\n')
    .map((line) => `    ${line}`)
    .join('\n')}\n`,
  [`${id}.json`]: definition({
    id,
    runner: 'py-runner',
    entry: `${id}.py`,
    permissions: ['exec.py', 'vfs.read', 'vfs.write'],
    limits: { memory_mb: 512, timeout_ms: 60000 },
  }),
});

const SIZES = [10, 65535, 65536, 65537, 1 << 20, 3, 3 << 20];

let project: TempProject;
let engine: Engine;

beforeAll(async () => {
  project = tempProject({
    ...tool(
      'mixed',
      `sizes = ${JSON.stringify(SIZES)}
for i, n in enumerate(sizes):
    data = pattern(n, i + input["seed"])
    # bytes, bytearray and memoryview in turn
    kind = (bytes, bytearray, memoryview)[i % 3]
    ctx.vfs.write("/%s/b%d.bin" % (input["tag"], i), kind(data))
ctx.vfs.write("/%s/tail.bin" % input["tag"], pattern(100000, 1), append=True)
ctx.vfs.write("/%s/tail.bin" % input["tag"], b"-end", append=True)
return {"back": len(ctx.vfs.read("/%s/b6.bin" % input["tag"], encoding="bytes"))}`,
    ),
    ...tool('echo_size', 'return {"n": len(input["s"]), "tail": input["s"][-3:]}'),
    ...tool(
      'text',
      `text = "é" * input["n"] + "\\U0001F600" + "end"
ctx.vfs.write("/t.txt", text)
ctx.vfs.write("/lone.txt", "x" * input["n"] + "\\ud800")
return {"length": len(text)}`,
    ),
  });
  engine = await openEngine(project);
});

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

describe('frames larger than a socket buffer, to the tool’s process', () => {
  it('an input of 900 KB reaches the tool whole, beside other calls', async () => {
    const s = `${'x'.repeat(900_000)}end`;
    const results = await Promise.all([engine.call('echo_size', { s }), engine.call('echo_size', { s: 'small' }), engine.call('echo_size', { s })]);
    expect(results.map(ok)).toEqual([
      { n: 900_003, tail: 'end' },
      { n: 5, tail: 'all' },
      { n: 900_003, tail: 'end' },
    ]);
  });
});

describe('large writes from a Python tool', () => {
  it('arrive byte for byte from 6 calls at once, sizes on both sides of 64 KiB, bytes, bytearray and memoryview; a 3 MiB file reads back', async () => {
    const results = await Promise.all(Array.from({ length: 6 }, (_, c) => engine.call('mixed', { tag: `c${c}`, seed: c * 10 })));
    for (const result of results) expect(ok(result)).toEqual({ back: 3 << 20 });
    for (let c = 0; c < 6; c++) {
      for (const [i, n] of SIZES.entries()) expect(sha(engine.vfs.read(`/c${c}/b${i}.bin`)), `/c${c}/b${i}.bin`).toBe(sha(pattern(n, i + c * 10)));
      expect(engine.vfs.read(`/c${c}/tail.bin`).equals(Buffer.concat([pattern(100000, 1), Buffer.from('-end')]))).toBe(true);
    }
  });

  it('store large text as UTF-8; text with a lone surrogate still arrives, the surrogate as U+FFFD', async () => {
    expect(ok(await engine.call('text', { n: 100000 }))).toEqual({ length: 100000 + 1 + 3 });
    expect(engine.vfs.read('/t.txt').toString('utf8')).toBe(`${'é'.repeat(100000)}\u{1F600}end`);
    expect(engine.vfs.read('/lone.txt').toString('utf8')).toBe(`${'x'.repeat(100000)}\ufffd`);
  });
});
