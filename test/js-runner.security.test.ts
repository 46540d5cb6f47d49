import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JsRunner } from '../runners/js/index.js';
import type { Engine, SecurityEvent } from '../src/index.js';
import { dataOf, errorOf, jsEngine } from './support/js-engine.js';

// Containment of the JS runner: each test runs a real attack from fixtures/js/hostile (or a
// well-behaved tool used against its permissions) through the whole engine.

let hostile: Engine;
let project: Engine;
const security: SecurityEvent[] = [];

beforeAll(async () => {
  [hostile, project] = await Promise.all([jsEngine('hostile'), jsEngine('project')]);
  hostile.events.on('security', (event) => security.push(event));
  project.events.on('security', (event) => security.push(event));
});

afterAll(async () => {
  await Promise.all([hostile.close(), project.close()]);
});

/** Runs a call and returns its result with the SecurityEvents it caused. */
async function withEvents(engine: Engine, id: string, input: unknown, grants?: string[]) {
  const before = security.length;
  const result = await engine.call(id, input, grants ? { grants } : {});
  return { result, events: security.slice(before).filter((e) => e.run_id === result.meta.run_id) };
}

describe('no way out of the isolate', () => {
  it.each([
    'globals',
    'function-constructor',
    'ctx-chain',
    'prepare-stack-trace',
    'promise-species',
    'thrown-host-errors',
    'ivm-handles',
    'dynamic-import',
    'import-meta',
    'wasm-constructors',
    'own-stack',
  ])('%s: finds nothing of the host', async (attack) => {
    const data = dataOf<{ findings: string[] }>(await hostile.call('escape', { attack }));
    expect(data.findings).toEqual([]);
  });

  it('really looked: every dynamic import was refused, and the stack trace API saw the frames', async () => {
    const imports = dataOf<{ outcomes: string[] }>(await hostile.call('escape', { attack: 'dynamic-import' }));
    expect(imports.outcomes).toHaveLength(6);
    const traces = dataOf<{ sites: number }>(await hostile.call('escape', { attack: 'prepare-stack-trace' }));
    expect(traces.sites).toBeGreaterThan(10);
    const walk = dataOf<{ visited: number }>(await hostile.call('escape', { attack: 'ivm-handles' }));
    expect(walk.visited).toBeGreaterThan(300);
  });

  it('runs the sandbox process with an empty environment and, where Node has it, the permission model', async () => {
    const runner = new JsRunner();
    try {
      const status = await runner.status();
      expect(status.available).toBe(true);
      const probe = await runner.probe();
      expect(probe).toMatchObject({ env_keys: 0 });
      if (status.permission_model) expect(probe).toMatchObject({ read_outside: 'denied', child_process: 'denied' });
    } finally {
      await runner.close();
    }
  });
});

describe('imports that try to leave the tools folder', () => {
  it.each([
    ['mod.node-import', 'import node:fs', 'imports "node:fs": tools can import only their own files'],
    ['mod.outside', 'import ../../../outside.js', 'which is outside the tools folder'],
  ])('%s fails with TOOL_ERROR and is one SecurityEvent (intrusion)', async (id, operation, message) => {
    const { result, events } = await withEvents(project, id, {});
    expect(errorOf(result)).toMatchObject({ code: 'TOOL_ERROR', details: { phase: 'load', intrusion: operation } });
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ type: 'SecurityEvent', action: 'intrusion', permission: null, operation, tool: id });
    expect(events[0]?.reason).toContain(message);
  });

  it('a tool whose imports stay inside raises no SecurityEvent', async () => {
    const { result, events } = await withEvents(project, 'greet', { name: 'Ada' });
    expect(result.ok).toBe(true);
    expect(events).toEqual([]);
  });
});

