import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import { ApprovalRules } from '../src/approvals/rules.js';
import type { ApprovalRequestedEvent, ApprovalResolvedEvent, Engine, EngineEvent, EngineOptions, ErrResult, ToolResult } from '../src/index.js';
import { EngineConfigError, ToolFailure } from '../src/index.js';
import { definition, FakeRunner, nextEvent, openEngine, recordEvents, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

let project: TempProject;
let fake: FakeRunner;
let engine: Engine | null = null;

beforeEach(() => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'deploy.json': definition({ id: 'ops.deploy' }),
    'echo.json': definition({ id: 'misc.echo' }),
  });
  fake = new FakeRunner({ 'ops.deploy': (ctx) => ctx.input, 'misc.echo': (ctx) => ctx.input });
});

afterEach(async () => {
  await engine?.close();
  engine = null;
  project.remove();
});

const RULES = [{ tool: 'fs.delete' }, { tool: 'ops.*' }, { tool: 'fs.write', when: { path: { pattern: '^/etc/' } } }];

async function open(options: EngineOptions = {}): Promise<Engine> {
  engine = await openEngine(project, { runners: [fake], approvals: { rules: RULES, timeout_ms: 60_000 }, ...options });
  return engine;
}

const requested = (e: Engine, tool?: string) =>
  nextEvent(e, 'approval', (ev) => ev.type === 'ApprovalRequested' && (tool === undefined || ev.tool === tool)) as Promise<ApprovalRequestedEvent>;

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

function thrown(fn: () => unknown): ToolFailure {
  try {
    fn();
  } catch (error) {
    if (error instanceof ToolFailure) return error;
    throw error;
  }
  throw new Error('expected a ToolFailure');
}

const resolvedEvents = (events: EngineEvent[]) => events.filter((e): e is ApprovalResolvedEvent => e.type === 'ApprovalResolved');

