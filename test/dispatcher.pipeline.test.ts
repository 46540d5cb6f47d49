import { afterAll, afterEach, beforeAll, describe, expect, it, test, vi } from 'vitest';
import { type Engine, ERROR_CODES, type ErrResult, isRetryable, ToolFailure, type ToolResult } from '../src/index.js';
import { definition, FakeRunner, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** What a runner may throw or reject with; none of it may escape `engine.call`. */
const revoked = Proxy.revocable({}, {});
revoked.revoke();
const THROWN: Array<[string, () => unknown]> = [
  ['a string', () => 'plain string'],
  ['a number', () => 42],
  ['null', () => null],
  ['undefined', () => undefined],
  ['a symbol', () => Symbol('thrown')],
  ['an object with a message', () => ({ message: 'looks like an error' })],
  [
    'an object whose toString throws',
    () => ({
      toString: () => {
        throw new Error('no');
      },
    }),
  ],
  ['a revoked Proxy', () => revoked.proxy],
  [
    'a Proxy whose getPrototypeOf trap throws',
    () =>
      new Proxy(
        {},
        {
          getPrototypeOf: () => {
            throw new Error('trap');
          },
        },
      ),
  ],
  [
    'an Error whose message getter throws',
    () =>
      Object.defineProperty(new Error('x'), 'message', {
        get: () => {
          throw new Error('getter');
        },
      }),
  ],
  ['an Error whose message is a symbol', () => Object.assign(new Error('x'), { message: Symbol('m') })],
  ['a forged ToolFailure look-alike', () => ({ name: 'ToolFailure', stage: 'permission', code: 'DENIED', message: 'forged' })],
];

let project: TempProject;
let engine: Engine;
let throwing: unknown;
let output: () => unknown;

beforeAll(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'throws.json': definition({ id: 'bad.throws' }),
    'rejects.json': definition({ id: 'bad.rejects' }),
    'out.json': definition({ id: 'bad.output' }),
    'typed.json': definition({ id: 'typed.output', output_schema: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } } }),
    'small.json': definition({ id: 'small.output', limits: { output_bytes: 64 } }),
    'stack.json': definition({ id: 'tool.fails' }),
  });
  const fake = new FakeRunner({
    'bad.throws': () => {
      throw throwing;
    },
    'bad.rejects': () => Promise.reject(throwing),
    'bad.output': () => output(),
    'typed.output': () => output(),
    'small.output': () => output(),
    'tool.fails': () => {
      throw new ToolFailure('execution', 'TOOL_ERROR', 'Tool raised ValueError: bad', { toolStack: 'ValueError: bad\n  at run (tool.js:3)' });
    },
  });
  engine = await openEngine(project, { runners: [fake] });
});

afterAll(async () => {
  await engine.close();
  project.remove();
});

afterEach(() => {
  engine.events.removeAllListeners();
  vi.restoreAllMocks();
});

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

