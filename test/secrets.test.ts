/**
 * Secrets by reference: a caller names a secret in an input ({"$secret": NAME}); the tool sees its
 * value; nothing that leaves the engine carries it. Each leak path is tried for real, through the real
 * JS and Python runners: return it, print it, print it in two pieces, throw it, put it in an error
 * message, write it to a file and read or diff the file, encode it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine, EngineConfigError, type EngineEvent, type ToolResult } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';
import { definition, recordEvents, type TempProject, tempProject } from './support/project.js';

const VALUE = 'ghp_S3cretValue/with+odd=chars';
const OTHER = 'other-secret-value-42';

const LEAK_JS = `const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
function btoa(s) {
  let out = '';
  for (let i = 0; i < s.length; i += 3) {
    const n = (s.charCodeAt(i) << 16) | ((s.charCodeAt(i + 1) || 0) << 8) | (s.charCodeAt(i + 2) || 0);
    out += B64[(n >> 18) & 63] + B64[(n >> 12) & 63] + (i + 1 < s.length ? B64[(n >> 6) & 63] : '=') + (i + 2 < s.length ? B64[n & 63] : '=');
  }
  return out;
}
export default async function run(input, ctx) {
  const t = input.token;
  switch (input.mode) {
    case 'return': return { token: t, length: t.length, prefix: t.slice(0, 4) };
    case 'log': console.log('token=' + t); return {};
    case 'split': console.log(t.slice(0, 9)); console.log(t.slice(9)); return {};
    case 'throw': throw new Error('could not use ' + t);
    case 'long-throw': throw new Error('x'.repeat(input.pad) + t);
    case 'write': await ctx.vfs.write('/out/leak.txt', 'before\\n' + t + '\\nafter\\n'); return { written: true };
    case 'base64': return { b64: btoa(t), inside: btoa('xx' + t + 'yy') };
    case 'url': return { url: 'https://x.test/?q=' + encodeURIComponent(t) };
    case 'json': return { text: JSON.stringify({ t }) };
    case 'proto': return JSON.parse('{"__proto__": {"admin": true}, "token": ' + JSON.stringify(t) + '}');
  }
  return {};
}
`;

const LEAK_PY = `def run(input, ctx):
    t = input["token"]
    print("printed", t)
    if input.get("raise"):
        raise ValueError("bad token " + t)
    return {"token": t}
`;

let project: TempProject;
let engine: Engine;
let events: EngineEvent[];
const audit = () => readFileSync(join(project.dir, 'audit.jsonl'), 'utf8');

beforeAll(async () => {
  project = tempProject({
    'leak.js': LEAK_JS,
    'leak.json': definition({ id: 'leak.js', entry: 'leak.js', permissions: ['exec.js', 'vfs.write:/out/**', 'secret.read:github'] }),
    'pyleak.py': LEAK_PY,
    'pyleak.json': definition({ id: 'leak.py', runner: 'py-runner', entry: 'pyleak.py', permissions: ['exec.py', 'secret.read:github'] }),
    'plain.json': definition({ id: 'plain.js', entry: 'leak.js', permissions: ['exec.js'] }),
    'any.json': definition({ id: 'any.js', entry: 'leak.js', permissions: ['exec.js', 'secret.read'] }),
  });
  writeFileSync(join(project.dir, 'secret-file.txt'), `${OTHER}\n`);
  writeFileSync(
    join(project.dir, 'arium.json'),
    JSON.stringify({ secrets: { other: { file: 'secret-file.txt' }, missing: { env: 'ARIUM_TEST_UNSET_VAR' } } }),
  );
  engine = await createEngine({
    workspace: project.workspace,
    project: project.project,
    watch: false,
    persist: false,
    changeLog: {},
    auditLog: join(project.dir, 'audit.jsonl'),
    secrets: { github: VALUE, short: 'abc' },
    grants: [
      'vfs.read',
      'vfs.write',
      'exec.js',
      'exec.py',
      'secret.read:github',
      'secret.read:other',
      'secret.read:nope',
      'secret.read:missing',
      'secret.read:short',
    ],
  });
  events = recordEvents(engine);
}, 60_000);

afterAll(async () => {
  await engine?.close();
  project?.remove();
});

const ref = { $secret: 'github' };
const leakCall = (mode: string, extra: Record<string, unknown> = {}) => engine.call('leak.js', { token: ref, mode, ...extra });
const text = (value: unknown) => JSON.stringify(value);
const encodings = [VALUE, Buffer.from(VALUE).toString('base64'), encodeURIComponent(VALUE), Buffer.from(VALUE).toString('base64url')];
function expectClean(value: unknown): void {
  const seen = typeof value === 'string' ? value : text(value);
  for (const form of encodings) expect(seen).not.toContain(form);
}
function data(result: ToolResult): Record<string, unknown> {
  if (!result.ok) throw new Error(`expected success, got ${result.error.code}: ${result.error.message}`);
  return result.data as Record<string, unknown>;
}

describe('a secret passed by reference', () => {
  it('reaches the tool, and its return value comes back scrubbed', async () => {
    const out = data(await leakCall('return'));
    expect(out).toEqual({ token: '[secret:github]', length: VALUE.length, prefix: 'ghp_' });
  });

  it('printed, printed in two pieces, thrown, or in an error message: scrubbed in the result and its logs', async () => {
    const logged = await leakCall('log');
    expect(logged.meta.logs?.map((l) => l.message)).toEqual(['token=[secret:github]']);
    const split = await leakCall('split');
    const lines = split.meta.logs?.map((l) => l.message) ?? [];
    expect(lines.join('')).toBe('[secret:github]');
    const thrown = await leakCall('throw');
    expect(thrown.ok).toBe(false);
    if (!thrown.ok) expect(thrown.error.message).toContain('could not use [secret:github]');
    for (const r of [logged, split, thrown]) expectClean(r);
  });

  it('log lines a caller follows as they are written (onLog) are scrubbed, from JS and Python alike', async () => {
    const followed: string[] = [];
    const js = await engine.call('leak.js', { token: ref, mode: 'log' }, { onLog: (line) => followed.push(line.message) });
    expect(js.ok).toBe(true);
    const py = await engine.call('leak.py', { token: ref }, { onLog: (line) => followed.push(line.message) });
    expect(py.ok).toBe(true);
    expect(followed).toContain('token=[secret:github]');
    expect(followed.join('\n')).toContain('printed [secret:github]');
    expectClean(followed);
    // The result still holds every line of the run in meta.logs.
    expect(js.meta.logs?.map((l) => l.message)).toEqual(['token=[secret:github]']);
  }, 30_000);

  it('an error message cut at its limit inside the value: none of it is left', async () => {
    // The message is cut at 4,096 characters, a few characters into the value.
    const thrown = await leakCall('long-throw', { pad: 4096 - 10 });
    expect(thrown.ok).toBe(false);
    const event = events.find((e) => e.run_id === thrown.meta.run_id && e.type === 'ToolErrorEvent');
    for (const message of [thrown.ok ? '' : thrown.error.message, event?.type === 'ToolErrorEvent' ? event.error.message : '']) {
      const kept = message.slice(0, message.lastIndexOf('… ('));
      expect(kept.length).toBeGreaterThan(4000);
      for (let k = 3; k < VALUE.length; k++) expect(kept.endsWith(VALUE.slice(0, k))).toBe(false);
    }
  });

  it('an output with an own "__proto__" key keeps it as a key when scrubbed, and its prototype stays plain', async () => {
    const out = data(await leakCall('proto'));
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.hasOwn(out, '__proto__')).toBe(true);
    expect((out as { admin?: unknown }).admin).toBeUndefined();
    expect(out.token).toBe('[secret:github]');
  });

  it('encoded (base64, also inside a longer text; URL; JSON): scrubbed', async () => {
    const b64 = data(await leakCall('base64'));
    expect(b64.b64).toBe('[secret:github]');
    expectClean(b64);
    expect(text(b64.inside)).toContain('[secret:github]');
    expect(data(await leakCall('url')).url).toBe('https://x.test/?q=[secret:github]');
    expect(data(await leakCall('json')).text).toBe('{"t":"[secret:github]"}');
  });

  it('written to a file: reading it, its diff and the call’s change set are scrubbed (the VFS keeps the bytes)', async () => {
    await engine.snapshot({ label: 'before-leak' });
    const r = await leakCall('write');
    expect(data(r)).toEqual({ written: true });
    expect(engine.vfs.read('/out/leak.txt').toString()).toContain(VALUE);
    const read = data(await engine.call('fs.read', { path: '/out/leak.txt' }));
    expect(read.content).toBe('before\n[secret:github]\nafter\n');
    const diff = engine.diff('before-leak');
    expect(text(diff)).toContain('+[secret:github]');
    expectClean(diff);
    const changes = engine.changes(r.meta.run_id);
    expect(changes).not.toBeNull();
    expectClean(changes);
  });

  it('in Python: printed, returned, raised: scrubbed', async () => {
    const ok = await engine.call('leak.py', { token: ref });
    expect(data(ok)).toEqual({ token: '[secret:github]' });
    expect(ok.meta.logs?.map((l) => l.message).join('\n')).toContain('printed [secret:github]');
    const raised = await engine.call('leak.py', { token: ref, raise: true });
    expect(raised.ok).toBe(false);
    if (!raised.ok) expect(raised.error.message).toContain('bad token [secret:github]');
    expectClean([ok, raised]);
  }, 30_000);

  it('a file source works through a tool declaring secret.read; no event and no audit line carries a value', async () => {
    const fromFile = data(await engine.call('any.js', { token: { $secret: 'other' }, mode: 'return' }));
    expect(fromFile).toMatchObject({ token: '[secret:other]', length: OTHER.length });
    const invocations = events.filter((e) => e.type === 'ToolInvocationEvent');
    expect(invocations.length).toBeGreaterThan(5);
    expectClean(events);
    expect(text(events)).not.toContain(OTHER);
    const log = audit();
    expect(log).toContain('[secret:github]');
    expectClean(log);
    expect(log).not.toContain(OTHER);
  });
});

describe('refusals', () => {
  const denied = (r: ToolResult) => {
    if (r.ok) throw new Error('expected a refusal');
    return r.error;
  };

  it('a tool that does not declare the secret: DENIED, one SecurityEvent naming it, the tool never runs', async () => {
    const before = events.length;
    const error = denied(await engine.call('plain.js', { token: ref, mode: 'return' }));
    expect(error).toMatchObject({ code: 'DENIED', stage: 'permission', details: { secret: 'github', permission: 'secret.read:github' } });
    const security = events.slice(before).filter((e) => e.type === 'SecurityEvent');
    expect(security).toHaveLength(1);
    expect(text(security[0])).toContain('github');
    expectClean(events.slice(before));
    expect(events.slice(before).some((e) => e.type === 'ToolResultEvent')).toBe(false);
  });

  it('a caller not granted it: DENIED at the gate (the tool declares it), naming the permission', async () => {
    const error = denied(await engine.call('leak.js', { token: ref, mode: 'return' }, { grants: ['exec.js', 'vfs.write'] }));
    expect(error).toMatchObject({ code: 'DENIED', stage: 'permission' });
    expect(error.message).toContain('secret.read:github');
    const other = denied(await engine.call('any.js', { token: { $secret: 'github' }, mode: 'return' }, { grants: ['exec.js', 'secret.read:other'] }));
    expect(other).toMatchObject({ code: 'DENIED', details: { secret: 'github' } });
  });

  it('an unknown secret is DENIED like an ungranted one; a source that gives no usable value is MISCONFIGURED naming it', async () => {
    const unknown = denied(await engine.call('any.js', { token: { $secret: 'nope' }, mode: 'return' }));
    expect(unknown).toMatchObject({ code: 'DENIED', stage: 'permission', details: { secret: 'nope' } });
    const missing = denied(await engine.call('any.js', { token: { $secret: 'missing' }, mode: 'return' }));
    expect(missing.code).toBe('MISCONFIGURED');
    expect(missing.message).toContain('ARIUM_TEST_UNSET_VAR');
    const short = denied(await engine.call('any.js', { token: { $secret: 'short' }, mode: 'return' }));
    expect(short.code).toBe('MISCONFIGURED');
    expect(short.message).toContain('too short to be scrubbed');
    expect(short.message).not.toContain('abc');
  });

  it('a malformed reference is INVALID_INPUT; nested references are resolved too', async () => {
    expect(denied(await engine.call('any.js', { token: { $secret: 5 }, mode: 'return' })).code).toBe('INVALID_INPUT');
    const nested = data(await engine.call('any.js', { token: 'x', mode: 'return', extra: [{ deep: { $secret: 'github' } }] }));
    expect(nested).toMatchObject({ token: 'x' });
  });

  it('concurrent calls each get the value and return it scrubbed', async () => {
    const results = await Promise.all(Array.from({ length: 12 }, () => leakCall('return')));
    for (const r of results) expect(data(r)).toEqual({ token: '[secret:github]', length: VALUE.length, prefix: 'ghp_' });
  });
});

describe('snapshot metadata', () => {
  it('a label or message holding a secret value is kept scrubbed', async () => {
    const info = await engine.snapshot({ label: `tag-${VALUE}`, message: `made with ${Buffer.from(VALUE).toString('base64')}` });
    expect(info.label).toBe('tag-[secret:github]');
    expect(info.message).toBe('made with [secret:github]');
    expectClean(engine.snapshots());
    const viaTool = data(await engine.call('vfs.snapshot', { label: 'v1', message: `by ${VALUE}` }));
    expectClean(viaTool);
    expectClean(engine.snapshots());
  });
});

describe('secrets and macros', () => {
  const macro = (id: string, steps: unknown[]) =>
    JSON.stringify({ id, description: `macro ${id}`, runner: 'macro', schema: { type: 'object' }, steps });

  it('a macro’s input cannot carry a reference (its steps could pass the value to any tool): DENIED', async () => {
    project.write('m-in.json', macro('m.input', [{ tool: 'leak.js', input: { token: { $from: '/input/token' }, mode: 'return' } }]));
    await engine.refresh();
    const r = await engine.call('m.input', { token: ref });
    expect(r.ok ? null : r.error).toMatchObject({ code: 'DENIED', stage: 'permission' });
  });

  it('a step names the secret in its template: its own tool is checked, and what comes back is scrubbed', async () => {
    project.write('m-ok.json', macro('m.ok', [{ tool: 'leak.js', input: { token: { $secret: 'github' }, mode: 'return' } }]));
    project.write('m-bad.json', macro('m.bad', [{ tool: 'plain.js', input: { token: { $secret: 'github' }, mode: 'return' } }]));
    await engine.refresh();
    expect(data(await engine.call('m.ok', {}))).toEqual({ token: '[secret:github]', length: VALUE.length, prefix: 'ghp_' });
    const bad = await engine.call('m.bad', {});
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(text(bad.error)).toContain('DENIED');
    expectClean(events);
  });
});

describe('configuration and surfaces', () => {
  it('an example may hold a secret reference where the schema wants a string', async () => {
    project.write(
      'ex.json',
      definition({
        id: 'ex.tool',
        entry: 'leak.js',
        schema: { type: 'object', properties: { token: { type: 'string' } } },
        examples: [{ token: { $secret: 'github' } }],
      }),
    );
    project.write(
      'ex-bad.json',
      definition({
        id: 'ex.bad',
        entry: 'leak.js',
        schema: { type: 'object', properties: { token: { type: 'integer' } } },
        examples: [{ token: { $secret: 'github' } }],
      }),
    );
    await engine.refresh();
    expect(engine.tool('ex.tool')).toBeDefined();
    expect(engine.problems().find((p) => p.file.endsWith('ex-bad.json'))?.at).toBe('/examples/0');
  });

  it('a bad secrets entry stops the engine naming the field', async () => {
    const error = await createEngine({
      workspace: project.workspace,
      project: project.project,
      watch: false,
      persist: false,
      secrets: { 'bad name': 'x'.repeat(10) },
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as Error).message).toContain('"bad name" is not a secret name');
  });

  it('the gateway’s file view scrubs a file holding a secret', async () => {
    const gateway = await createGateway({
      workspace: project.workspace,
      project: project.project,
      engineOptions: { persist: false, watch: false, secrets: { github: VALUE } },
    });
    try {
      await gateway.app.inject({ method: 'GET', url: '/v1/tools' });
      const live = gateway.engines().get(project.project);
      if (!live) throw new Error('gateway engine not open');
      live.vfs.write('/leak.txt', `x ${VALUE} y`);
      const res = await gateway.app.inject({ method: 'GET', url: '/v1/fs/read?path=/leak.txt' });
      expect(res.json().text).toBe('x [secret:github] y');
    } finally {
      await gateway.close();
    }
  });
});