describe('a call that needs approval', () => {
  it('waits, writes nothing, and runs once approved', async () => {
    const e = await open();
    const events = recordEvents(e);
    const asked = requested(e);
    const call = e.call('fs.write', { path: '/etc/motd', content: 'hi' }, { caller: 'test:alice', trace_id: 'step-1' });
    const request = await asked;
    expect(request).toMatchObject({ tool: 'fs.write', caller: 'test:alice', trace_id: 'step-1', rule: { index: 2, tool: 'fs.write' } });
    // The input the tool would run with: the schema's defaults filled in.
    expect(request.input).toMatchObject({ path: '/etc/motd', content: 'hi', overwrite: true });
    expect(e.approvals().map((p) => p.run_id)).toEqual([request.run_id]);
    expect(e.vfs.exists('/etc/motd')).toBe(false);
    expect(events.some((ev) => ev.type === 'ToolResultEvent' || ev.type === 'ToolErrorEvent')).toBe(false);

    const decision = e.approve(request.run_id, { by: 'bob' });
    expect(decision).toMatchObject({ run_id: request.run_id, outcome: 'approved', by: 'bob' });
    const result = await call;
    expect(result.ok).toBe(true);
    expect(result.meta.run_id).toBe(request.run_id);
    expect(e.vfs.read('/etc/motd').toString()).toBe('hi');
    expect(e.approvals()).toEqual([]);
    expect(resolvedEvents(events)).toEqual([expect.objectContaining({ run_id: request.run_id, outcome: 'approved', by: 'bob', reason: null })]);
  });

  it('ends as APPROVAL_DENIED when denied, and nothing is written', async () => {
    const e = await open();
    e.vfs.write('/keep.txt', 'kept');
    const asked = requested(e);
    const call = e.call('fs.delete', { path: '/keep.txt' });
    const { run_id } = await asked;
    expect(e.vfs.read('/keep.txt').toString()).toBe('kept');
    e.deny(run_id, { by: 'carol', reason: 'not today' });
    const error = failed(await call);
    expect(error).toMatchObject({ code: 'APPROVAL_DENIED', stage: 'permission', retryable: false });
    expect(error.message).toContain('carol');
    expect(error.message).toContain('not today');
    expect(error.details).toMatchObject({ run_id, by: 'carol', reason: 'not today', outcome: 'denied' });
    expect(e.vfs.read('/keep.txt').toString()).toBe('kept');
  });

  it('ends as APPROVAL_TIMEOUT when nobody answers in time', async () => {
    const e = await open({ approvals: { rules: RULES, timeout_ms: 30 } });
    const events = recordEvents(e);
    const error = failed(await e.call('ops.deploy', { target: 'prod' }));
    expect(error).toMatchObject({ code: 'APPROVAL_TIMEOUT', stage: 'permission', retryable: false });
    expect(error.message).toContain('30 ms');
    expect(fake.started).toEqual([]);
    expect(resolvedEvents(events)).toEqual([expect.objectContaining({ outcome: 'timed_out', by: null })]);
  });

  it('lets the first of two concurrent answers win; the second learns who answered', async () => {
    const e = await open();
    const asked = requested(e);
    const call = e.call('ops.deploy', { target: 'prod' });
    const { run_id } = await asked;
    const [approved, denied] = await Promise.allSettled([
      Promise.resolve().then(() => e.approve(run_id, { by: 'first' })),
      Promise.resolve().then(() => e.deny(run_id, { by: 'second', reason: 'late' })),
    ]);
    expect(approved.status).toBe('fulfilled');
    expect(denied.status).toBe('rejected');
    const late = (denied as PromiseRejectedResult).reason as ToolFailure;
    expect(late.code).toBe('ALREADY_RESOLVED');
    expect(late.message).toContain('approved by first');
    expect((await call).ok).toBe(true);
    expect(fake.started).toEqual(['ops.deploy']);
  });

  it('holds no concurrency slot: other calls run while one waits', async () => {
    const e = await open({ policy: { concurrency: 1, tool_concurrency: 1 } });
    const asked = requested(e);
    const waiting = e.call('ops.deploy', { target: 'prod' });
    const { run_id } = await asked;
    const others = await Promise.all([
      e.call('misc.echo', { n: 1 }),
      e.call('misc.echo', { n: 2 }),
      e.call('fs.write', { path: '/tmp/x', content: 'x' }),
      e.call('fs.read', { path: '/tmp/x' }),
    ]);
    expect(others.map((r) => r.ok)).toEqual([true, true, true, true]);
    expect(e.approvals()).toHaveLength(1);
    e.approve(run_id, { by: 'dave' });
    expect((await waiting).ok).toBe(true);
  });

  it('keeps several approvals apart: each answer reaches its own call', async () => {
    const e = await open();
    const seen: ApprovalRequestedEvent[] = [];
    const both = new Promise<void>((resolve) => {
      e.events.on('approval', (ev) => {
        if (ev.type === 'ApprovalRequested') seen.push(ev);
        if (seen.length === 2) resolve();
      });
    });
    const a = e.call('ops.deploy', { target: 'a' });
    const b = e.call('ops.deploy', { target: 'b' });
    await both;
    const runOf = (target: string) => seen.find((s) => (s.input as { target: string }).target === target)?.run_id as string;
    e.deny(runOf('a'), { by: 'erin' });
    e.approve(runOf('b'), { by: 'erin' });
    expect(failed(await a).code).toBe('APPROVAL_DENIED');
    expect(await b).toMatchObject({ ok: true, data: { target: 'b' } });
  });

  it('does not count the wait in the call timeout', async () => {
    const e = await open();
    const asked = requested(e);
    // Waits longer than the call's timeout; the tool itself returns at once, well within it.
    const call = e.call('ops.deploy', { target: 'prod' }, { timeout_ms: 400 });
    const { run_id } = await asked;
    await new Promise((r) => setTimeout(r, 500));
    e.approve(run_id, { by: 'frank' });
    expect((await call).ok).toBe(true);
  });

  it('ends as CANCELLED when the call is aborted while it waits', async () => {
    const e = await open();
    const events = recordEvents(e);
    const controller = new AbortController();
    const asked = requested(e);
    const call = e.call('ops.deploy', { target: 'prod' }, { signal: controller.signal });
    const { run_id } = await asked;
    controller.abort();
    expect(failed(await call)).toMatchObject({ code: 'CANCELLED', stage: 'permission' });
    expect(e.approvals()).toEqual([]);
    expect(resolvedEvents(events)).toEqual([expect.objectContaining({ run_id, outcome: 'cancelled' })]);
    expect(thrown(() => e.approve(run_id, { by: 'x' })).code).toBe('ALREADY_RESOLVED');
    expect(fake.started).toEqual([]);
  });

  it('denies pending approvals when the engine closes', async () => {
    const e = await open();
    const asked = requested(e);
    const call = e.call('ops.deploy', { target: 'prod' });
    await asked;
    await e.close();
    const error = failed(await call);
    expect(error.code).toBe('APPROVAL_DENIED');
    expect(error.message).toContain('engine closed');
    expect(fake.started).toEqual([]);
  });

  it('masks secret-looking input fields in the request, and the tool still gets them', async () => {
    const e = await open();
    const asked = requested(e);
    const input = { target: 'prod', password: 'p', api_token: 't', key: 'k', nested: { ssh_key: 's', accessKey: 'a', keys: ['shown'] } };
    const call = e.call('ops.deploy', input);
    const request = await asked;
    expect(request.input).toEqual({
      target: 'prod',
      password: '[redacted]',
      api_token: '[redacted]',
      key: '[redacted]',
      nested: { ssh_key: '[redacted]', accessKey: '[redacted]', keys: ['shown'] },
    });
    expect(e.approvals()[0]?.input).toEqual(request.input);
    e.approve(request.run_id, { by: 'gina' });
    expect(await call).toMatchObject({ ok: true, data: input });
  });

  it('runs a pre-approved call without waiting, and says who approved it', async () => {
    const e = await open();
    const events = recordEvents(e);
    const result = await e.call('ops.deploy', { target: 'prod' }, { approval: { by: 'cli:henry' } });
    expect(result.ok).toBe(true);
    expect(resolvedEvents(events)).toEqual([expect.objectContaining({ outcome: 'approved', by: 'cli:henry', preapproved: true })]);
    const bad = failed(await e.call('ops.deploy', { target: 'prod' }, { approval: { by: '' } as never }));
    expect(bad.code).toBe('INVALID_INPUT');
  });

  it('tells onApproval when the call starts to wait', async () => {
    const e = await open();
    const result = await e.call('ops.deploy', { target: 'prod' }, { onApproval: (pending) => e.deny(pending.run_id, { by: 'hook', reason: 'no' }) });
    expect(failed(result)).toMatchObject({ code: 'APPROVAL_DENIED', details: { by: 'hook' } });
  });

  it('keys rules on the tool id, not its display name', async () => {
    project.write('named.json', definition({ id: 'misc.named', name: 'fs.delete' }));
    fake = new FakeRunner({ 'misc.named': (ctx) => ctx.input });
    const e = await open();
    const events = recordEvents(e);
    expect((await e.call('misc.named', {})).ok).toBe(true);
    expect(events.some((ev) => ev.type === 'ApprovalRequested')).toBe(false);
  });

  it('does not ask for calls no rule matches', async () => {
    const e = await open();
    const events = recordEvents(e);
    expect((await e.call('fs.write', { path: '/home/x', content: '' })).ok).toBe(true);
    expect(events.some((ev) => ev.type === 'ApprovalRequested')).toBe(false);
  });

  it('records who answered and when in the audit log', async () => {
    const audit = join(project.dir, 'audit.jsonl');
    const e = await open({ auditLog: audit });
    const asked = requested(e);
    const call = e.call('ops.deploy', { target: 'prod' }, { caller: 'test:ivy' });
    const { run_id } = await asked;
    e.deny(run_id, { by: 'judge', reason: 'risky' });
    await call;
    await e.close();
    const lines = readFileSync(audit, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as EngineEvent);
    expect(lines.find((l) => l.type === 'ApprovalRequested')).toMatchObject({ run_id, caller: 'test:ivy', tool: 'ops.deploy' });
    const resolved = lines.find((l) => l.type === 'ApprovalResolved');
    expect(resolved).toMatchObject({ run_id, outcome: 'denied', by: 'judge', reason: 'risky' });
    expect(Number.isNaN(Date.parse((resolved as ApprovalResolvedEvent).at))).toBe(false);
  });
});

