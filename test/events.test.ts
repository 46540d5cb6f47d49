import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Engine, EngineEvent, EngineOptions, SecurityEvent, ToolErrorEvent, ToolInvocationEvent, ToolResultEvent } from '../src/index.js';
import { definition, FakeRunner, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

let project: TempProject | null = null;
let engine: Engine | null = null;

afterEach(async () => {
  await engine?.close();
  project?.remove();
  engine = null;
  project = null;
});

async function open(options: EngineOptions = {}): Promise<Engine> {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'echo.json': definition({ id: 'any.echo' }),
    'typed.json': definition({ id: 'typed.secret', schema: { type: 'object', properties: { password: { type: 'integer' } } } }),
  });
  engine = await openEngine(project, { runners: [new FakeRunner({ 'any.echo': (ctx) => ctx.input, 'typed.secret': () => 'never' })], ...options });
  return engine;
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function expectCommonFields(event: EngineEvent): void {
  expect(Object.keys(event)).toEqual(expect.arrayContaining(['type', 'at', 'run_id', 'trace_id']));
  expect(event.at).toMatch(ISO);
}

const of = <T extends EngineEvent['type']>(events: EngineEvent[], type: T) =>
  events.filter((e): e is Extract<EngineEvent, { type: T }> => e.type === type);

describe('the events of a call', () => {
  it('a success: ToolInvocationEvent then ToolResultEvent, with the VFS change summary', async () => {
    const engine = await open();
    const events = recordEvents(engine);
    const result = await engine.call('fs.write', { path: '/docs/a.txt', content: 'hi' }, { trace_id: 'trace-1', caller: 'http:127.0.0.1' });
    expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'ToolResultEvent']);
    for (const e of events) expectCommonFields(e);
    const [invocation, done] = events as [ToolInvocationEvent, ToolResultEvent];
    expect(invocation).toMatchObject({
      run_id: result.meta.run_id,
      trace_id: 'trace-1',
      tool: 'fs.write',
      input: { path: '/docs/a.txt', content: 'hi' },
      caller: 'http:127.0.0.1',
    });
    expect(done).toMatchObject({
      run_id: result.meta.run_id,
      trace_id: 'trace-1',
      tool: 'fs.write',
      output: { path: '/docs/a.txt', created: true },
      vfs: { written: ['/docs/a.txt'], deleted: [], created_dirs: [], moved: [] },
    });
    expect(done.output_bytes).toBeGreaterThan(0);
    expect(done.duration_ms).toBe(result.meta.duration_ms);
  });

  it('a read changes nothing: vfs is null', async () => {
    const engine = await open();
    engine.vfs.write('/a', 'x');
    const events = recordEvents(engine);
    await engine.call('fs.read', { path: '/a' });
    expect(of(events, 'ToolResultEvent')[0]?.vfs).toBeNull();
  });

  it('a failure: ToolInvocationEvent then ToolErrorEvent carrying the same error as the result', async () => {
    const engine = await open();
    const events = recordEvents(engine);
    const result = await engine.call('fs.read', { path: '/missing' });
    expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'ToolErrorEvent']);
    for (const e of events) expectCommonFields(e);
    const error = events[1] as ToolErrorEvent;
    expect(error).toMatchObject({ run_id: result.meta.run_id, trace_id: result.meta.trace_id, tool: 'fs.read' });
    expect(error.error).toEqual(!result.ok && result.error);
  });

  it('an unknown tool and an unreadable input still get both events', async () => {
    const engine = await open();
    const events = recordEvents(engine);
    await engine.call(42 as unknown as string, {});
    await engine.call('fs.read', { n: Number.NaN });
    expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'ToolErrorEvent', 'ToolInvocationEvent', 'ToolErrorEvent']);
    expect((events[0] as ToolInvocationEvent).tool).toBe('(number)');
    expect((events[2] as ToolInvocationEvent).input).toBe('[rejected input]');
  });

  it('a denial: one SecurityEvent between them, with the common fields', async () => {
    const engine = await open({ grants: ['vfs.read'] });
    const events = recordEvents(engine);
    const result = await engine.call('fs.write', { path: '/x', content: '' });
    expect(events.map((e) => e.type)).toEqual(['ToolInvocationEvent', 'SecurityEvent', 'ToolErrorEvent']);
    const security = events[1] as SecurityEvent;
    expectCommonFields(security);
    expect(security).toEqual({
      type: 'SecurityEvent',
      at: security.at,
      run_id: result.meta.run_id,
      trace_id: result.meta.trace_id,
      tool: 'fs.write',
      action: 'denied',
      permission: 'vfs.write',
      operation: 'call fs.write',
      reason: 'a declared permission is not granted',
    });
  });

  it('a registry change: RegistryChangeEvent with the common fields (ids null: no call caused it)', async () => {
    const engine = await open();
    const events = recordEvents(engine);
    project?.write('new.json', definition({ id: 'demo.new' }));
    await engine.refresh();
    expect(events).toEqual([
      {
        type: 'RegistryChangeEvent',
        at: expect.stringMatching(ISO),
        run_id: null,
        trace_id: null,
        added: ['demo.new'],
        updated: [],
        removed: [],
        problems: [],
      },
    ]);
  });

  it('are delivered on typed channels as well as on "event"', async () => {
    const engine = await open();
    const seen: string[] = [];
    engine.events.on('invocation', (e) => seen.push(`invocation:${e.type}`));
    engine.events.on('result', (e) => seen.push(`result:${e.type}`));
    engine.events.on('error', (e) => seen.push(`error:${e.type}`));
    engine.events.on('security', (e) => seen.push(`security:${e.type}`));
    await engine.call('fs.list', {});
    await engine.call('fs.write', { path: '/x', content: '' }, { grants: [] });
    expect(seen).toEqual([
      'invocation:ToolInvocationEvent',
      'result:ToolResultEvent',
      'invocation:ToolInvocationEvent',
      'security:SecurityEvent',
      'error:ToolErrorEvent',
    ]);
  });
});

