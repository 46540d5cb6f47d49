import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { dataOf, errorOf, jsEngine } from './support/js-engine.js';
import { definition, openEngine, TRIVIAL_JS, tempProject } from './support/project.js';

// The tool contract of the JS runner: modules, ctx, logs, outputs and errors,
// over the real tools in fixtures/js/project.

let engine: Engine;

beforeAll(async () => {
  engine = await jsEngine('project');
});

afterAll(async () => {
  await engine.close();
});

describe('a tool file replaced by a FIFO after it loaded', () => {
  it('fails its calls at once as not a regular file (reading it would hold the sandbox), and other calls go on', async () => {
    const project = tempProject({
      'piped.json': definition({ id: 'piped', entry: 'piped.js', limits: { timeout_ms: 3000 } }),
      'piped.js': TRIVIAL_JS,
      'other.json': definition({ id: 'other', entry: 'other.js' }),
      'other.js': TRIVIAL_JS,
    });
    const own = await openEngine(project);
    try {
      expect(dataOf(await own.call('piped', { a: 1 }))).toEqual({ a: 1 });
      rmSync(join(project.tools, 'piped.js'));
      execFileSync('mkfifo', [join(project.tools, 'piped.js')]);
      for (let i = 0; i < 2; i++) {
        const error = errorOf(await own.call('piped', {}));
        expect(error.code).toBe('TOOL_ERROR');
        expect(error.message).toContain('piped.js is not a regular file');
      }
      expect(dataOf(await own.call('other', { b: 2 }))).toEqual({ b: 2 });
    } finally {
      await own.close();
      project.remove();
    }
  });
});

describe('a tool with more source than is compiled on the sandbox’s own thread (256 KB)', () => {
  it('is compiled (and, as TypeScript, transpiled) on isolate threads: it runs, again and again, imports its files, and an error names its file', async () => {
    // 300 KB of functions: compiled and linked asynchronously, off the thread that serves the other calls.
    const filler = Array.from({ length: 8000 }, (_, i) => `export function f${i}(x) { return x + ${i}; }`).join('\n');
    expect(filler.length).toBeGreaterThan(256 * 1024); // ASYNC_COMPILE_CHARS in runners/js/worker/link.mjs
    const typedFiller = Array.from({ length: 8000 }, (_, i) => `export function g${i}(x: number): number { return x + ${i}; }`).join('\n');
    const project = tempProject({
      'big.json': definition({ id: 'big', entry: 'big.js' }),
      'big.js': `import { twice } from './lib.js';\n${filler}\nexport default function run(input) { return { n: twice(f7999(input.n)) }; }\n`,
      'lib.js': 'export const twice = (x) => 2 * x;\n',
      'bad.json': definition({ id: 'bad', entry: 'bad.js' }),
      'bad.js': `${filler}\nexport default function run( {\n`,
      'small.json': definition({ id: 'small', entry: 'small.js' }),
      'small.js': TRIVIAL_JS,
      // TypeScript as large is transpiled in an isolate of its own, on that isolate's thread.
      'typed.json': definition({ id: 'typed', entry: 'typed.ts' }),
      'typed.ts': `${typedFiller}\nexport default function run(input: { n: number }): { n: number } { return { n: g7999(input.n) }; }\n`,
      'mistyped-small.json': definition({ id: 'mistyped-small', entry: 'mistyped-small.ts' }),
      'mistyped-small.ts': 'export default function run(input: { n: number ): number { return 1; }\n',
      'mistyped.json': definition({ id: 'mistyped', entry: 'mistyped.ts' }),
      'mistyped.ts': `${typedFiller}\nexport default function run(input: { n: number ): number { return 1; }\n`,
    });
    const own = await openEngine(project);
    try {
      const calls = await Promise.all([
        own.call('big', { n: 1 }),
        own.call('small', { s: 1 }),
        own.call('big', { n: 2 }),
        own.call('small', { s: 2 }),
      ]);
      expect(calls.map((r) => dataOf(r))).toEqual([{ n: 16000 }, { s: 1 }, { n: 16002 }, { s: 2 }]);
      // Later calls run in contexts the pool linked ahead for it, asynchronously too.
      for (let i = 0; i < 8; i++) expect(dataOf(await own.call('big', { n: i }))).toEqual({ n: 2 * (i + 7999) });
      const error = errorOf(await own.call('bad', {}));
      expect(error.code).toBe('TOOL_ERROR');
      expect(error.message).toMatch(/^SyntaxError in tools\/bad\.js: /);
      const typed = await Promise.all([own.call('typed', { n: 1 }), own.call('small', { s: 3 })]);
      expect(typed.map((r) => dataOf(r))).toEqual([{ n: 8000 }, { s: 3 }]);
      const mistyped = errorOf(await own.call('mistyped', {}));
      expect(mistyped.code).toBe('TOOL_ERROR');
      expect(mistyped.message).toMatch(/^TypeScript error in tools\/mistyped\.ts:8001:\d+: ';' expected\.$/);
      // The same error in a small file, transpiled in this process, reads the same way.
      const small = errorOf(await own.call('mistyped-small', {}));
      expect(small.code).toBe('TOOL_ERROR');
      expect(small.message).toMatch(/^TypeScript error in tools\/mistyped-small\.ts:1:\d+: ';' expected\.$/);
    } finally {
      await own.close();
      project.remove();
    }
  });
});