describe('answers', () => {
  it('refuses an unknown run id, naming where the pending ones are listed', async () => {
    const e = await open();
    const error = thrown(() => e.approve('no-such-run', { by: 'kim' }));
    expect(error.code).toBe('NOT_FOUND');
    expect(error.message).toContain('no-such-run');
    expect(error.message).toContain('engine.approvals()');
    expect(thrown(() => e.deny('no-such-run', { by: 'kim' })).code).toBe('NOT_FOUND');
  });

  test.each([
    ['no by', {}],
    ['an empty by', { by: ' ' }],
    ['a by that is not a string', { by: 7 }],
    ['a reason that is not a string', { by: 'x', reason: 3 }],
  ])('refuses an answer with %s', async (_name, answer) => {
    const e = await open();
    const asked = requested(e);
    const call = e.call('ops.deploy', {});
    const { run_id } = await asked;
    expect(thrown(() => e.deny(run_id, answer as never)).code).toBe('INVALID_INPUT');
    expect(e.approvals()).toHaveLength(1);
    e.approve(run_id, { by: 'lee' });
    expect((await call).ok).toBe(true);
  });
});

describe('the gate on its own', () => {
  it('refuses a call past the pending bound with BUSY, without asking anyone', async () => {
    const { ApprovalGate } = await import('../src/approvals/gate.js');
    const { EventBus } = await import('../src/events.js');
    const bus = new EventBus();
    const seen: EngineEvent[] = [];
    bus.on('event', (e) => seen.push(e));
    const gate = new ApprovalGate({
      bus,
      rules: new ApprovalRules([{ tool: '*' }]),
      timeout_ms: 60_000,
      max_pending: 1,
      remembered: 2,
      payload_bytes: 4096,
      scrub: (value) => value,
    });
    const request = (runId: string) => ({
      runId,
      traceId: runId,
      tool: 't',
      input: {},
      caller: null,
      rule: { index: 0, tool: '*' },
      signal: undefined,
    });
    const first = gate.wait(request('r1'));
    await expect(gate.wait(request('r2'))).rejects.toMatchObject({ code: 'BUSY', stage: 'permission' });
    expect(seen.filter((e) => e.type === 'ApprovalRequested').map((e) => e.run_id)).toEqual(['r1']);
    gate.approve('r1', { by: 'x' });
    await expect(first).resolves.toMatchObject({ outcome: 'approved' });
    // Only the last `remembered` answers are kept: an old run id is unknown again, not "already resolved".
    for (const id of ['r3', 'r4']) {
      const waiting = gate.wait(request(id));
      gate.deny(id, { by: 'x' });
      await waiting.catch(() => {});
    }
    expect(thrown(() => gate.approve('r1', { by: 'y' })).code).toBe('NOT_FOUND');
    expect(thrown(() => gate.approve('r4', { by: 'y' })).code).toBe('ALREADY_RESOLVED');
    // Closed, it lets no call start to wait.
    gate.close();
    await expect(gate.wait(request('r5'))).rejects.toMatchObject({ code: 'APPROVAL_DENIED', details: { outcome: 'closed' } });
    expect(gate.pending()).toEqual([]);
  });
});

