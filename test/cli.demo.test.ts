import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createEngine } from '../src/index.js';
import { type Json, parseJson, runCli, tempWorkspace } from './cli.helpers.js';

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
});
afterEach(() => ws.cleanup());

const cli = (args: string[], options?: Parameters<typeof runCli>[2]) => runCli(ws.root, args, options);
const P = ['--workspace', 'ws', '--project', 'p'];
const DEMO_TOOLS = fileURLToPath(new URL('../workspace/demo/tools/', import.meta.url));

describe('arium demo', () => {
  it('runs the scripted session on builtins alone and prints every event as it happens', async () => {
    const r = await cli(['demo', ...P]);
    expect(r.code).toBe(0);
    expect(r.out).toContain('+- [ ] ship it');
    expect(r.out).toMatch(/↳ [\d:.]+ security\s+fs\.write denied: needs vfs\.write/);
    expect(r.out).toContain('DENIED at permission');
    expect(r.out).toContain('/pth is not an allowed property');
    expect(r.out).toContain('INVALID_PATH at execution');
    expect(r.out).toContain('UNKNOWN_TOOL at validation');
    expect(r.out).toContain('note: the project defines no tools of its own');
    expect(r.out).toMatch(/Events: \d+ ToolInvocationEvent, \d+ ToolResultEvent, \d+ SecurityEvent, \d+ ToolErrorEvent/);
  });

  it('--json prints the whole session as one document, and a second run tells the same story', async () => {
    await cli(['demo', ...P]);
    const doc = parseJson(await cli(['demo', ...P, '--json']));
    expect(doc.project).toBe('p');
    const byTool = (id: string) => doc.steps.filter((s: Json) => s.tool === id);
    expect(byTool('fs.write')[0].result.data).toMatchObject({ created: true });
    expect(byTool('fs.write')[1].result.data.diff).toContain('+- [ ] ship it');
    expect(byTool('fs.write')[2]).toMatchObject({ grants: ['vfs.read'], result: { ok: false, error: { stage: 'permission', code: 'DENIED' } } });
    const violations = byTool('fs.read')[1].result.error.details.violations.map((v: Json) => v.pointer);
    expect(violations).toEqual(['/path', '/pth', '/encoding']);
    const diff = byTool('vfs.diff')[0].result.data;
    expect(diff.files.map((f: Json) => [f.path, f.status])).toEqual([['/notes/todo.md', 'added']]);
    const types = doc.events.map((e: Json) => e.type);
    expect(types.filter((t: string) => t === 'SecurityEvent')).toHaveLength(2);
    expect(types.filter((t: string) => t === 'ToolInvocationEvent')).toHaveLength(doc.steps.length);
    expect(doc.events.every((e: Json) => e.trace_id === doc.trace_id)).toBe(true);
  });

  it('keeps what a person left in /notes: saved in a snapshot before the reset, said, and restorable', async () => {
    const mine = '# my own notes, written from the inspector\n';
    await cli(['call', 'fs.write', JSON.stringify({ path: '/notes/mine.md', content: mine }), ...P]);
    const r = await cli(['demo', ...P]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/note: the demo starts from an empty \/notes: what \/notes held is saved in snapshot [0-9a-f]{12} "before-demo"/);
    const gone = parseJson(await cli(['call', 'fs.read', '{"path":"/notes/mine.md"}', ...P, '--json']));
    expect(gone).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
    expect((await cli(['restore', 'before-demo', ...P])).code).toBe(0);
    const back = parseJson(await cli(['call', 'fs.read', '{"path":"/notes/mine.md"}', ...P, '--json']));
    expect(back).toMatchObject({ ok: true, data: { content: mine } });
  });

  it('calls project tools with their first example, and notes a runner that is not available, an example-less tool and a bad file', async () => {
    const tools = join(ws.workspace, 'p', 'tools');
    copyFileSync(join(DEMO_TOOLS, 'demo-word-freq.json'), join(tools, 'demo-word-freq.json'));
    copyFileSync(join(DEMO_TOOLS, 'demo_word_freq.py'), join(tools, 'demo_word_freq.py'));
    writeFileSync(join(tools, 'bare.py'), 'def run(input, ctx):\n    return {}\n');
    writeFileSync(
      join(tools, 'bare.json'),
      JSON.stringify({
        id: 'bare',
        description: 'no examples',
        runner: 'py-runner',
        entry: 'bare.py',
        schema: { type: 'object' },
        permissions: ['exec.py'],
      }),
    );
    writeFileSync(join(tools, 'broken.json'), '{');
    const doc = parseJson(await cli(['demo', ...P, '--json']));
    const step = doc.steps.find((s: Json) => s.tool === 'demo.word-freq');
    expect(step.input).toEqual({ text: 'the engine runs the tool and the tool returns the result', top: 3 });
    // Whether Python tools run depends on the machine and on the py-runner; either outcome is reported.
    if (step.result.ok) expect(step.result.data.top[0]).toEqual({ word: 'the', count: 4 });
    else expect(doc.notes).toContainEqual(expect.stringMatching(/^the py-runner is not available here, so demo\.word-freq did not run: /));
    expect(doc.notes).toContainEqual(expect.stringContaining('bare (py-runner) has no "examples" in tools/bare.json'));
    expect(doc.notes).toContainEqual(expect.stringMatching(/^tools\/broken\.json did not load: /));
    expect(doc.steps.some((s: Json) => s.tool === 'bare')).toBe(false);
  });
});