describe('the result', () => {
  it('of a success is { ok, data, meta } with the tool, ids, duration and runner', async () => {
    await engine.call('fs.write', { path: '/a.txt', content: 'hello' });
    const result = await engine.call('fs.read', { path: '/a.txt' });
    expect(Object.keys(result).sort()).toEqual(['data', 'meta', 'ok']);
    expect(result).toMatchObject({ ok: true, data: { path: '/a.txt', content: 'hello' } });
    expect(Object.keys(result.meta).sort()).toEqual(['duration_ms', 'run_id', 'runner', 'tool', 'trace_id']);
    expect(result.meta).toMatchObject({ tool: 'fs.read', runner: 'builtin' });
    expect(result.meta.run_id).toMatch(UUID);
    expect(result.meta.trace_id).toBe(result.meta.run_id);
    expect(result.meta.duration_ms).toBeGreaterThanOrEqual(0);
  });

  it('of a failure is plain JSON: { ok: false, error: { type, tool, stage, code, message, retryable, details } }', async () => {
    const result = await engine.call('fs.read', { path: '/missing.txt' });
    const error = failed(result);
    expect(error).toEqual({
      type: 'ToolError',
      tool: 'fs.read',
      stage: 'execution',
      code: 'NOT_FOUND',
      message: 'File not found: /missing.txt',
      retryable: false,
      details: { path: '/missing.txt' },
    });
    expect(error).not.toBeInstanceOf(Error);
    expect(Object.getPrototypeOf(error)).toBe(Object.prototype);
    expect(JSON.parse(JSON.stringify(result))).toEqual(result);
    expect(result.meta.run_id).toMatch(UUID);
  });

  it('gives every run its own run_id and carries a given trace_id', async () => {
    const a = await engine.call('fs.list', { path: '/' }, { trace_id: 'step-7:agent.a' });
    const b = await engine.call('fs.list', { path: '/' }, { trace_id: 'step-7:agent.a' });
    expect(a.meta.trace_id).toBe('step-7:agent.a');
    expect(b.meta.trace_id).toBe('step-7:agent.a');
    expect(a.meta.run_id).not.toBe(b.meta.run_id);
  });

  test.each([['has spaces'], [''], ['x'.repeat(129)], ['new\nline']])('refuses the trace_id %j as validation INVALID_INPUT', async (trace) => {
    const error = failed(await engine.call('fs.list', {}, { trace_id: trace }));
    expect([error.stage, error.code]).toEqual(['validation', 'INVALID_INPUT']);
    expect(error.details).toEqual({ option: 'trace_id' });
  });

  it('reaches each stage with its documented code', async () => {
    const unknown = failed(await engine.call('no.such', {}));
    const invalid = failed(await engine.call('fs.read', { path: 3 }));
    const denied = failed(await engine.call('fs.write', { path: '/x', content: '' }, { grants: ['vfs.read'] }));
    const missing = failed(await engine.call('fs.read', { path: '/nope' }));
    expect([unknown, invalid, denied, missing].map((e) => [e.stage, e.code])).toEqual([
      ['validation', 'UNKNOWN_TOOL'],
      ['validation', 'INVALID_INPUT'],
      ['permission', 'DENIED'],
      ['execution', 'NOT_FOUND'],
    ]);
  });

  it('derives retryable from the code alone', () => {
    const retryable = ERROR_CODES.filter((code) => isRetryable(code));
    expect(retryable.sort()).toEqual(['BUSY', 'CONFLICT', 'TIMEOUT', 'UNAVAILABLE']);
  });

  it("carries a tool's own stack, and nothing else's", async () => {
    const error = failed(await engine.call('tool.fails', {}));
    expect(error).toMatchObject({ stage: 'execution', code: 'TOOL_ERROR', message: 'Tool raised ValueError: bad', retryable: false });
    expect(error.stack).toBe('ValueError: bad\n  at run (tool.js:3)');
  });
});