describe('modules', () => {
  it('runs a synchronous default export', async () => {
    const result = await engine.call('reverse', { text: 'arium' });
    expect(dataOf(result)).toEqual({ text: 'muira' });
    expect(result.meta.runner).toBe('js-runner');
  });

  it('runs an async default export and gives it a frozen ctx describing the call', async () => {
    const result = await engine.call('echo', { a: [1, { b: 'c' }] }, { trace_id: 'trace-1' });
    const data = dataOf(result);
    expect(data).toMatchObject({ input: { a: [1, { b: 'c' }] }, tool: 'echo', runId: result.meta.run_id, traceId: 'trace-1', frozen: true });
    expect(data.limits).toEqual({ timeout_ms: 30_000, memory_mb: 128, output_bytes: 1024 * 1024 });
  });

  it('transpiles TypeScript on load, with relative imports between TS files', async () => {
    expect(dataOf(await engine.call('greet', { name: 'Ada', excited: true }))).toEqual({ text: 'Hello, Ada!', length: 11, mood: 'excited' });
    expect(dataOf(await engine.call('greet', { name: 'Ada' }))).toEqual({ text: 'Hello, Ada.', length: 11, mood: 'calm' });
  });

  it('waits for top-level await before running the tool', async () => {
    expect(dataOf(await engine.call('mod.tla', {}))).toEqual({ ready: 'loaded with top-level await' });
  });

  it('runs WebAssembly whose memory declares a maximum', async () => {
    expect(dataOf(await engine.call('wasm', { a: 20, b: 22 }))).toEqual({ sync: 42, async: 42, memoryBytes: 65_536, constructorGuarded: true });
  });

  it.each([
    ['mod.top-throw', 'The tool module threw while loading: Error: thrown while the module loads'],
    ['mod.no-default', 'must export a function as its default export'],
    ['mod.tla-never', 'a top-level await never settled'],
    ['mod.link-error', "does not provide an export named 'missing'"],
    ['mod.node-import', 'imports "node:fs": tools can import only their own files'],
    ['mod.outside', 'which is outside the tools folder'],
  ])('%s fails with TOOL_ERROR and says why', async (id, message) => {
    const error = errorOf(await engine.call(id, {}));
    expect(error).toMatchObject({ code: 'TOOL_ERROR', stage: 'execution', retryable: false });
    expect(error.message).toContain(message);
    expect(JSON.stringify(error)).not.toMatch(/\/work\/|\/home\/|\/tmp\/|node_modules|runners\/js/);
  });

  it('shows the module error with the tool file as the stack, never a host path', async () => {
    const error = errorOf(await engine.call('mod.top-throw', {}));
    expect(error.stack).toMatch(/^Error: thrown while the module loads\n\s+at tools\/modules\/top-throw\.js:1:7$/);
  });
});

