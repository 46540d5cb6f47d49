// The process protocols are described once (runners/shared/protocol.schema.json); this checks every
// boundary against it on real traffic: the engine checks what it exchanges with the JS sandbox process
// and the Python fork server, and the fork server checks what it exchanges with its call processes
// (the same schema, handed to it, and a small validator in arium_proto.py). Also the sandboxes'
// copies of the operation list. The JS worker's side is also typed from runners/shared/sandbox-protocol.ts (tsconfig.worker.json).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkProtocol, observe, type ProtocolLog, protocolSchema } from '../runners/shared/protocol.js';
import { VFS_OPS } from '../runners/shared/vfs-ops.js';
import type { Engine } from '../src/index.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

const schemaOps = (protocolSchema().$defs.vfsOp as { enum: string[] }).enum;

describe('the protocol description', () => {
  it('is the one list of VFS operations every side serves', () => {
    expect([...VFS_OPS]).toEqual(schemaOps);
    const worker = readFileSync(new URL('../runners/js/worker/call.mjs', import.meta.url), 'utf8');
    const jsList = /const VFS_OPS = new Set\(\[([^\]]*)\]\)/.exec(worker)?.[1];
    expect(jsList?.split(',').map((s) => s.trim().replace(/'/g, ''))).toEqual(schemaOps);
    const server = readFileSync(new URL('../runners/python/sandbox/arium_server.py', import.meta.url), 'utf8');
    const pyList = /^VFS_OPS = \{([^}]*)\}/m.exec(server)?.[1];
    expect(pyList?.split(',').map((s) => s.trim().replace(/"/g, ''))).toEqual(schemaOps);
  });

  it('refuses messages that stray from it (the check can fail)', () => {
    const log = checkProtocol(true) as ProtocolLog;
    observe('js.fromWorker', { t: 'vfs', id: 1, rid: 1, op: 'chmod', args: [] });
    observe('js.fromWorker', { t: 'done', id: 1, ok: true, data: null, dropped: 0 });
    observe('py.toServer', { t: 'vfs-reply', id: 1, seq: 1, ok: true, value: 1, error: { code: 'X', message: 'y' } });
    observe('py.fromServer', { t: 'hello' });
    observe('js.toWorker', { t: 'abort', id: 3, code: 'CANCELLED', message: 'stop' });
    checkProtocol(false);
    expect(log.violations.map((v) => v.channel)).toEqual(['js.fromWorker', 'js.fromWorker', 'py.toServer', 'py.fromServer']);
    expect(log.seen['js.toWorker abort']).toBe(1);
  });
});

const JS_TOOL = `export default async function run(input, ctx) {
  await ctx.vfs.mkdir('/js', { parents: true });
  await ctx.vfs.write('/js/a.txt', 'alpha');
  await ctx.vfs.write('/js/big.bin', new Uint8Array(input.big));
  const text = await ctx.vfs.read('/js/a.txt');
  const bytes = await ctx.vfs.read('/js/big.bin', { encoding: 'bytes' });
  const listed = await ctx.vfs.list('/js');
  const stat = await ctx.vfs.stat('/js/a.txt');
  const exists = await ctx.vfs.exists('/nope');
  await ctx.vfs.move('/js/a.txt', '/js/b.txt');
  await ctx.vfs.delete('/js/b.txt');
  let missing = null;
  try { await ctx.vfs.read('/js/gone'); } catch (error) { missing = error.code; }
  console.log('js done');
  if (input.fail) throw new Error('asked to fail');
  return { text, bytes: bytes.length, listed: listed.entries.length, size: stat.size, exists, missing };
}
`;

const PY_TOOL = `def run(input, ctx):
    ctx.vfs.mkdir("/py", parents=True)
    ctx.vfs.write("/py/a.txt", "alpha")
    ctx.vfs.write("/py/big.bin", bytes(input["big"]))
    text = ctx.vfs.read("/py/a.txt")
    data = ctx.vfs.read("/py/big.bin", encoding="bytes")
    listed = ctx.vfs.list("/py")
    stat = ctx.vfs.stat("/py/a.txt")
    exists = ctx.vfs.exists("/nope")
    ctx.vfs.move("/py/a.txt", "/py/b.txt")
    ctx.vfs.delete("/py/b.txt")
    missing = None
    try:
        ctx.vfs.read("/py/gone")
    except ctx.VfsError as error:
        missing = error.code
    ctx.log("py done")
    if input.get("fail"):
        raise ValueError("asked to fail")
    return {"text": text, "bytes": len(data), "listed": len(listed["entries"]), "size": stat["size"], "exists": exists, "missing": missing}
`;

describe('the Python server’s own check', () => {
  it('finds what strays from the schema, and passes what matches', () => {
    const sandbox = fileURLToPath(new URL('../runners/python/sandbox/', import.meta.url));
    const frames = [
      { t: 'vfs', seq: 1, op: 'read', args: ['/a'] },
      { t: 'vfs', seq: 1, op: 'chmod', args: ['/a'] },
      { t: 'result', output: 3 },
      { t: 'log', level: 'info', message: 'hi', extra: true },
      { t: 'error', kind: 'exception', message: 'boom', traceback: '' },
    ];
    const script = [
      'import json, sys',
      'sys.path.insert(0, sys.argv[1])',
      'import arium_proto',
      'defs = json.loads(sys.argv[2])',
      'print(json.dumps([arium_proto.violation({"$ref": "#/$defs/py.fromChild"}, defs, f) for f in json.loads(sys.argv[3])]))',
    ].join('\n');
    const out = execFileSync('python3', ['-c', script, sandbox, JSON.stringify(protocolSchema().$defs), JSON.stringify(frames)], {
      encoding: 'utf8',
    });
    const problems = JSON.parse(out) as (string | null)[];
    expect(problems[0]).toBeNull();
    expect(problems[4]).toBeNull();
    for (const i of [1, 2, 3]) expect(problems[i], JSON.stringify(frames[i])).toMatch(/alternatives/);
  });
});

describe('real traffic with both sandboxes', () => {
  let project: TempProject;
  let engine: Engine;
  let log: ProtocolLog;

  beforeAll(async () => {
    log = checkProtocol(true) as ProtocolLog;
    project = tempProject({
      'all.json': definition({ id: 'p.js', entry: 'all.mjs', permissions: ['exec.js', 'vfs.read', 'vfs.write'] }),
      'all.mjs': JS_TOOL,
      'all-py.json': definition({ id: 'p.py', runner: 'py-runner', entry: 'all.py', permissions: ['exec.py', 'vfs.read', 'vfs.write'] }),
      'all.py': PY_TOOL,
    });
    engine = await openEngine(project);
  }, 60_000);

  afterAll(async () => {
    checkProtocol(false);
    await engine?.close();
    project?.remove();
  });

  it('matches the description in every message, each way, for every kind of exchange', async () => {
    // 100 KB crosses as a bulk blob (JS ≥ 64 KiB; Python blob frames); small ones inline.
    const big = Array.from({ length: 100_000 }, (_, i) => i % 251);
    const results = await Promise.all([
      engine.call('p.js', { big }),
      engine.call('p.py', { big }),
      engine.call('p.js', { big: [1, 2, 3], fail: true }),
      engine.call('p.py', { big: [1, 2, 3], fail: true }),
      ...Array.from({ length: 6 }, (_, i) => engine.call(i % 2 ? 'p.js' : 'p.py', { big: [i] })),
      // A code-mode program: its tool calls cross as vfs messages with op "tool", answered or failed.
      engine.call('code.run', {
        code: "const r = await tools.p.js({ big: [9] }); try { await tools.fs.read({ path: '/none' }); } catch {} return r.text;",
      }),
    ]);
    const expected = { text: 'alpha', bytes: 100_000, listed: 2, size: 5, exists: false, missing: 'NOT_FOUND' };
    expect(results[0]).toMatchObject({ ok: true, data: expected });
    expect(results[1]).toMatchObject({ ok: true, data: expected });
    expect(results[2]).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR' } });
    expect(results[3]).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR' } });
    expect(results.slice(4).every((r) => r.ok)).toBe(true);
    expect(results.at(-1)).toMatchObject({ ok: true, data: 'alpha' });
    expect(log.violations).toEqual([]);
    for (const key of [
      'js.toWorker call',
      'js.toWorker reply',
      'js.fromWorker ready',
      'js.fromWorker vfs',
      'js.fromWorker done',
      'py.toServer call',
      'py.toServer vfs-reply',
      'py.fromServer ready',
      'py.fromServer vfs',
      'py.fromServer done',
      'py.toChild job',
      'py.toChild reply',
      'py.fromChild vfs',
      'py.fromChild log',
      'py.fromChild result',
      'py.fromChild error',
    ]) {
      expect(log.seen[key], key).toBeGreaterThan(0);
    }
    // Every VFS operation crossed both boundaries.
    expect(log.seen['js.fromWorker vfs']).toBeGreaterThanOrEqual(10 * 4);
    expect(log.seen['py.fromServer vfs']).toBeGreaterThanOrEqual(10 * 4);
    expect(log.seen['py.fromChild vfs']).toBe(log.seen['py.fromServer vfs']);
  }, 60_000);
});
