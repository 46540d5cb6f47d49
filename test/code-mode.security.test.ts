import { afterEach, describe, expect, it } from 'vitest';
import type { Engine, ErrResult, ToolResult } from '../src/index.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';

// Hostile programs against the real engine and the real JS sandbox.

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

async function open(): Promise<Engine> {
  project = tempProject({});
  engine = await openEngine(project);
  return engine;
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 300)}`);
  return result.error;
}

function data(result: ToolResult): unknown {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data;
}

describe('a hostile program', () => {
  it('that never ends is stopped at its timeout, and the engine serves other calls meanwhile', async () => {
    const e = await open();
    const looping = e.call('code.run', { code: 'for (;;) {}' }, { timeout_ms: 1500 });
    // While it loops: a builtin, and another program, both answer.
    expect((await e.call('fs.write', { path: '/a.txt', content: 'a' })).ok).toBe(true);
    expect(data(await e.call('code.run', { code: `return (await tools.fs.read({ path: '/a.txt' })).content;` }))).toBe('a');
    expect(failed(await looping)).toMatchObject({ code: 'TIMEOUT' });
  });

  it('that loops between tool calls is stopped too, and none of its atomic writes land', async () => {
    const e = await open();
    const code = `await tools.fs.write({ path: '/half.txt', content: 'x' }); for (;;) {}`;
    expect(failed(await e.call('code.run', { code, atomic: true }, { timeout_ms: 1500 })).code).toBe('TIMEOUT');
    expect((await e.call('fs.read', { path: '/half.txt' })).ok).toBe(false);
  });

  it('that allocates without bound fails MEMORY_LIMIT', async () => {
    const e = await open();
    const code = `const keep = []; for (;;) keep.push(new Array(1e6).fill(keep.length));`;
    expect(failed(await e.call('code.run', { code }))).toMatchObject({ code: 'MEMORY_LIMIT' });
    expect(data(await e.call('code.run', { code: 'return 1 + 1;' }))).toBe(2);
  });

  it('finds no host object through tools or the global scope', async () => {
    const e = await open();
    const code = `
      const found = {};
      found.process = typeof process;
      found.require = typeof require;
      found.ctx = typeof ctx;
      found.args = arguments.length;
      try { found.viaConstructor = tools.constructor === undefined ? 'none' : typeof tools.constructor('return this')(); } catch (error) { found.viaConstructor = 'threw ' + error.name; }
      try { found.fnProcess = typeof Function('return typeof process')(); } catch (error) { found.fnProcess = 'threw'; }
      found.proto = Object.getPrototypeOf(tools) === Function.prototype;
      found.thenable = typeof tools.then;
      return found;`;
    expect(data(await e.call('code.run', { code }))).toEqual({
      process: 'undefined',
      require: 'undefined',
      ctx: 'undefined',
      args: 1,
      viaConstructor: expect.stringMatching(/^(object|threw|none)/),
      fnProcess: 'string',
      proto: true,
      thenable: 'undefined',
    });
  });

  it('cannot change tools, and its prototype pollution reaches neither tools nor the engine', async () => {
    const e = await open();
    const code = `
      const tried = [];
      for (const attempt of [
        () => { tools.fs = { read: async () => 'forged' }; },
        () => { tools.fs.read = async () => 'forged'; },
        () => Object.defineProperty(tools, 'fs', { value: 1 }),
        () => Object.setPrototypeOf(tools, { evil: true }),
        () => { delete tools.fs; },
        () => new tools.fs.read({ path: '/' }),
      ]) { try { attempt(); tried.push('changed'); } catch (error) { tried.push(error.name); } }
      // Traps planted on Object.prototype: a handler that inherited from it would pick them up.
      Object.prototype.get = () => async () => 'forged';
      Object.prototype.apply = () => 'forged';
      Object.prototype.has = () => true;
      Array.prototype[Symbol.iterator] = function* () { yield 'forged'; };
      JSON.stringify = () => '{"path":"/forged"}';
      await tools.fs.write({ path: '/real.txt', content: 'real' });
      const read = await tools.fs.read({ path: '/real.txt' });
      let polluted = 'refused';
      try { await tools.fs.write(JSON.parse('{"path":"/p.txt","content":"x","__proto__":{"polluted":true}}')); polluted = 'accepted'; } catch (error) { polluted = error.code; }
      let viaPath = 'refused';
      try { await tools['__proto__'].polluted({}); viaPath = 'called'; } catch (error) { viaPath = error.code; }
      return { tried, read: read.content, polluted, viaPath };`;
    expect(data(await e.call('code.run', { code }))).toEqual({
      tried: ['TypeError', 'TypeError', 'TypeError', 'TypeError', 'TypeError', 'TypeError'],
      read: 'real',
      polluted: 'INVALID_INPUT',
      viaPath: 'UNKNOWN_TOOL',
    });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((await e.call('fs.read', { path: '/p.txt' })).ok).toBe(false);
  });

  it('that floods the engine with calls at once gets BUSY past the calls the sandbox holds pending', async () => {
    const e = await open();
    const code = `const all = []; for (let i = 0; i < 600; i++) all.push(tools.fs.list({ path: '/' }).then(() => 'ok', (error) => error.code)); return await Promise.all(all);`;
    const codes = data(await e.call('code.run', { code })) as string[];
    expect(codes.filter((c) => c === 'ok').length).toBe(256);
    expect(codes.filter((c) => c === 'BUSY').length).toBe(600 - 256);
  });

  it('that floods the engine with calls in waves is ended at max_calls', async () => {
    const e = await open();
    const code = `for (let wave = 0; wave < 50; wave++) { const all = []; for (let i = 0; i < 100; i++) all.push(tools.fs.list({ path: '/' }).catch((error) => error.code)); await Promise.all(all); } return 'done';`;
    const result = await e.call('code.run', { code });
    expect(failed(result)).toMatchObject({ code: 'TOOL_ERROR', details: { limit: 'max_calls', max: 1000 } });
    expect(result.meta.calls).toBe(1000);
  });
});
