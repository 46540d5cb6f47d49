import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf } from './support/js-engine.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';
import { compileC, toolchain } from './support/wasm.js';

// Hostile wasm modules, compiled here from fixtures/wasm/hostile.c: each is stopped with its own code,
// and the engine keeps serving other calls from the same sandbox process. No test asserts speed.

const hasC = toolchain('c');

const HOSTILE = ['GROW', 'GROW_RAW', 'DECLARE', 'LOOP', 'RECURSE', 'RECURSE_NATIVE', 'FLOOD', 'FOREIGN'] as const;

describe.runIf(hasC)('wasm containment', () => {
  let project: TempProject;
  let engine: Engine;
  const pid = async () => ((await engine.status()).runners['wasm-runner'] as { pid?: number } | undefined)?.pid;

  beforeAll(async () => {
    project = tempProject();
    const tool = (id: string, entry: string, fields: Record<string, unknown> = {}) =>
      project.write(
        `${id}.json`,
        JSON.stringify({ id, description: id, runner: 'wasm-runner', entry, schema: { type: 'object' }, permissions: ['exec.wasm'], ...fields }),
      );
    compileC('sum.c', join(project.tools, 'sum.wasm'));
    tool('sum', 'sum.wasm', { limits: { timeout_ms: 20_000 } });
    for (const kind of HOSTILE) {
      compileC('hostile.c', join(project.tools, `${kind}.wasm`), [kind]);
      tool(kind.toLowerCase().replace('_', '-'), `${kind}.wasm`, { limits: { timeout_ms: 1500, memory_mb: 64, output_bytes: 100_000 } });
    }
    compileC('files.c', join(project.tools, 'files.wasm'));
    tool('files', 'files.wasm', { permissions: ['exec.wasm', 'vfs.read:/data/**', 'vfs.write:/out/**'] });
    engine = await openEngine(project);
    engine.vfs.write('/data/in.txt', 'hello world');
    engine.vfs.write('/secret.txt', 'not for the tool');
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  const stillServes = async () => expect(dataOf(await engine.call('sum', { numbers: [40, 2] }))).toEqual({ sum: 42 });

  it('stops a module that allocates without end with MEMORY_LIMIT', async () => {
    expect(errorOf(await engine.call('grow', {}))).toMatchObject({
      code: 'MEMORY_LIMIT',
      message: expect.stringContaining('exceeded its memory limit of 64 MB'),
      details: { memory_mb: 64 },
    });
    await stillServes();
  });

  it('stops memory.grow called in a loop with its result ignored with MEMORY_LIMIT', async () => {
    expect(errorOf(await engine.call('grow-raw', {}))).toMatchObject({ code: 'MEMORY_LIMIT', details: { memory_mb: 64 } });
    await stillServes();
  });

  it('refuses a module that declares more memory than its limit before it starts', async () => {
    expect(errorOf(await engine.call('declare', {}))).toMatchObject({
      code: 'MEMORY_LIMIT',
      message: expect.stringContaining('declares 96.'),
    });
  });

  it('refuses a module that names the cap global before the rewrite adds it', async () => {
    // global.set 0 with no global: invalid as written, valid once the rewrite appends __arium_cap as global 0.
    // prettier-ignore
    const bytes = [
      0x00,
      0x61,
      0x73,
      0x6d,
      0x01,
      0x00,
      0x00,
      0x00,
      0x01,
      0x04,
      0x01,
      0x60,
      0x00,
      0x00, // type () -> ()
      0x03,
      0x02,
      0x01,
      0x00, // one function
      0x05,
      0x03,
      0x01,
      0x00,
      0x01, // memory of 1 page
      0x07,
      0x13,
      0x02,
      0x06,
      ...Buffer.from('memory'),
      0x02,
      0x00,
      0x06,
      ...Buffer.from('_start'),
      0x00,
      0x00,
      0x0a,
      0x15,
      0x01,
      0x13,
      0x00,
      0x41,
      0xff,
      0xff,
      0x03,
      0x24,
      0x00, // global.set 0 (i32.const 65535): the cap, in pages
      0x03,
      0x40,
      0x41,
      0x80,
      0x02,
      0x40,
      0x00,
      0x1a,
      0x0c,
      0x00,
      0x0b, // loop: memory.grow 256
      0x0b,
    ];
    project.write('cap-forger.wasm', Buffer.from(bytes));
    project.write(
      'cap-forger.json',
      JSON.stringify({
        id: 'cap-forger',
        description: 'x',
        runner: 'wasm-runner',
        entry: 'cap-forger.wasm',
        schema: { type: 'object' },
        permissions: ['exec.wasm'],
        limits: { timeout_ms: 1500, memory_mb: 64 },
      }),
    );
    await engine.refresh();
    expect(engine.problems().find((p) => p.id === 'cap-forger')?.message).toMatch(/syntax error: .*global/i);
    expect(errorOf(await engine.call('cap-forger', {}))).toMatchObject({
      code: 'TOOL_ERROR',
      message: expect.stringMatching(/cap-forger cannot be loaded: the module is not valid WebAssembly: .*global/i),
      details: { phase: 'load' },
    });
    await stillServes();
  });

  it('stops an endless loop with TIMEOUT and keeps the sandbox process', async () => {
    await stillServes();
    const before = await pid();
    expect(errorOf(await engine.call('loop', {}))).toMatchObject({ code: 'TIMEOUT', details: { timeout_ms: 1500 } });
    await stillServes();
    expect(await pid()).toBe(before);
  });

  it('fails deep recursion with TOOL_ERROR, whichever stack runs out', async () => {
    // C keeps frames with addressed locals on a stack in linear memory: it runs off its bottom.
    expect(errorOf(await engine.call('recurse', {}))).toMatchObject({
      code: 'TOOL_ERROR',
      message: expect.stringContaining('recurse trapped (RuntimeError: memory access out of bounds)'),
    });
    // Frames of wasm locals only live on V8's stack, whose limit ends them.
    expect(errorOf(await engine.call('recurse-native', {}))).toMatchObject({
      code: 'TOOL_ERROR',
      message: 'recurse-native overflowed its stack (recursion too deep)',
    });
    await stillServes();
  });

  it('stops a module that floods stdout with OUTPUT_LIMIT', async () => {
    expect(errorOf(await engine.call('flood', {}))).toMatchObject({
      code: 'OUTPUT_LIMIT',
      message: expect.stringContaining('more than 100000 bytes on stdout'),
    });
    await stillServes();
  });

  it('reports a module importing what the host does not offer as a load problem, and fails its calls', async () => {
    const problem = engine.problems().find((p) => p.id === 'foreign');
    expect(problem?.message).toContain('import problem: the module imports env.host_secret (function), which the host does not offer');
    expect(errorOf(await engine.call('foreign', {}))).toMatchObject({
      code: 'TOOL_ERROR',
      message: expect.stringContaining('env.host_secret'),
      details: { phase: 'load' },
    });
  });

  it('refuses ".." out of a preopened folder with ENOTCAPABLE, reading nothing', async () => {
    expect(dataOf(await engine.call('files', { escape: '/data/../secret.txt' }))).toMatchObject({ escape_errno: 76 });
    expect(dataOf(await engine.call('files', { escape: '/data/sub/../../../secret.txt' }))).toMatchObject({ escape_errno: 76 });
  });

  it('opens no path outside every preopened folder', async () => {
    // wasi-libc resolves an absolute path against the preopens and refuses one under none of them.
    for (const path of ['/secret.txt', '/etc/passwd']) {
      expect(dataOf(await engine.call('files', { escape: path }))).toMatchObject({ escape_errno: 76 });
    }
  });

  it('serves every kind of attack at once, and the engine keeps serving', async () => {
    const ids = HOSTILE.map((kind) => kind.toLowerCase().replace('_', '-'));
    const results = await Promise.all([...ids.map((id) => engine.call(id, {})), engine.call('sum', { numbers: [1] })]);
    expect(results.map((r) => (r.ok ? 'ok' : r.error.code))).toEqual([
      'MEMORY_LIMIT',
      'MEMORY_LIMIT',
      'MEMORY_LIMIT',
      'TIMEOUT',
      'TOOL_ERROR',
      'TOOL_ERROR',
      'OUTPUT_LIMIT',
      'TOOL_ERROR',
      'ok',
    ]);
    await stillServes();
  });
});