describe('payloads in events', () => {
  const size = (event: EngineEvent | undefined) => JSON.stringify(event).length;

  it('cut long strings, long keys, many keys and long arrays to event_payload_bytes', async () => {
    const engine = await open({ policy: { event_payload_bytes: 512 } });
    const events = recordEvents(engine);
    const inputs = [
      { text: 'x'.repeat(200_000) },
      { ['k'.repeat(200_000)]: 1 },
      Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`key${i}`, i])),
      { list: Array.from({ length: 50_000 }, (_, i) => i) },
    ];
    for (const input of inputs) {
      const result = await engine.call('any.echo', input);
      expect(result.ok).toBe(true);
    }
    const invocations = of(events, 'ToolInvocationEvent');
    const results = of(events, 'ToolResultEvent');
    expect(invocations).toHaveLength(4);
    for (const e of [...invocations, ...results]) expect(size(e)).toBeLessThan(2048);
    const inputOf = (i: number) => (invocations[i] as ToolInvocationEvent).input as Record<string, unknown>;
    const text = inputOf(0).text as string;
    expect(text).toMatch(/^x+…\[200000 chars\]$/);
    expect(text.length).toBeLessThan(600);
    expect(Object.keys(inputOf(1))[0]).toMatch(/^k+…\[200000 chars\]$/);
    expect(inputOf(2)).toMatchObject({ key0: 0, '…': 'truncated' });
    const list = inputOf(3).list as unknown[];
    expect(list.at(-1)).toMatch(/^\[\d+ more\]$/);
  });

  it('redact values under secret-looking keys, at any depth, in input and output', async () => {
    const engine = await open();
    const events = recordEvents(engine);
    const secrets = {
      password: 'pw-1',
      api_key: 'key-2',
      apiKey: 'key-3',
      token: 'tok-4',
      Authorization: 'Bearer tok-5',
      nested: { client_secret: 'sec-6', list: [{ private_key: 'pk-7' }] },
      cookie: 'ck-8',
      session_id: 'sid-9',
      visible: 'shown-10',
    };
    const result = await engine.call('any.echo', secrets);
    // The tool itself gets (and returns) the real values; only events are redacted.
    expect(result).toMatchObject({ ok: true, data: { password: 'pw-1', nested: { client_secret: 'sec-6' } } });
    const text = JSON.stringify(events);
    for (const value of ['pw-1', 'key-2', 'key-3', 'tok-4', 'tok-5', 'sec-6', 'pk-7', 'ck-8', 'sid-9']) expect(text).not.toContain(value);
    expect(text).toContain('shown-10');
    const invocation = of(events, 'ToolInvocationEvent')[0];
    expect(invocation?.input).toMatchObject({
      password: '[redacted]',
      nested: { client_secret: '[redacted]', list: [{ private_key: '[redacted]' }] },
    });
    expect(of(events, 'ToolResultEvent')[0]?.output).toMatchObject({ token: '[redacted]', visible: 'shown-10' });
  });

  it('keep secrets out of the error events of a call that fails validation', async () => {
    const engine = await open();
    const events = recordEvents(engine);
    const result = await engine.call('typed.secret', { password: 'hunter2-secret' });
    expect(result.ok ? null : result.error.code).toBe('INVALID_INPUT');
    expect(JSON.stringify(events)).not.toContain('hunter2-secret');
  });
});

