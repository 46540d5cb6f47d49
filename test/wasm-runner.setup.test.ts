import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WASM_DEFINITION_LIMITS } from '../runners/wasm/index.js';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf } from './support/js-engine.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';
import { compileC, toolchain } from './support/wasm.js';

// What a wasm module starts with: its argv and environment come from its definition only (args, env),
// bounded and checked at load; the host's environment never reaches it. And a sandbox process that
// dies fails its calls with a message that names the wasm runner's sandbox.

const PLANTED = 'ARIUM_SEAM_PLANTED_SECRET';

function wasmTool(project: TempProject, id: string, fields: Record<string, unknown> = {}): void {
  project.write(
    `${id}.json`,
    JSON.stringify({
      id,
      description: `wasm tool ${id}`,
      runner: 'wasm-runner',
      entry: 'argv.wasm',
      schema: { type: 'object' },
      permissions: ['exec.wasm'],
      limits: { timeout_ms: 20_000 },
      ...fields,
    }),
  );
}

const long = 'x'.repeat(WASM_DEFINITION_LIMITS.max_arg_chars + 1);
const many = Array.from({ length: WASM_DEFINITION_LIMITS.max_args + 1 }, (_, i) => `a${i}`);
const manyEnv = Object.fromEntries(Array.from({ length: WASM_DEFINITION_LIMITS.max_env + 1 }, (_, i) => [`V${i}`, '1']));

describe.runIf(toolchain('c'))('a wasm tool started from its definition', () => {
  let project: TempProject;
  let engine: Engine;
  const saved = process.env[PLANTED];

  beforeAll(async () => {
    // In the engine's own environment: the module must not see it.
    process.env[PLANTED] = 'host-only';
    project = tempProject();
    compileC('argv.c', join(project.tools, 'argv.wasm'));
    compileC('hostile.c', join(project.tools, 'loop.wasm'), ['LOOP']);
    wasmTool(project, 'plain');
    wasmTool(project, 'given', { args: ['--mode', 'fast', 'two words', ''], env: { GREETING: 'hello "world"', EMPTY: '', lower_case: 'yes' } });
    wasmTool(project, 'other', { args: ['other'], env: { GREETING: 'bye' } });
    wasmTool(project, 'loop', { entry: 'loop.wasm', limits: { timeout_ms: 60_000 } });
    wasmTool(project, 'bad-many-args', { args: many });
    wasmTool(project, 'bad-long-arg', { args: [long] });
    wasmTool(project, 'bad-nul-arg', { args: ['a\u0000b'] });
    wasmTool(project, 'bad-arg-type', { args: [1] });
    wasmTool(project, 'bad-env-name', { env: { '1ABC': 'x' } });
    wasmTool(project, 'bad-env-reserved', { env: { ARIUM_TOOL: 'forged' } });
    wasmTool(project, 'bad-env-value', { env: { A: 'y'.repeat(WASM_DEFINITION_LIMITS.max_env_value_chars + 1) } });
    wasmTool(project, 'bad-env-count', { env: manyEnv });
    wasmTool(project, 'bad-env-list', { env: ['A=1'] });
    project.write(
      'js-args.json',
      JSON.stringify({
        id: 'js-args',
        description: 'd',
        runner: 'js-runner',
        entry: 'j.js',
        schema: { type: 'object' },
        permissions: ['exec.js'],
        args: ['x'],
      }),
    );
    project.write('j.js', 'export default () => 1;\n');
    engine = await openEngine(project);
  });

  afterAll(async () => {
    if (saved === undefined) delete process.env[PLANTED];
    else process.env[PLANTED] = saved;
    await engine.close();
    project.remove();
  });

  it('gives a module argv[0] and ARIUM_TOOL only when its definition gives neither', async () => {
    expect(dataOf(await engine.call('plain', {}))).toEqual({ argv: ['argv.wasm'], environ: ['ARIUM_TOOL=plain'] });
  });

  it("passes the definition's args after argv[0] and its env, and nothing of the host's environment", async () => {
    const data = dataOf(await engine.call('given', {})) as { argv: string[]; environ: string[] };
    expect(data.argv).toEqual(['argv.wasm', '--mode', 'fast', 'two words', '']);
    expect(data.environ).toEqual(['ARIUM_TOOL=given', 'GREETING=hello "world"', 'EMPTY=', 'lower_case=yes']);
    expect(data.environ.join('\n')).not.toContain(PLANTED);
    expect(data.environ.some((e) => e.startsWith('PATH=') || e.startsWith('HOME='))).toBe(false);
  });

  it('gives concurrent calls of different tools each its own argv and environment', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => engine.call(i % 2 === 0 ? 'given' : 'other', {})));
    for (const [i, result] of results.entries()) {
      const data = dataOf(result) as { argv: string[]; environ: string[] };
      if (i % 2 === 0) expect(data.argv[1]).toBe('--mode');
      else expect(data).toEqual({ argv: ['argv.wasm', 'other'], environ: ['ARIUM_TOOL=other', 'GREETING=bye'] });
    }
  });

  it.each([
    ['bad-many-args', '/args', /must NOT have more than 64 items/],
    ['bad-long-arg', '/args/0', /must NOT have more than 4096 characters/],
    ['bad-nul-arg', '/args/0', /must match pattern/],
    ['bad-arg-type', '/args/0', /must be string/],
    ['bad-env-name', '/env/1ABC', /the name "1ABC" must match pattern/],
    ['bad-env-reserved', '/env/ARIUM_TOOL', /the name "ARIUM_TOOL" must match pattern "\^\(\?!ARIUM_\)/],
    ['bad-env-value', '/env/A', /must NOT have more than 4096 characters/],
    ['bad-env-count', '/env', /must NOT have more than 64 properties/],
    ['bad-env-list', '/env', /must be object/],
  ])('refuses %s at load, naming where (%s) and what is wrong', (id, at, message) => {
    const problem = engine.problems().find((p) => p.id === id);
    expect(problem?.message).toMatch(message);
    expect(problem?.message).toContain(at);
  });

  it('refuses args or env on a tool of another runner, naming the runner they belong to', async () => {
    const problem = engine.problems().find((p) => p.id === 'js-args');
    expect(problem).toMatchObject({
      at: '/args',
      message: expect.stringContaining('"args" is a field of wasm-runner tools; a js-runner tool cannot have it'),
    });
  });

  it('says a crashed sandbox was the wasm runner’s, and the next call runs in a new one', async () => {
    type Status = { in_flight?: number; processes?: { pids?: number[] } };
    const status = async () => (await engine.status()).runners['wasm-runner'] as Status;
    const call = engine.call('loop', {});
    // Once the call runs in one of them, kill them all, as V8 aborting the process would.
    await expect.poll(async () => (await status()).in_flight, { timeout: 30_000, interval: 50 }).toBe(1);
    const pids = (await status()).processes?.pids ?? [];
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    const error = errorOf(await call);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', retryable: true, details: { runner: 'wasm-runner' } });
    expect(error.message).toMatch(/^The WASM sandbox process stopped \(signal SIGKILL\)/);
    expect(error.message).not.toMatch(/JS/);
    // The other killed processes' ends are seen a moment later; a call sent to one before that is
    // refused the same retryable way, so the next call waits until the pool has let them all go.
    await expect
      .poll(async () => ((await status()).processes?.pids ?? []).some((pid) => pids.includes(pid)), { timeout: 30_000, interval: 50 })
      .toBe(false);
    expect(dataOf(await engine.call('plain', {}))).toEqual({ argv: ['argv.wasm'], environ: ['ARIUM_TOOL=plain'] });
  });
});