describe('arium doctor', () => {
  it('reports the machine and the runners without throwing', async () => {
    const r = await cli(['doctor', ...P, '--json']);
    expect(r.code).toBe(0);
    const report = parseJson(r);
    expect(report.checks.map((c: Json) => c.name)).toEqual([
      'node',
      'project p',
      'js packages',
      'python env',
      'system.exec',
      'isolated-vm',
      'js pool',
      'python',
      'bubblewrap',
      'user namespaces',
      'landlock',
      'python pool',
      'wasm pool',
      'daemon',
    ]);
    expect(report.checks.find((c: Json) => c.name === 'wasm pool').detail).toMatch(/^up to \d+ sandbox process/);
    expect(report.checks.find((c: Json) => c.name === 'landlock').detail).toMatch(/^ABI \d+: each Python call|abstract Unix sockets/);
    expect(report.checks[0]).toMatchObject({ name: 'node', ok: true });
    expect(report.ok).toBe(report.checks.every((c: Json) => c.ok));
    for (const c of report.checks) if (!c.ok) expect(c.fix).toEqual(expect.any(String));
    expect(report.engine.runners.builtin.available).toBe(true);
    const human = await cli(['doctor', ...P]);
    expect(human.out).toMatch(/✓\s+node\s+v\d+/);
    expect(human.out).toContain('runners');
  });

  it('reports a missing project and a missing Python as failed checks with a fix', async () => {
    const missing = parseJson(await cli(['doctor', '--workspace', 'ws', '--project', 'nope', '--json']));
    expect(missing.checks[1]).toMatchObject({ name: 'project nope', ok: false, fix: expect.stringContaining('arium init nope') });
    expect(missing.engine).toBeNull();
    writeFileSync(join(ws.workspace, 'p', 'arium.json'), JSON.stringify({ python: '/no/such/python3' }));
    const checks = parseJson(await cli(['doctor', ...P, '--json'])).checks;
    const python = checks.find((c: Json) => c.name === 'python');
    expect(python).toMatchObject({ ok: false, detail: '/no/such/python3: not found on PATH', fix: expect.stringContaining('arium.json') });
    // The landlock check asks through the interpreter the python check found: without one it says so.
    const landlock = checks.find((c: Json) => c.name === 'landlock');
    expect(landlock).toMatchObject({ ok: false, detail: expect.stringContaining('not checked'), fix: 'fix the Python check first' });
  });
});