describe('the JSONL audit log', () => {
  it('holds every event, one JSON object a line, in order, when auditLog is true', async () => {
    const engine = await open({ auditLog: true });
    const events = recordEvents(engine);
    await engine.call('fs.write', { path: '/a.txt', content: 'x', password: 'audit-secret' });
    await engine.call('fs.write', { path: '/a.txt', content: 'y' });
    await engine.call('fs.write', { path: '/b.txt', content: '' }, { grants: ['vfs.read'] });
    project?.write('later.json', definition({ id: 'demo.later' }));
    await engine.refresh();
    await engine.close();
    const path = join(project?.dir ?? '', '.arium', 'audit.jsonl');
    const text = readFileSync(path, 'utf8');
    expect(text.endsWith('\n')).toBe(true);
    const [startup, ...lines] = text
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    // The first line is the registry as loaded at start-up, before anyone could subscribe.
    expect(startup).toMatchObject({ type: 'RegistryChangeEvent', added: ['any.echo', 'typed.secret'] });
    expect(lines).toEqual(JSON.parse(JSON.stringify(events)));
    expect(lines.map((e: EngineEvent) => e.type)).toEqual([
      'ToolInvocationEvent',
      'ToolErrorEvent',
      'ToolInvocationEvent',
      'ToolResultEvent',
      'ToolInvocationEvent',
      'SecurityEvent',
      'ToolErrorEvent',
      'RegistryChangeEvent',
    ]);
    expect(text).not.toContain('audit-secret');
    expect(statSync(path).mode & 0o777).toBe(0o600);
  });

  it('goes to the path given, and appends across engine runs', async () => {
    const engine = await open();
    await engine.close();
    const path = join(project?.workspace ?? '', 'logs', 'events.jsonl');
    for (let run = 0; run < 2; run++) {
      const again = await openEngine(project as TempProject, { auditLog: path });
      await again.call('fs.list', {});
      await again.close();
    }
    const types = readFileSync(path, 'utf8')
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line).type);
    const run = ['RegistryChangeEvent', 'ToolInvocationEvent', 'ToolResultEvent'];
    expect(types).toEqual([...run, ...run]);
  });

  it('is written even when nobody subscribes', async () => {
    const engine = await open({ auditLog: true });
    await engine.call('fs.list', {});
    await engine.close();
    const text = readFileSync(join(project?.dir ?? '', '.arium', 'audit.jsonl'), 'utf8');
    const types = text
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line).type);
    expect(types).toEqual(['RegistryChangeEvent', 'ToolInvocationEvent', 'ToolResultEvent']);
  });

  it('rotates at max_bytes without losing, tearing or reordering a line, with many calls at once', async () => {
    const engine = await open({ auditLog: { max_bytes: 4096, files: 100 } });
    const events = recordEvents(engine);
    for (let round = 0; round < 4; round++) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => engine.call('fs.write', { path: `/r${round}/f${i}.txt`, content: 'x'.repeat(i) })));
    }
    await engine.close();
    const path = join(project?.dir ?? '', '.arium', 'audit.jsonl');
    const rotated = readdirSync(join(project?.dir ?? '', '.arium')).filter((f) => f.startsWith('audit.jsonl.'));
    expect(rotated.length).toBeGreaterThan(10);
    const files = [
      ...rotated
        .map((f) => Number(f.slice('audit.jsonl.'.length)))
        .sort((a, b) => b - a)
        .map((n) => `${path}.${n}`),
      path,
    ];
    const lines: EngineEvent[] = [];
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      expect(text.endsWith('\n')).toBe(true);
      expect(statSync(file).size).toBeLessThanOrEqual(4096);
      for (const line of text.trimEnd().split('\n')) lines.push(JSON.parse(line));
    }
    // Oldest file first, the start-up registry event, then every event in the order it was emitted.
    expect(lines.slice(1)).toEqual(JSON.parse(JSON.stringify(events)));
  });

  it('keeps `files` rotated files and deletes older ones', async () => {
    const engine = await open({ auditLog: { max_bytes: 4096, files: 2 } });
    for (let i = 0; i < 60; i++) await engine.call('fs.write', { path: `/f${i}.txt`, content: 'x' });
    await engine.close();
    const names = readdirSync(join(project?.dir ?? '', '.arium')).filter((f) => f.startsWith('audit.jsonl'));
    expect(names.sort()).toEqual(['audit.jsonl', 'audit.jsonl.1', 'audit.jsonl.2']);
  });
});
