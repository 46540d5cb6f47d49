import { afterEach, describe, expect, it } from 'vitest';
import type { ApprovalRequestedEvent, Engine, EngineOptions, ErrResult, ToolResult } from '../src/index.js';
import {
  deferred,
  definition,
  type FakeBehaviour,
  FakeRunner,
  nextEvent,
  openEngine,
  recordEvents,
  type TempProject,
  TRIVIAL_JS,
  tempProject,
} from './support/project.js';

// code.run programs run in the real JS sandbox (the code runner's own); the project's tools below run
// on a FakeRunner in place of the JS runner, so that a test can hold one while it acts from outside.

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

const ALL = ['vfs.read', 'vfs.write', 'exec.js', 'sys.exec'];

async function open(
  behaviours: Record<string, FakeBehaviour> = {},
  options: EngineOptions & { permissions?: Record<string, string[]> } = {},
): Promise<{ engine: Engine; fake: FakeRunner }> {
  const files: Record<string, string> = { 'tool.js': TRIVIAL_JS };
  for (const id of Object.keys(behaviours)) files[`${id}.json`] = definition({ id, permissions: options.permissions?.[id] ?? ['exec.js'] });
  project = tempProject(files);
  const fake = new FakeRunner(behaviours);
  const { permissions: _, ...rest } = options;
  engine = await openEngine(project, { runners: [fake], grants: ALL, ...rest });
  return { engine, fake };
}

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 300)}`);
  return result.error;
}

function data(result: ToolResult): unknown {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data;
}

async function fileOf(e: Engine, path: string): Promise<string | null> {
  const read = await e.call('fs.read', { path });
  return read.ok ? (read.data as { content: string }).content : null;
}

describe('a program', () => {
  it('calls tools by their JS names, in TypeScript, and gets each output', async () => {
    const { engine: e } = await open({ 'demo.word-freq': (ctx) => ({ words: String((ctx.input as { text: string }).text).split(' ').length }) });
    const code = `
      interface Read { content: string }
      await tools.fs.write({ path: '/in.txt', content: 'a b c' });
      const read: Read = await tools.fs.read({ path: '/in.txt' });
      const freq = await tools.demo.wordFreq({ text: read.content });
      return { text: read.content, words: freq.words };`;
    const result = await e.call('code.run', { code });
    expect(data(result)).toEqual({ text: 'a b c', words: 3 });
    expect(result.meta).toMatchObject({ runner: 'code', calls: 3 });
    expect(await fileOf(e, '/in.txt')).toBe('a b c');
  });

  it('gets a failed call as an Error with the code, stage and message, which it may catch', async () => {
    const { engine: e } = await open();
    const code = `
      try { await tools.fs.read({ path: '/missing.txt' }); }
      catch (error) { return { name: error.name, code: error.code, stage: error.stage, retryable: error.retryable, message: error.message }; }`;
    expect(data(await e.call('code.run', { code }))).toEqual({
      name: 'ToolError',
      code: 'NOT_FOUND',
      stage: 'execution',
      retryable: false,
      message: expect.stringContaining('/missing.txt'),
    });
  });

  it('fails as its own error (TOOL_ERROR) when it lets a failed call escape', async () => {
    const { engine: e } = await open();
    const error = failed(await e.call('code.run', { code: `return await tools.fs.read({ path: '/missing.txt' });` }));
    expect(error).toMatchObject({ code: 'TOOL_ERROR', message: expect.stringMatching(/^ToolError: .*\/missing\.txt/) });
    expect(error.stack).toContain('program.ts:1');
  });

  it('is told which tools are close to an unknown one, by their JS names', async () => {
    const { engine: e } = await open({ 'demo.word-freq': () => ({}) });
    const code = `try { await tools.demo.wordFrq({ text: 'x' }); } catch (error) { return [error.code, error.message]; }`;
    const [code_, message] = data(await e.call('code.run', { code })) as [string, string];
    expect(code_).toBe('UNKNOWN_TOOL');
    expect(message).toContain('tools.demo.wordFrq names no tool');
    expect(message).toContain('Did you mean tools.demo.wordFreq (demo.word-freq)?');
    const bad = `try { await tools.fs.Read({}); } catch (error) { return [error.code, error.message]; }`;
    expect(data(await e.call('code.run', { code: bad }))).toEqual(['UNKNOWN_TOOL', expect.stringContaining('Did you mean tools.fs.read')]);
  });

  it('cannot run code.run from inside a program', async () => {
    const { engine: e } = await open();
    const code = `try { await tools.code.run({ code: 'return 1' }); return 'ran'; } catch (error) { return [error.code, error.message]; }`;
    expect(data(await e.call('code.run', { code }))).toEqual(['DENIED', expect.stringContaining('cannot run another program')]);
  });

  it('reports a syntax error and an import as TOOL_ERROR, naming the program', async () => {
    const { engine: e } = await open();
    expect(failed(await e.call('code.run', { code: 'return (' }))).toMatchObject({
      code: 'TOOL_ERROR',
      message: expect.stringContaining('program.ts'),
    });
    const imported = failed(await e.call('code.run', { code: "const fs = await import('node:fs'); return 1;" }));
    expect(imported.code).toBe('TOOL_ERROR');
  });
});

describe('grants', () => {
  it('are the caller’s: a program cannot write where its caller may not', async () => {
    const { engine: e } = await open();
    const grants = ['exec.js', 'vfs.read', 'vfs.write:/pub/**'];
    const code = `
      await tools.fs.write({ path: '/pub/ok.txt', content: 'ok' });
      try { await tools.fs.write({ path: '/secret.txt', content: 'x' }); return 'written'; }
      catch (error) { return error.code; }`;
    expect(data(await e.call('code.run', { code }, { grants }))).toBe('DENIED');
    expect(await fileOf(e, '/pub/ok.txt')).toBe('ok');
    expect(await fileOf(e, '/secret.txt')).toBeNull();
  });

  it('are the caller’s: a tool whose permissions the caller lacks is denied, and is not callable', async () => {
    const { engine: e } = await open({ 'ops.run': () => 'ran' }, { permissions: { 'ops.run': ['exec.js', 'sys.exec'] } });
    const events = recordEvents(e);
    const code = `try { return await tools.ops.run({}); } catch (error) { return error.code; }`;
    expect(data(await e.call('code.run', { code }, { grants: ['exec.js', 'vfs.read'] }))).toBe('DENIED');
    expect(events).toContainEqual(expect.objectContaining({ type: 'SecurityEvent', tool: 'ops.run', permission: 'sys.exec' }));
    expect(data(await e.call('code.run', { code }))).toBe('ran');
  });

  it('are the caller’s for secrets too: a program cannot pass a secret its caller may not read', async () => {
    const seen: unknown[] = [];
    const { engine: e } = await open(
      { 'use.token': (ctx) => seen.push((ctx.input as { token: unknown }).token) },
      {
        permissions: { 'use.token': ['exec.js', 'secret.read'] },
        secrets: { github: 'ghp_0123456789abcdef', other: 'other-value' },
        grants: [...ALL, 'secret.read'],
      },
    );
    const code = `try { await tools.use.token({ token: { $secret: 'github' } }); return 'passed'; } catch (error) { return error.code; }`;
    expect(data(await e.call('code.run', { code }, { grants: ['exec.js', 'secret.read:other'] }))).toBe('DENIED');
    expect(seen).toEqual([]);
    expect(data(await e.call('code.run', { code }, { grants: ['exec.js', 'secret.read:github'] }))).toBe('passed');
    expect(seen).toEqual(['ghp_0123456789abcdef']);
  });

  it('need exec.js for code.run itself', async () => {
    const { engine: e } = await open();
    expect(failed(await e.call('code.run', { code: 'return 1' }, { grants: ['vfs.read'] })).code).toBe('DENIED');
  });
});

describe('approvals', () => {
  it('hold a call of a program that is not atomic until a person answers', async () => {
    const { engine: e } = await open({}, { approvals: { rules: [{ tool: 'fs.delete' }], timeout_ms: 60_000 } });
    await e.call('fs.write', { path: '/a.txt', content: 'a' });
    const asked = nextEvent(e, 'approval', (ev) => ev.type === 'ApprovalRequested') as Promise<ApprovalRequestedEvent>;
    const running = e.call('code.run', { code: `await tools.fs.delete({ path: '/a.txt' }); return 'deleted';` });
    const request = await asked;
    expect(request).toMatchObject({ tool: 'fs.delete', caller: 'code.run' });
    expect(await fileOf(e, '/a.txt')).toBe('a');
    e.approve(request.run_id, { by: 'bob' });
    const result = await running;
    expect(data(result)).toBe('deleted');
    expect(await fileOf(e, '/a.txt')).toBeNull();
  });

  it('refuse a call of an atomic program that a rule matches, and nothing it wrote lands', async () => {
    const { engine: e } = await open({}, { approvals: { rules: [{ tool: 'fs.delete' }], timeout_ms: 60_000 } });
    await e.call('fs.write', { path: '/a.txt', content: 'a' });
    const code = `
      await tools.fs.write({ path: '/b.txt', content: 'b' });
      try { await tools.fs.delete({ path: '/a.txt' }); } catch (error) { throw new Error(error.code + ': ' + error.message); }`;
    const error = failed(await e.call('code.run', { code, atomic: true }));
    expect(error.message).toContain('APPROVAL_DENIED');
    expect(error.message).toContain('atomic code.run program cannot wait');
    expect(e.approvals()).toEqual([]);
    expect(await fileOf(e, '/a.txt')).toBe('a');
    expect(await fileOf(e, '/b.txt')).toBeNull();
  });
});

describe('atomic programs', () => {
  const WRITES = `await tools.fs.write({ path: '/a.txt', content: 'a' }); await tools.fs.write({ path: '/b.txt', content: 'b' });`;

  it('commit every write together when they succeed', async () => {
    const { engine: e } = await open();
    expect(data(await e.call('code.run', { code: `${WRITES} return (await tools.fs.read({ path: '/a.txt' })).content;`, atomic: true }))).toBe('a');
    expect([await fileOf(e, '/a.txt'), await fileOf(e, '/b.txt')]).toEqual(['a', 'b']);
  });

  it('leave nothing behind when an inner call fails after writes', async () => {
    const { engine: e } = await open();
    const result = await e.call('code.run', { code: `${WRITES} await tools.fs.read({ path: '/missing.txt' });`, atomic: true });
    expect(failed(result).code).toBe('TOOL_ERROR');
    expect([await fileOf(e, '/a.txt'), await fileOf(e, '/b.txt')]).toEqual([null, null]);
  });

  it('leave nothing behind when the program throws', async () => {
    const { engine: e } = await open();
    const result = await e.call('code.run', { code: `${WRITES} throw new Error('changed my mind');`, atomic: true });
    expect(failed(result)).toMatchObject({ code: 'TOOL_ERROR', message: 'Error: changed my mind' });
    expect([await fileOf(e, '/a.txt'), await fileOf(e, '/b.txt')]).toEqual([null, null]);
  });

  it('are not what a program without atomic is: each of its calls commits on its own', async () => {
    const { engine: e } = await open();
    expect(failed(await e.call('code.run', { code: `${WRITES} throw new Error('late');` })).code).toBe('TOOL_ERROR');
    expect([await fileOf(e, '/a.txt'), await fileOf(e, '/b.txt')]).toEqual(['a', 'b']);
  });

  const COUNTER = (between: string) => `
    const before = Number((await tools.fs.read({ path: '/counter' })).content);
    await ${between}({});
    await tools.fs.write({ path: '/counter', content: String(before + 1) });
    return before + 1;`;

  it('run again on a CONFLICT, and the result is as if alone', async () => {
    const gate = deferred();
    const held = deferred();
    const { engine: e, fake } = await open({
      'test.hold': async () => {
        held.resolve();
        await gate.promise;
        return {};
      },
    });
    await e.call('fs.write', { path: '/counter', content: '1' });
    const running = e.call('code.run', { code: COUNTER('tools.test.hold'), atomic: true });
    await held.promise;
    // Another caller changes what the program read, before it commits.
    expect((await e.call('fs.write', { path: '/counter', content: '100' })).ok).toBe(true);
    gate.resolve();
    const result = await running;
    expect(data(result)).toBe(101);
    expect(result.meta.attempts).toBe(2);
    expect(fake.started.filter((id) => id === 'test.hold')).toHaveLength(2);
    expect(await fileOf(e, '/counter')).toBe('101');
  });

  it('never run again once an inner call may have acted outside the VFS', async () => {
    const gate = deferred();
    const held = deferred();
    const { engine: e, fake } = await open(
      {
        'ops.effect': async () => {
          held.resolve();
          await gate.promise;
          return {};
        },
      },
      { permissions: { 'ops.effect': ['exec.js', 'sys.exec'] } },
    );
    await e.call('fs.write', { path: '/counter', content: '1' });
    const running = e.call('code.run', { code: COUNTER('tools.ops.effect'), atomic: true });
    await held.promise;
    expect((await e.call('fs.write', { path: '/counter', content: '100' })).ok).toBe(true);
    gate.resolve();
    const result = await running;
    expect(failed(result).code).toBe('CONFLICT');
    expect(fake.started.filter((id) => id === 'ops.effect')).toHaveLength(1);
    expect(await fileOf(e, '/counter')).toBe('100');
  });
});

describe('events', () => {
  it('name the program’s run as the parent of each inner call, in the caller’s trace', async () => {
    const { engine: e } = await open();
    const events = recordEvents(e);
    const code = `await tools.fs.write({ path: '/x.txt', content: 'x' }); try { await tools.fs.read({ path: '/nope' }); } catch {} return 1;`;
    const result = await e.call('code.run', { code }, { trace_id: 'agent-step-7' });
    const outer = result.meta.run_id;
    const inner = events.filter((ev) => 'parent_run_id' in ev && ev.parent_run_id === outer);
    expect(inner.map((ev) => [ev.type, 'tool' in ev ? ev.tool : null])).toEqual([
      ['ToolInvocationEvent', 'fs.write'],
      ['ToolResultEvent', 'fs.write'],
      ['ToolInvocationEvent', 'fs.read'],
      ['ToolErrorEvent', 'fs.read'],
    ]);
    for (const ev of inner) expect(ev).toMatchObject({ trace_id: 'agent-step-7' });
    const runIds = new Set(inner.map((ev) => (ev as { run_id: string }).run_id));
    expect(runIds.size).toBe(2);
    expect(runIds.has(outer)).toBe(false);
    expect(events).toContainEqual(expect.objectContaining({ type: 'ToolResultEvent', tool: 'code.run', run_id: outer, trace_id: 'agent-step-7' }));
  });
});

describe('bounds', () => {
  it('run at most max_concurrent calls of a program at once, the rest in turn', async () => {
    let running = 0;
    let most = 0;
    const { engine: e } = await open({
      'test.slow': async () => {
        running++;
        most = Math.max(most, running);
        await new Promise((resolve) => setTimeout(resolve, 5));
        running--;
        return {};
      },
    });
    const code = `const all = []; for (let i = 0; i < 40; i++) all.push(tools.test.slow({})); await Promise.all(all); return all.length;`;
    expect(data(await e.call('code.run', { code }))).toBe(40);
    expect(most).toBe(8);
  });

  it('end a program past max_calls, however it catches errors', async () => {
    const { engine: e } = await open();
    const code = `
      let n = 0;
      for (;;) { try { await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map(() => tools.fs.list({ path: '/' }))); n += 8; } catch { n = -1; } }`;
    const result = await e.call('code.run', { code });
    expect(failed(result)).toMatchObject({ code: 'TOOL_ERROR', details: { limit: 'max_calls', max: 1000 } });
    expect(result.meta.calls).toBe(1000);
    // The engine goes on serving.
    expect(data(await e.call('code.run', { code: 'return (await tools.fs.list({ path: "/" })).entries.length;' }))).toBe(0);
  });
});

describe('concurrent programs', () => {
  it('run their calls under their own slots: programs that fill the engine’s slots do not wait on each other', async () => {
    // A barrier both programs' calls must reach together: each program holds one of the two slots.
    let arrived = 0;
    const met = deferred();
    const { engine: e } = await open(
      {
        'test.meet': async () => {
          if (++arrived === 2) met.resolve();
          await met.promise;
          return { arrived };
        },
      },
      { policy: { concurrency: 2, tool_concurrency: 2, queue_length: 8 } },
    );
    const code = `await tools.fs.write({ path: '/p' + Math.random() + '.txt', content: 'x' }); return (await tools.test.meet({})).arrived;`;
    const results = await Promise.all([1, 2].map(() => e.call('code.run', { code }, { timeout_ms: 10_000 })));
    expect(results.map(data)).toEqual([2, 2]);
  });

  it('of several callers each keep their own grants, trace and writes', async () => {
    const { engine: e } = await open();
    const callers = Array.from({ length: 6 }, (_, i) => i);
    const results = await Promise.all(
      callers.map((i) =>
        e.call(
          'code.run',
          {
            code: `
              await tools.fs.write({ path: '/c${i}/own.txt', content: '${i}' });
              let other = 'written';
              try { await tools.fs.write({ path: '/c${(i + 1) % 6}/stolen.txt', content: 'x' }); } catch (error) { other = error.code; }
              return [(await tools.fs.read({ path: '/c${i}/own.txt' })).content, other];`,
            atomic: i % 2 === 0,
          },
          { grants: ['exec.js', 'vfs.read', `vfs.write:/c${i}/**`], trace_id: `caller-${i}`, caller: `agent-${i}` },
        ),
      ),
    );
    for (const [i, result] of results.entries()) {
      expect(data(result)).toEqual([String(i), 'DENIED']);
      expect(result.meta.trace_id).toBe(`caller-${i}`);
      expect(await fileOf(e, `/c${i}/own.txt`)).toBe(String(i));
      expect(await fileOf(e, `/c${i}/stolen.txt`)).toBeNull();
    }
  });
});