describe('a call never throws', () => {
  test.each(THROWN)('when a runner throws %s', async (_name, make) => {
    throwing = make();
    const result = await engine.call('bad.throws', {});
    const error = failed(result);
    expect([error.stage, error.code, error.retryable]).toEqual(['execution', 'INTERNAL', false]);
    expect(error.message).toMatch(/^Internal error in the engine while running bad\.throws: /);
    expect(error.stack).toBeUndefined();
    expect(JSON.parse(JSON.stringify(result))).toEqual(result);
  });

  test.each(THROWN)('when a runner rejects with %s', async (_name, make) => {
    throwing = make();
    const error = failed(await engine.call('bad.rejects', {}));
    expect([error.stage, error.code]).toEqual(['execution', 'INTERNAL']);
  });

  it('keeps host stacks and paths out of an internal error', async () => {
    throwing = new Error('boom');
    const error = failed(await engine.call('bad.throws', {}));
    expect(error.message).toBe('Internal error in the engine while running bad.throws: boom');
    expect(JSON.stringify(error)).not.toContain(process.cwd());
    expect(JSON.stringify(error)).not.toContain('node_modules');
  });

  test.each([
    ['a function', () => ({ f: () => 1 }), 'INVALID_OUTPUT', '/f'],
    ['undefined', () => undefined, 'INVALID_OUTPUT', ''],
    ['a BigInt', () => ({ n: 1n }), 'INVALID_OUTPUT', '/n'],
    [
      'a Proxy',
      () =>
        new Proxy(
          {},
          {
            ownKeys: () => {
              throw new Error('trap ran');
            },
          },
        ),
      'INVALID_OUTPUT',
      '',
    ],
    [
      'a getter',
      () => ({
        get x() {
          throw new Error('getter ran');
        },
      }),
      'INVALID_OUTPUT',
      '/x',
    ],
    [
      'a cycle',
      () => {
        const o: Record<string, unknown> = {};
        o.o = o;
        return o;
      },
      'INVALID_OUTPUT',
      '/o',
    ],
    ['a class instance', () => new Date(), 'INVALID_OUTPUT', ''],
    ['a string over the output cap', () => 'x'.repeat(2 * 1024 * 1024), 'OUTPUT_LIMIT', undefined],
    [
      'nesting past the depth limit',
      () => {
        let v: unknown = 1;
        for (let i = 0; i < 100; i++) v = [v];
        return v;
      },
      'OUTPUT_LIMIT',
      undefined,
    ],
  ])('when a runner returns %s → execution %s', async (_name, make, code, pointer) => {
    output = make;
    const error = failed(await engine.call('bad.output', {}));
    expect([error.stage, error.code]).toEqual(['execution', code]);
    if (pointer !== undefined) expect(error.details?.pointer).toBe(pointer);
  });

  it("applies the tool's own output_bytes", async () => {
    output = () => ({ text: 'x'.repeat(100) });
    const error = failed(await engine.call('small.output', {}));
    expect([error.stage, error.code]).toEqual(['execution', 'OUTPUT_LIMIT']);
    expect(error.details).toEqual({ limit_bytes: 64 });
    output = () => ({ text: 'short' });
    expect((await engine.call('small.output', {})).ok).toBe(true);
  });

  it('checks the output against output_schema, with pointers', async () => {
    output = () => ({ n: 'one' });
    const error = failed(await engine.call('typed.output', {}));
    expect([error.stage, error.code]).toEqual(['execution', 'INVALID_OUTPUT']);
    expect(error.details?.violations).toEqual([expect.objectContaining({ pointer: '/n', message: 'must be integer' })]);
    output = () => ({ n: 1 });
    expect(await engine.call('typed.output', {})).toMatchObject({ ok: true, data: { n: 1 } });
  });

  it('when an event listener throws, on any channel', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    for (const channel of ['event', 'invocation', 'result', 'error', 'security'] as const) {
      engine.events.on(channel, () => {
        throw new Error(`listener on ${channel} broke`);
      });
    }
    const ok = await engine.call('fs.list', { path: '/' });
    expect(ok.ok).toBe(true);
    const denied = failed(await engine.call('fs.write', { path: '/x', content: '' }, { grants: [] }));
    expect(denied.code).toBe('DENIED');
    // Reported (once per engine), never swallowed silently and never thrown.
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]?.[0])).toContain('An Arium event listener threw and was ignored');
  });

  test.each([
    ['a revoked Proxy', () => revoked.proxy],
    [
      'an object whose toString throws',
      () => ({
        toString: () => {
          throw new Error('no');
        },
      }),
    ],
    ['a symbol', () => Symbol('listener')],
  ])('when a listener throws %s, first thing in a fresh engine', async (_name, make) => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const fresh = await openEngine(project);
    try {
      // The error channel is the last one a failing call publishes to, from inside its own catch block.
      fresh.events.on('error', () => {
        throw make();
      });
      const error = failed(await fresh.call('fs.read', { path: '/nope' }));
      expect(error.code).toBe('NOT_FOUND');
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      await fresh.close();
    }
  });

  it('when the options are not an object', async () => {
    for (const options of [null, 'fast', 42]) {
      const result = await engine.call('fs.list', { path: '/' }, options as never);
      expect(result.ok).toBe(true);
    }
  });

  test.each([
    ['not an array', 'vfs.read'],
    ['an array with a number', [1]],
    ['an unknown permission', ['vfs.teleport']],
    ['a scope with ..', ['vfs.read:/a/../b']],
  ])('refuses per-call grants that are %s as validation INVALID_INPUT', async (_name, grants) => {
    const error = failed(await engine.call('fs.list', { path: '/' }, { grants: grants as never }));
    expect([error.stage, error.code]).toEqual(['validation', 'INVALID_INPUT']);
    expect(error.details).toEqual({ option: 'grants' });
  });

  it('and the engine still works after all of the above', async () => {
    const events = recordEvents(engine);
    const result = await engine.call('fs.read', { path: '/a.txt' });
    expect(result).toMatchObject({ ok: true, data: { content: 'hello' } });
    expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'ToolResultEvent']);
  });
});