describe('ctx.vfs', () => {
  const run = (steps: Array<{ op: string; args: unknown[] }>) => engine.call('notes', { steps });

  it('reads, writes, lists, stats, checks, makes folders, moves and deletes', async () => {
    const out = dataOf<Array<Record<string, unknown>>>(
      await run([
        { op: 'mkdir', args: ['/notes'] },
        { op: 'write', args: ['/notes/a.txt', 'alpha'] },
        { op: 'write', args: ['/notes/a.txt', '+beta', { append: true }] },
        { op: 'read', args: ['/notes/a.txt'] },
        { op: 'exists', args: ['/notes/b.txt'] },
        { op: 'move', args: ['/notes/a.txt', '/notes/b.txt'] },
        { op: 'list', args: ['/notes'] },
        { op: 'stat', args: ['/notes/b.txt'] },
        { op: 'read', args: ['/notes/b.txt', { encoding: 'base64' }] },
        { op: 'read', args: ['/notes/b.txt', { encoding: 'bytes' }] },
        { op: 'delete', args: ['/notes', { recursive: true }] },
        { op: 'exists', args: ['/notes'] },
      ]),
    );
    expect(out.map((o) => o.ok)).toEqual(Array(12).fill(true));
    expect(out[1]?.value).toEqual({ path: '/notes/a.txt', created: true, size: 5 });
    expect(out[3]?.value).toBe('alpha+beta');
    expect(out[4]?.value).toBe(false);
    expect(out[5]?.value).toEqual({ from: '/notes/a.txt', to: '/notes/b.txt', overwritten: false });
    expect(out[6]?.value).toEqual({ entries: [{ path: '/notes/b.txt', name: 'b.txt', type: 'file', size: 10 }], truncated: false });
    expect(out[7]?.value).toMatchObject({ path: '/notes/b.txt', type: 'file', size: 10 });
    expect(out[8]?.value).toBe(Buffer.from('alpha+beta').toString('base64'));
    expect(out[9]?.value).toEqual({ bytes: [...Buffer.from('alpha+beta')] });
    expect(out[10]?.value).toMatchObject({ path: '/notes', deleted: 2 });
    expect(out[11]?.value).toBe(false);
  });

  it('commits what the tool wrote only when the call succeeds', async () => {
    dataOf(await run([{ op: 'write', args: ['/kept.txt', 'kept'] }]));
    expect(engine.vfs.read('/kept.txt').toString()).toBe('kept');
  });

  it.each([
    ['throws', 'throw', 'TOOL_ERROR'],
    ['returns output that is not JSON', 'bigint', 'INVALID_OUTPUT'],
  ])('a call that %s after writing leaves the VFS exactly as it was', async (_what, then, code) => {
    dataOf(await run([{ op: 'write', args: ['/atomic/before.txt', 'before'] }]));
    const before = engine.vfs.list('/', { recursive: true }).entries;
    const result = await engine.call('notes', {
      steps: [
        { op: 'write', args: ['/atomic/before.txt', 'overwritten'] },
        { op: 'write', args: ['/atomic/new.txt', 'new'] },
        { op: 'mkdir', args: ['/atomic/dir'] },
        { op: 'delete', args: ['/kept.txt'] },
      ],
      then,
    });
    expect(errorOf(result).code).toBe(code);
    expect(engine.vfs.list('/', { recursive: true }).entries).toEqual(before);
    expect(engine.vfs.read('/atomic/before.txt').toString()).toBe('before');
  });

  it('writes bytes, and hands failures to the tool as errors with the engine code', async () => {
    const out = dataOf<Array<Record<string, unknown>>>(
      await run([
        { op: 'write', args: ['/bin.dat', 'AAEC/w==', { encoding: 'base64' }] },
        { op: 'read', args: ['/bin.dat'] },
        { op: 'read', args: ['/missing.txt'] },
        { op: 'write', args: ['/bin.dat', 'again', { exclusive: true }] },
        { op: 'list', args: ['/', { limit: 0 }] },
        { op: 'write', args: ['/x.txt', 'y', { append: 'yes' }] },
      ]),
    );
    expect(out[0]).toMatchObject({ ok: true, value: { size: 4 } });
    expect(out.slice(1).map((o) => [o.name, o.code])).toEqual([
      ['VfsError', 'NOT_TEXT'],
      ['VfsError', 'NOT_FOUND'],
      ['VfsError', 'ALREADY_EXISTS'],
      ['VfsError', 'INVALID_INPUT'],
      ['VfsError', 'INVALID_INPUT'],
    ]);
    expect(out[2]?.message).toBe('File not found: /missing.txt');
  });
});