describe('arium events', () => {
  it('says how to turn the audit log on when it is off', async () => {
    const r = await cli(['events', ...P]);
    expect(r.code).toBe(3);
    expect(r.err).toContain('keeps no audit log');
    expect(r.err).toContain('"audit_log": true');
  });

  it('prints the latest events of the audit log, as JSONL with --json, and follows new ones', async () => {
    writeFileSync(join(ws.workspace, 'p', 'arium.json'), JSON.stringify({ audit_log: true }));
    await cli(['call', 'fs.write', '{"path":"/a","content":"a"}', ...P]);
    await cli(['call', 'fs.read', '{"path":"/nope"}', ...P]);
    const lines = (await cli(['events', ...P, '--json'])).out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.filter((e) => e.type !== 'RegistryChangeEvent').map((e) => [e.type, e.tool])).toEqual([
      ['ToolInvocationEvent', 'fs.write'],
      ['ToolResultEvent', 'fs.write'],
      ['ToolInvocationEvent', 'fs.read'],
      ['ToolErrorEvent', 'fs.read'],
    ]);
    expect((await cli(['events', ...P, '--limit', '1', '--no-color'])).out).toMatch(/^[\d:.]+ error\s+fs\.read NOT_FOUND at execution\n$/);

    const stop = new AbortController();
    const following = cli(['events', ...P, '--follow', '--limit', '0', '--json'], { interrupt: stop.signal });
    await new Promise((r) => setTimeout(r, 300));
    await cli(['call', 'fs.stat', '{"path":"/a"}', ...P]);
    await new Promise((r) => setTimeout(r, 600));
    stop.abort();
    const followed = await following;
    expect(followed.code).toBe(0);
    const tools = followed.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).tool);
    expect(tools).toContain('fs.stat');
    expect(tools).not.toContain('fs.write');
  });

  it('reads and follows the audit log across its rotations: every event once, in order', async () => {
    writeFileSync(join(ws.workspace, 'p', 'arium.json'), JSON.stringify({ audit_log: { max_bytes: 4096, files: 100 } }));
    const engine = await createEngine({
      workspace: ws.workspace,
      project: 'p',
      watch: false,
      persist: false,
      auditLog: { max_bytes: 4096, files: 100 },
    });
    try {
      const emitted: string[] = [];
      engine.events.on('event', (e) => {
        if (e.type !== 'RegistryChangeEvent') emitted.push(e.run_id as string);
      });
      for (let i = 0; i < 20; i++) await engine.call('fs.write', { path: `/before/${i}.txt`, content: 'x'.repeat(100) });
      const runIds = (out: string) =>
        out
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l))
          .filter((e) => e.type !== 'RegistryChangeEvent')
          .map((e) => e.run_id);
      // The log writes what it gathered once per turn of the event loop.
      await new Promise((r) => setImmediate(r));
      // The latest 30 reach back over a rotation into audit.jsonl.1 and before.
      expect(runIds((await cli(['events', ...P, '--json', '--limit', '30'])).out)).toEqual(emitted.slice(-30));

      const stop = new AbortController();
      const following = cli(['events', ...P, '--follow', '--limit', '0', '--json'], { interrupt: stop.signal });
      await new Promise((r) => setTimeout(r, 300));
      const mark = emitted.length;
      // Many rotations between two polls of the follower, then some more after a pause.
      await Promise.all(Array.from({ length: 40 }, (_, i) => engine.call('fs.write', { path: `/during/${i}.txt`, content: 'y'.repeat(i) })));
      await new Promise((r) => setTimeout(r, 400));
      for (let i = 0; i < 10; i++) await engine.call('fs.stat', { path: '/during/1.txt' });
      await new Promise((r) => setTimeout(r, 600));
      stop.abort();
      const followed = await following;
      expect(followed.code).toBe(0);
      expect(runIds(followed.out)).toEqual(emitted.slice(mark));
    } finally {
      await engine.close();
    }
  });
});