describe('VFS permissions', () => {
  it('refuses an undeclared write with DENIED at the permission stage and one SecurityEvent', async () => {
    const { result, events } = await withEvents(hostile, 'deny', { path: '/stolen.txt' });
    expect(errorOf(result)).toMatchObject({ stage: 'permission', code: 'DENIED', details: { permission: 'vfs.write', path: '/stolen.txt' } });
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ action: 'denied', permission: 'vfs.write', operation: 'write /stolen.txt', tool: 'deny' });
    expect(hostile.vfs.exists('/stolen.txt')).toBe(false);
  });

  it('ends the call on a denial even when the tool catches it', async () => {
    const { result, events } = await withEvents(hostile, 'deny', { swallow: true });
    expect(errorOf(result)).toMatchObject({ stage: 'permission', code: 'DENIED' });
    expect(events).toHaveLength(1);
    const caught = await withEvents(project, 'writer', { path: '/x.txt', catch: true }, ['exec.js', 'vfs.write:/out/**']);
    expect(errorOf(caught.result)).toMatchObject({ stage: 'permission', code: 'DENIED' });
  });

  it('honours a scoped grant per path', async () => {
    const grants = ['exec.js', 'vfs.write:/out/**'];
    dataOf(await project.call('writer', { path: '/out/ok.txt' }, { grants }));
    expect(project.vfs.read('/out/ok.txt').toString()).toBe('x');
    const { result, events } = await withEvents(project, 'writer', { path: '/etc/x.txt' }, grants);
    expect(errorOf(result)).toMatchObject({ stage: 'permission', code: 'DENIED' });
    expect(errorOf(result).message).toContain('the caller was not granted it for this path');
    expect(events).toHaveLength(1);
  });

  it('honours a scope the tool declared', async () => {
    dataOf(await project.call('scoped-writer', { path: '/out/declared.txt' }));
    const { result, events } = await withEvents(project, 'scoped-writer', { path: '/elsewhere.txt' });
    expect(errorOf(result).message).toContain('the tool did not declare it for this path');
    expect(events).toHaveLength(1);
  });

  it.each([
    ['../etc/passwd', 'climbs above the VFS root'],
    ['/../../etc/passwd', 'climbs above the VFS root'],
    ['/docs/../../../etc/shadow', 'climbs above the VFS root'],
    ['%2e%2e/etc/passwd', 'encoded dot segment'],
    ['/a/%2E%2e/%2e%2E/x', 'encoded dot segment'],
    ['C:\\Windows\\win.ini', 'host path syntax'],
    ['\\\\server\\share\\x', 'host path syntax'],
    ['file:///etc/passwd', 'host path syntax'],
    ['/tmp/a\u0000b', 'NUL byte'],
  ])('a traversal through %j is INVALID_PATH with an intrusion SecurityEvent', async (path, reason) => {
    for (const op of ['read', 'write']) {
      const { result, events } = await withEvents(hostile, 'traversal', { paths: [path], op });
      const error = errorOf(result);
      expect(error).toMatchObject({ code: 'INVALID_PATH', details: { escape: true } });
      expect(error.message).toContain(reason);
      expect(events).toHaveLength(1);
      expect(events[0]?.action).toBe('intrusion');
    }
  });

  it('keeps absolute paths inside the VFS: the host file system is never reached', async () => {
    const canary = `/etc/arium-canary-${process.pid}-${Date.now()}`;
    const out = dataOf<Array<Record<string, unknown>>>(await hostile.call('traversal', { paths: ['/etc/passwd', '/proc/self/environ'] }));
    expect(out).toEqual([
      { path: '/etc/passwd', ok: false, code: 'NOT_FOUND' },
      { path: '/proc/self/environ', ok: false, code: 'NOT_FOUND' },
    ]);
    dataOf(await hostile.call('traversal', { paths: [canary], op: 'write' }));
    expect(hostile.vfs.exists(canary)).toBe(true);
    expect(existsSync(canary)).toBe(false);
  });
});

describe('nothing outlives a call', () => {
  it('work a tool leaves running after it returns never reaches the VFS', async () => {
    dataOf(await project.call('state', { leave: 'late-write' }));
    // Give leftover work every chance to run: more calls on the same isolates, and time.
    for (let i = 0; i < 5; i++) dataOf(await project.call('reverse', { text: String(i) }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(project.vfs.exists('/late-microtask.txt')).toBe(false);
    expect(project.vfs.exists('/late-after-host-call.txt')).toBe(false);
  });
});