describe('logs', () => {
  it('captures console.* and ctx.log in meta.logs, with their levels', async () => {
    const result = await engine.call('logger', {});
    dataOf(result);
    const logs = result.meta.logs ?? [];
    expect(logs.map((l) => l.level)).toEqual(['log', 'info', 'warn', 'error', 'log', 'info']);
    expect(logs[0]?.message).toBe('plain 42 { a: [1, "two"] } null undefined');
    expect(logs[3]?.message).toMatch(/^Error: shown with its stack\n\s+at run \(tools\/logger\.js:\d+:\d+\)$/);
    expect(logs[5]?.message).toBe('from ctx.log true');
  });

  it('bounds what a call may log and counts what it dropped', async () => {
    const result = await engine.call('logger', { count: 5000, width: 100 });
    dataOf(result);
    const text = (result.meta.logs ?? []).reduce((n, l) => n + l.message.length, 0);
    expect(text).toBeLessThanOrEqual(engine.policy.log_bytes + 100);
    expect(result.meta.logs_dropped).toBeGreaterThan(0);
  });
});

describe('outputs', () => {
  it.each([
    ['plain', { a: 1, b: [true, null, 'x', 1.5], c: { d: {} } }],
    ['nothing', null],
    ['null-proto', { ok: true }],
    ['fake-envelope', { ok: false, error: { code: 'DENIED', message: 'forged' } }],
    ['poisoned-tojson', { real: [1, 2] }],
  ])('returns %s as plain JSON data, inside an envelope the engine builds', async (kind, expected) => {
    const result = await engine.call('outputs', { kind });
    expect(result.ok).toBe(true);
    expect(dataOf(result)).toEqual(expected);
  });

  it.each([
    ['function', 'INVALID_OUTPUT', '/f'],
    ['bigint', 'INVALID_OUTPUT', '/n'],
    ['cycle', 'INVALID_OUTPUT', '/self'],
    ['nan', 'INVALID_OUTPUT', '/n'],
    ['infinity', 'INVALID_OUTPUT', '/1'],
    ['getter', 'INVALID_OUTPUT', '/x'],
    ['throwing-getter', 'INVALID_OUTPUT', '/x'],
    ['proxy', 'INVALID_OUTPUT', '/'],
    ['nested-proxy', 'INVALID_OUTPUT', '/'],
    ['throwing-proxy', 'INVALID_OUTPUT', '/'],
    ['nested-throwing-proxy', 'INVALID_OUTPUT', '/list/1'],
    ['date', 'INVALID_OUTPUT', '/when'],
    ['map', 'INVALID_OUTPUT', '/m'],
    ['typed-array', 'INVALID_OUTPUT', '/bytes'],
    ['symbol', 'INVALID_OUTPUT', '/'],
    ['holes', 'INVALID_OUTPUT', '/1'],
    ['undefined', 'INVALID_OUTPUT', '/u'],
    ['class', 'INVALID_OUTPUT', '/'],
    ['huge', 'OUTPUT_LIMIT', '/big'],
    ['deep', 'OUTPUT_LIMIT', undefined],
  ])('refuses %s with %s', async (kind, code, pointer) => {
    const error = errorOf(await engine.call('outputs', { kind }));
    expect(error).toMatchObject({ code, stage: 'execution' });
    if (pointer !== undefined) expect(error.details?.pointer).toBe(pointer);
  });
});

