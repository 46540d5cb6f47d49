import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wasmSetup } from '../runners/wasm/index.js';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf } from './support/js-engine.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';
import { compileC, compileRust, toolchain } from './support/wasm.js';

// The wasm runner with real modules, compiled here from fixtures/wasm by Debian's toolchains: a C and
// a Rust tool (input on stdin, output on stdout, logs on stderr), files through WASI on the call's VFS.

const hasC = toolchain('c');
const hasRust = toolchain('rust');

function wasmTool(project: TempProject, id: string, entry: string, fields: Record<string, unknown> = {}): void {
  project.write(
    `${id}.json`,
    JSON.stringify({
      id,
      description: `wasm tool ${id}`,
      runner: 'wasm-runner',
      entry,
      schema: { type: 'object' },
      permissions: ['exec.wasm'],
      ...fields,
    }),
  );
}

describe.runIf(hasC)('C tools', () => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = tempProject();
    compileC('sum.c', join(project.tools, 'sum.wasm'));
    compileC('hostile.c', join(project.tools, 'fail.wasm'), ['FAIL']);
    compileC('files.c', join(project.tools, 'files.wasm'));
    writeFileSync(join(project.tools, 'broken.wasm'), Buffer.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1]));
    wasmTool(project, 'sum', 'sum.wasm', { limits: { timeout_ms: 20_000 } });
    wasmTool(project, 'fail', 'fail.wasm');
    wasmTool(project, 'broken', 'broken.wasm');
    wasmTool(project, 'files', 'files.wasm', { permissions: ['exec.wasm', 'vfs.read:/data/**', 'vfs.write:/out/**'] });
    engine = await openEngine(project);
    engine.vfs.write('/data/in.txt', 'hello world');
    engine.vfs.write('/secret.txt', 'not for the tool');
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  it('takes the input as JSON on stdin and returns stdout as JSON, stderr as logs', async () => {
    const result = await engine.call('sum', { numbers: [1, 2, 3.5] });
    expect(dataOf(result)).toEqual({ sum: 6.5 });
    expect(result.meta.logs).toEqual([{ level: 'log', message: 'summed' }]);
  });

  it('serves concurrent calls, each with its own input', async () => {
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => engine.call('sum', { numbers: [i, i, 1] })));
    expect(results.map((r) => dataOf(r).sum)).toEqual(Array.from({ length: 12 }, (_, i) => 2 * i + 1));
  });

  it('fails a non-zero exit with TOOL_ERROR carrying what the module wrote on stderr', async () => {
    expect(errorOf(await engine.call('fail', {}))).toMatchObject({
      code: 'TOOL_ERROR',
      message: 'fail exited with code 3: bad input: no numbers',
      details: { exit_code: 3 },
    });
  });

  it('reports a module V8 cannot compile as a load problem with the compiler message, and its calls fail', async () => {
    const problem = engine.problems().find((p) => p.id === 'broken');
    expect(problem?.message).toMatch(/syntax error: .*(section|function|expected|length)/i);
    expect(errorOf(await engine.call('broken', {}))).toMatchObject({ code: 'TOOL_ERROR', details: { phase: 'load' } });
  });

  it('opens, reads, writes and lists VFS files in the folders its permissions name, and commits on success', async () => {
    expect(dataOf(await engine.call('files', {}))).toEqual({ read: 11, entries: 3, escape_errno: 0 });
    expect(engine.vfs.read('/out/len.txt').toString()).toBe('11');
  });

  it('lands no write of a call that fails', async () => {
    engine.vfs.write('/data/in.txt', 'a longer text than before');
    const failed = await engine.call('files', { fail: true });
    expect(errorOf(failed)).toMatchObject({ code: 'TOOL_ERROR', message: expect.stringContaining('failing after writing') });
    expect(engine.vfs.read('/out/len.txt').toString()).toBe('11');
    engine.vfs.write('/data/in.txt', 'hello world');
  });

  it('compiles a module again when its file changes', async () => {
    compileC('sum.c', join(project.tools, 'swap.wasm'));
    wasmTool(project, 'swap', 'swap.wasm');
    await engine.refresh();
    expect(dataOf(await engine.call('swap', { numbers: [1] }))).toEqual({ sum: 1 });
    compileC('hostile.c', join(project.tools, 'swap.wasm'), ['FAIL']);
    await engine.refresh();
    expect(errorOf(await engine.call('swap', { numbers: [1] }))).toMatchObject({ code: 'TOOL_ERROR', details: { exit_code: 3 } });
  });

  it('preopens the literal folders of the vfs permissions, argv and environment from the definition', () => {
    const tool = { spec: { id: 'x.y', entry: 'bin/t.wasm' }, declared: [] } as never;
    expect(wasmSetup(tool)).toEqual({ args: ['t.wasm'], env: ['ARIUM_TOOL=x.y'], preopens: [] });
  });
});

describe.runIf(hasRust)('Rust tools', () => {
  let project: TempProject;
  let engine: Engine;

  beforeAll(async () => {
    project = tempProject();
    compileRust('sum.rs', join(project.tools, 'sum.wasm'));
    wasmTool(project, 'sum', 'sum.wasm', { limits: { timeout_ms: 20_000 } });
    engine = await openEngine(project);
  });

  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  it('runs a Rust program compiled for wasm32-wasi', async () => {
    const result = await engine.call('sum', { numbers: [0.5, 0.25, 10] });
    expect(dataOf(result)).toEqual({ sum: 10.75 });
    expect(result.meta.logs).toEqual([{ level: 'log', message: 'summed' }]);
  });

  it('turns a panic into TOOL_ERROR with the panic message', async () => {
    expect(errorOf(await engine.call('sum', { nothing: 1 }))).toMatchObject({
      code: 'TOOL_ERROR',
      message: expect.stringMatching(/trapped \(RuntimeError: unreachable\): .*expected \{"numbers": \[\.\.\.\]\}/s),
    });
  });
});
