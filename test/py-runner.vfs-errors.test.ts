import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine, ErrorInfo, ToolResult } from '../src/index.js';
import { definition, openEngine, type TempProject, tempProject } from './support/project.js';

/** A Python tool whose whole body is `body`, with VFS access. */
function tool(id: string, body: string): Record<string, string> {
  return {
    [`${id}.py`]: `def run(input, ctx):\n${body
      .split('\n')
      .map((line) => `    ${line}`)
      .join('\n')}\n`,
    [`${id}.json`]: definition({ id, runner: 'py-runner', entry: `${id}.py`, permissions: ['exec.py', 'vfs.read', 'vfs.write'] }),
  };
}

function errorOf(result: ToolResult): ErrorInfo {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)}`);
  return result.error;
}

let project: TempProject;
let engine: Engine;

beforeAll(async () => {
  project = tempProject({
    ...tool('over_quota', "ctx.vfs.write('/big.bin', b'\\0' * 2048)"),
    ...tool('missing', "return ctx.vfs.read('/nope.txt')"),
    ...tool(
      'rethrown',
      "try:\n    ctx.vfs.read('/nope.txt')\nexcept ctx.VfsError as e:\n    e.code = 'QUOTA_EXCEEDED'\n    e.details = {'forged': True}\n    raise",
    ),
    ...tool('forged', "raise ctx.VfsError('QUOTA_EXCEEDED', 'made up', {'limit': 'max_bytes'})"),
    ...tool('forged_seq', "e = ctx.VfsError('QUOTA_EXCEEDED', 'made up')\ne._arium_seq = 1\nraise e"),
    ...tool(
      'caught',
      "for i in range(200):\n    try:\n        ctx.vfs.read('/nope-%d.txt' % i)\n    except ctx.VfsError:\n        pass\nctx.vfs.write('/big.bin', b'\\0' * 2048)",
    ),
  });
  engine = await openEngine(project, { vfsQuota: { max_bytes: 1024 } });
});

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

describe('a ctx.vfs failure a Python tool does not catch', () => {
  it('ends the call with its own code, details and message, and the tool’s traceback', async () => {
    const quota = errorOf(await engine.call('over_quota', {}));
    expect(quota).toMatchObject({ code: 'QUOTA_EXCEEDED', stage: 'execution', details: { path: '/big.bin', limit: 'max_bytes', max: 1024 } });
    expect(quota.message).toMatch(/^Write would bring the VFS to 2048 bytes, over its quota of 1024/);
    expect(quota.stack).toContain('over_quota.py');
    expect(errorOf(await engine.call('missing', {}))).toMatchObject({ code: 'NOT_FOUND', details: { path: '/nope.txt' } });
    expect(await engine.vfs.exists('/big.bin')).toBe(false);
  });

  it('keeps the engine’s code even when the tool changed the error before raising it again', async () => {
    const error = errorOf(await engine.call('rethrown', {}));
    expect(error).toMatchObject({ code: 'NOT_FOUND', details: { path: '/nope.txt' } });
    expect(error.details).not.toHaveProperty('forged');
  });

  it('an error the tool made itself is its own: TOOL_ERROR, even claiming a request number', async () => {
    for (const id of ['forged', 'forged_seq']) {
      const error = errorOf(await engine.call(id, {}));
      expect(error).toMatchObject({ code: 'TOOL_ERROR', message: 'VfsError: made up', details: { name: 'VfsError', vfs_code: 'QUOTA_EXCEEDED' } });
    }
  });

  it('is recognised after the tool caught many others', async () => {
    expect(errorOf(await engine.call('caught', {}))).toMatchObject({ code: 'QUOTA_EXCEEDED', details: { path: '/big.bin' } });
  });

  it('keeps each concurrent call’s own failure', async () => {
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => engine.call(i % 2 ? 'missing' : 'over_quota', {})));
    expect(results.map((r) => errorOf(r).code)).toEqual(Array.from({ length: 12 }, (_, i) => (i % 2 ? 'NOT_FOUND' : 'QUOTA_EXCEEDED')));
  });
});