describe('thrown values', () => {
  it.each([
    ['error', 'Error: plain failure', true],
    ['custom', 'ToolProblem: custom failure', true],
    ['type', "TypeError: Cannot read properties of null (reading 'property')", true],
    ['null', 'The tool threw a non-Error value: null', false],
    ['undefined', 'The tool threw a non-Error value: undefined', false],
    ['string', 'The tool threw a non-Error value: just a string', false],
    ['number', 'The tool threw a non-Error value: 42', false],
    ['symbol', 'The tool threw a non-Error value: Symbol(thrown)', false],
    ['object', 'The tool threw a non-Error value: { reason: "an object" }', false],
    ['hostile-getters', 'The tool threw a non-Error value: the thrown value could not be read', false],
    ['proxy-error', 'The tool threw a non-Error value: the thrown value could not be read', false],
  ])('a thrown %s becomes TOOL_ERROR "%s"', async (kind, message, hasStack) => {
    for (const sync of [false, true]) {
      const error = errorOf(await engine.call('throws', { kind, sync }));
      expect(error).toMatchObject({ code: 'TOOL_ERROR', stage: 'execution', message });
      if (hasStack) expect(error.stack).toMatch(/\n\s+at .*\(tools\/throws\.js:\d+:\d+\)/);
      else expect(error.stack).toBeUndefined();
    }
  });

  it('cuts a huge message and keeps the stack the tool wrote, host-looking paths and all', async () => {
    const huge = errorOf(await engine.call('throws', { kind: 'huge-message' }));
    expect(huge.message.length).toBeLessThan(9000);
    // A tool can put anything in its own stack; the engine adds nothing of the host to it.
    const fake = errorOf(await engine.call('throws', { kind: 'fake-stack' }));
    expect(fake.stack).toBe('Error: fake stack\n    at run (/home/secret/host/path.js:1:1)');
  });
});

describe('isolation between calls', () => {
  it('gives every call a clean global scope', async () => {
    const first = dataOf(await engine.call('state', { secret: 'first-caller' }));
    const second = dataOf(await engine.call('state', {}));
    const clean = { counter: null, polluted: null, arrayPolluted: null, mathRandomReplaced: false, regexpLastMatch: '' };
    expect(first).toEqual(clean);
    expect(second).toEqual(clean);
  });
});

/** A JS tool `id` that may read and write, whose body is `body`. */
const tool = (id: string, body: string) => ({
  [`${id}.json`]: definition({ id, entry: `${id}.js`, permissions: ['exec.js', 'vfs.read', 'vfs.write'] }),
  [`${id}.js`]: `export default async function run(input, ctx) {\n${body}\n}\n`,
});