describe('rules', () => {
  const rules = new ApprovalRules([
    { tool: 'fs.delete' },
    { tool: 'system.*' },
    { tool: 'fs.write', when: { path: { prefix: '/etc/' } } },
    { tool: 'ops.run', when: { '/options/mode': { equals: 'force' }, '/targets/0': { pattern: '^prod' } } },
    { tool: 'ops.flag', when: { dry: { equals: false } } },
    { tool: 'ops.slash', when: { '/a~1b': { equals: { x: [1, 2] } } } },
    { tool: 'fs.move', when: { to: { glob: '/etc/**' } } },
  ]);
  test.each([
    ['fs.delete', {}, 0],
    ['fs.deleted', {}, null],
    ['system.exec', { cmd: 'ls' }, 1],
    ['system', {}, null],
    ['fs.write', { path: '/etc/passwd' }, 2],
    ['fs.write', { path: '/home/etc/x' }, null],
    ['fs.write', { path: 7 }, null],
    ['fs.write', {}, null],
    ['ops.run', { options: { mode: 'force' }, targets: ['prod-eu'] }, 3],
    ['ops.run', { options: { mode: 'force' }, targets: ['staging'] }, null],
    ['ops.run', { options: { mode: 'safe' }, targets: ['prod-eu'] }, null],
    ['ops.run', { options: {}, targets: [] }, null],
    ['ops.flag', { dry: false }, 4],
    ['ops.flag', { dry: 'false' }, null],
    ['ops.flag', {}, null],
    ['ops.slash', { 'a/b': { x: [1, 2] } }, 5],
    ['ops.slash', { 'a/b': { x: [2, 1] } }, null],
    // A glob sees the path as the VFS reads it: other spellings of /etc/x are caught; a refused path asks.
    ['fs.move', { to: '/etc/x' }, 6],
    ['fs.move', { to: '//etc/./x' }, 6],
    ['fs.move', { to: '/tmp/../etc/x' }, 6],
    ['fs.move', { to: '/etc' }, 6],
    ['fs.move', { to: '/etcetera/x' }, null],
    ['fs.move', { to: '/../etc/x' }, 6],
    ['fs.move', { to: 'C:\\etc' }, 6],
  ])('%s with %j matches rule %s', (tool, input, index) => {
    expect(rules.match(tool, input)?.index ?? null).toBe(index);
  });

  it('never reads a prototype through a pointer', () => {
    const proto = new ApprovalRules([{ tool: 't', when: { '/constructor': { pattern: '.' } } }]);
    expect(proto.match('t', {})).toBeNull();
    expect(proto.match('t', JSON.parse('{"constructor":"x"}'))).not.toBeNull();
  });

  test.each([
    ['a bad regular expression', { rules: [{ tool: 'fs.write', when: { path: { pattern: '(' } } }] }, 'approvals.rules.0.when.path'],
    ['two conditions in one', { rules: [{ tool: 'fs.write', when: { path: { prefix: '/a', pattern: 'b' } } }] }, 'approvals.rules.0.when.path'],
    ['a relative glob', { rules: [{ tool: 'fs.write', when: { path: { glob: 'etc/**' } } }] }, 'approvals.rules.0.when.path.glob'],
    ['conditions that are not an object', { rules: [{ tool: 'fs.write', when: ['path'] }] }, 'approvals.rules.0.when'],
    ['a tool pattern with a space', { rules: [{ tool: 'fs write' }] }, 'approvals.rules.0.tool'],
    ['a rule with no tool', { rules: [{ when: { path: { equals: 1 } } }] }, 'approvals.rules.0'],
    ['an unknown key', { rules: [], timeout: 5 }, 'approvals'],
    ['a zero timeout', { rules: [], timeout_ms: 0 }, 'approvals.timeout_ms'],
  ])('refuses %s in arium.json, naming the field', async (_name, approvals, field) => {
    project.write('../arium.json', JSON.stringify({ approvals }));
    const error = await openEngine(project, { runners: [fake] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).field).toContain(`arium.json ${field}`);
  });

  test.each([
    ['rules that are not an array', { rules: { tool: 'fs.write' } }, 'approvals.rules'],
    ['a timeout past what a timer can wait', { rules: [], timeout_ms: 2 ** 31 }, 'approvals.timeout_ms'],
    ['a timeout that is not an integer', { rules: [], timeout_ms: 1.5 }, 'approvals.timeout_ms'],
  ])('refuses %s given in code, naming the field', async (_name, approvals, field) => {
    const error = await openEngine(project, { runners: [fake], approvals: approvals as never }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).field).toBe(field);
  });

  it('reads rules and the timeout from arium.json', async () => {
    project.write('../arium.json', JSON.stringify({ approvals: { rules: [{ tool: 'misc.echo' }], timeout_ms: 20 } }));
    engine = await openEngine(project, { runners: [fake] });
    expect(failed(await engine.call('misc.echo', {})).code).toBe('APPROVAL_TIMEOUT');
    expect((await engine.call('ops.deploy', {})).ok).toBe(true);
  });
});