describe('a ctx.vfs failure the tool does not catch', () => {
  let project: ReturnType<typeof tempProject>;
  let own: Engine;

  beforeAll(async () => {
    project = tempProject({
      ...tool('over-quota', "await ctx.vfs.write('/big.bin', new Uint8Array(2048));"),
      ...tool('missing', "return await ctx.vfs.read('/nope.txt');"),
      ...tool('rethrown', "try { await ctx.vfs.read('/nope.txt'); } catch (e) { e.code = 'QUOTA_EXCEEDED'; e.details = { forged: true }; throw e; }"),
      ...tool('forged', "const e = new Error('made up'); e.name = 'VfsError'; e.code = 'QUOTA_EXCEEDED'; throw e;"),
      ...tool('misused', "await ctx.vfs.write('/x.txt', 42);"),
    });
    own = await openEngine(project, { vfsQuota: { max_bytes: 1024 } });
  });
  afterAll(async () => {
    await own.close();
    project.remove();
  });

  it('ends the call with its own code and details, and the tool’s stack', async () => {
    const quota = errorOf(await own.call('over-quota', {}));
    expect(quota).toMatchObject({ code: 'QUOTA_EXCEEDED', stage: 'execution', details: { path: '/big.bin', limit: 'max_bytes', max: 1024 } });
    expect(quota.message).toMatch(/^Write would bring the VFS to 2048 bytes, over its quota of 1024/);
    expect(quota.stack).toContain('over-quota.js');
    expect(errorOf(await own.call('missing', {}))).toMatchObject({ code: 'NOT_FOUND', details: { path: '/nope.txt' } });
  });

  it('keeps the engine’s code even when the tool changed the error before rethrowing it', async () => {
    const error = errorOf(await own.call('rethrown', {}));
    expect(error).toMatchObject({ code: 'NOT_FOUND', details: { path: '/nope.txt' } });
    expect(error.details).not.toHaveProperty('forged');
  });

  it('an error the tool made to look like one is its own: TOOL_ERROR', async () => {
    expect(errorOf(await own.call('forged', {}))).toMatchObject({ code: 'TOOL_ERROR', message: 'VfsError: made up' });
  });

  it('a misuse of ctx.vfs (a bad argument) stays the tool’s error: TOOL_ERROR naming it', async () => {
    const error = errorOf(await own.call('misused', {}));
    expect(error).toMatchObject({ code: 'TOOL_ERROR', details: { name: 'VfsError', vfs_code: 'INVALID_INPUT' } });
    expect(error.message).toMatch(/^VfsError: ctx\.vfs\.write: /);
  });
});

describe('what a tool hands the engine, bounded', () => {
  let project: ReturnType<typeof tempProject>;
  let own: Engine;

  beforeAll(async () => {
    project = tempProject({
      ...tool('wide', "await ctx.vfs.write('/w.bin', new Uint16Array([1, 2]));"),
      ...tool(
        'bytes',
        "await ctx.vfs.write('/a.bin', new Uint8Array([1, 2]).subarray(1)); await ctx.vfs.write('/b.bin', new Uint8Array([3, 4]).buffer); return [...(await ctx.vfs.read('/a.bin', { encoding: 'bytes' })), ...(await ctx.vfs.read('/b.bin', { encoding: 'bytes' }))];",
      ),
      ...tool('wordy', "throw new Error('x'.repeat(8400));"),
    });
    own = await openEngine(project);
  });
  afterAll(async () => {
    await own.close();
    project.remove();
  });

  it('ctx.vfs.write takes a Uint8Array (its view, not its whole buffer) or an ArrayBuffer, and refuses other typed arrays', async () => {
    expect(dataOf(await own.call('bytes', {}))).toEqual([2, 3, 4]);
    const error = errorOf(await own.call('wide', {}));
    expect(error).toMatchObject({ code: 'TOOL_ERROR', details: { vfs_code: 'INVALID_INPUT' } });
    expect(error.message).toContain('content is a Uint16Array: pass a string, a Uint8Array or an ArrayBuffer');
    expect(own.vfs.exists('/w.bin')).toBe(false);
  });

  it('an error message is cut to 4096 characters, saying how many were cut', async () => {
    const error = errorOf(await own.call('wordy', {}));
    expect(error.code).toBe('TOOL_ERROR');
    const [kept, cut] = error.message.split('… (');
    expect(kept).toBe(`Error: ${'x'.repeat(4089)}`);
    expect(cut).toMatch(/^\d+ more characters cut\)$/);
  });
});
