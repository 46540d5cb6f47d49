// A compromised worker: a NATS client in the queue group that speaks the protocol itself. What the
// threat model says it cannot do, it is made to try here.
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, type TempProject, tempProject } from './support/project.js';
import { remoteEngine } from './support/remote.js';

let nats: NatsServer;
let rogue: NatsConnection;
let project: TempProject;
let engine: Engine | null = null;

beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats.stop();
});
afterEach(async () => {
  await engine?.close();
  engine = null;
  await rogue?.close();
  project?.remove();
});

const tools = {
  'note.json': definition({ id: 'note', entry: 'note.js', permissions: ['exec.js', 'vfs.read:/public/**', 'vfs.write:/out/**'] }),
  'note.js': 'export default async function run() { return { ok: 1 }; }',
};

const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** Joins the queue group as a worker would, and does `act` with each call it gets. */
async function rogueWorker(
  act: (call: Record<string, unknown>, ask: (m: unknown) => Promise<Record<string, unknown>>) => Promise<void>,
): Promise<void> {
  const { connect } = await import('@nats-io/transport-node');
  rogue = await connect({ servers: nats.url });
  rogue.subscribe('arium.test.run.js-runner', {
    queue: 'arium.test.workers',
    callback: (_e, msg) => {
      const call = JSON.parse(msg.string()) as Record<string, unknown>;
      const inbox = String(call.inbox);
      const ask = async (m: unknown) =>
        JSON.parse((await rogue.request(inbox, json({ worker: 'rogue', ...(m as object) }), { timeout: 2000 })).string());
      void act(call, ask);
    },
  });
  await rogue.flush();
}

describe('a compromised worker', () => {
  it('cannot read or write outside the call’s grants, nor commit after a denial by claiming success', async () => {
    project = tempProject(tools, 'arium-remote-');
    const answers: Record<string, unknown>[] = [];
    await rogueWorker(async (call, ask) => {
      answers.push(await ask({ t: 'vfs', op: 'read', args: ['/secret/key.txt'] }));
      answers.push(await ask({ t: 'vfs', op: 'write', args: ['/etc-like/owned.txt', 'x'] }));
      answers.push(await ask({ t: 'vfs', op: 'read', args: ['/../../etc/passwd'] }));
      rogue.publish(
        String(call.inbox),
        json({ t: 'done', worker: 'rogue', host: 'h', ok: true, data: { forged: true }, logs: [], intrusions: [], meta: {} }),
      );
    });
    engine = await remoteEngine(project, nats.url);
    engine.vfs.write('/secret/key.txt', 'k');
    const denials: string[] = [];
    engine.events.on('security', (e) => denials.push(String(e.operation)));
    const r = await engine.call('note', {});
    expect(r).toMatchObject({ ok: false, error: { code: 'DENIED', stage: 'permission' } });
    expect(denials[0]).toBe('read /secret/key.txt');
    // After the denial the call is over: the later requests are told so, and nothing was written.
    for (let i = 0; i < 100 && answers.length < 3; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(answers[0]).toMatchObject({ ok: false, error: { code: 'DENIED' } });
    expect(answers.slice(1)).toEqual([{ t: 'ended' }, { t: 'ended' }]);
    expect(engine.vfs.exists('/etc-like/owned.txt')).toBe(false);
  });

  it('can lie about the output, which the engine still checks; its meta cannot replace the engine’s', async () => {
    project = tempProject(
      {
        ...tools,
        'typed.json': definition({
          id: 'typed',
          entry: 'note.js',
          output_schema: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } },
        }),
      },
      'arium-remote-',
    );
    await rogueWorker(async (call) => {
      const meta = { run_id: 'forged', runner: 'forged', extra: 'added' };
      const data = (call.tool as { spec: { id: string } }).spec.id === 'typed' ? { n: 'not a number' } : { lie: true };
      rogue.publish(String(call.inbox), json({ t: 'done', worker: 'rogue', host: 'h', ok: true, data, logs: [], intrusions: [], meta }));
    });
    engine = await remoteEngine(project, nats.url);
    const lie = await engine.call('note', {});
    expect(lie).toMatchObject({ ok: true, data: { lie: true }, meta: { runner: 'js-runner', worker: { id: 'rogue' } } });
    expect(lie.meta.run_id).not.toBe('forged');
    // Only the fields a runner reports pass: anything else a worker puts in meta is dropped.
    expect(lie.meta).not.toHaveProperty('extra');
    expect(await engine.call('typed', {})).toMatchObject({ ok: false, error: { code: 'INVALID_OUTPUT' } });
  });

  it('cannot replace the prototype of the engine’s meta, an error’s details or a heartbeat with "__proto__"', async () => {
    project = tempProject(tools, 'arium-remote-');
    const forged = '{"attempts":99,"capability":"forged","isolation":"forged","bundle":{"bytes":1},"reason":"forged"}';
    await rogueWorker(async (call) => {
      const input = call.input as { fail?: boolean };
      // Written by hand: JSON.stringify of an object literal cannot carry an own "__proto__" key.
      const raw = input.fail
        ? `{"t":"done","worker":"rogue","host":"h","ok":false,"error":{"stage":"execution","code":"TOOL_ERROR","message":"no","details":{"__proto__":${forged},"own":1}},"logs":[],"intrusions":[],"meta":{"__proto__":${forged}}}`
        : `{"t":"done","worker":"rogue","host":"h","ok":true,"data":{},"logs":[],"intrusions":[],"meta":{"__proto__":${forged},"isolation":"rlimits","logs_dropped":-5}}`;
      rogue.publish(String(call.inbox), new TextEncoder().encode(raw));
    });
    engine = await remoteEngine(project, nats.url);
    const ok = await engine.call('note', {});
    expect(ok).toMatchObject({ ok: true, meta: { worker: { id: 'rogue' }, isolation: 'rlimits' } });
    expect(Object.getPrototypeOf(ok.meta)).toBe(Object.prototype);
    expect(ok.meta.attempts).toBeUndefined();
    expect(ok.meta.capability).toBeUndefined();
    expect(ok.meta.bundle).toBeUndefined();
    expect(ok.meta.logs_dropped).toBeUndefined();
    const failed = await engine.call('note', { fail: true });
    expect(failed).toMatchObject({ ok: false, error: { code: 'TOOL_ERROR', details: { own: 1 } } });
    expect(Object.getPrototypeOf(failed.meta)).toBe(Object.prototype);
    expect(failed.meta.isolation).toBeUndefined();
    expect(failed.meta.capability).toBeUndefined();
    const details = (failed as { error: { details: Record<string, unknown> } }).error.details;
    expect(Object.getPrototypeOf(details)).toBe(Object.prototype);
    expect(details.reason).toBeUndefined();
    expect(Object.keys(details)).toEqual(['own']);

    // A heartbeat: only its known fields are kept, in objects of their own.
    rogue.publish(
      'arium.test.hb',
      new TextEncoder().encode(
        `{"t":"hb","id":"rogue-hb","host":"h","pid":1,"runners":["js-runner"],"capacity":1,"in_flight":0,"versions":{"arium":"0","node":"20","protocol":1},"interval_ms":60000,"draining":false,"__proto__":{"leaving":true,"draining":true},"forged":"x","sandboxes":{"__proto__":{"x":{}},"js-runner":{"isolation":"isolated-vm","__proto__":{"available":false},"forged":1}}}`,
      ),
    );
    await rogue.flush();
    let seen: Record<string, unknown> | undefined;
    for (let i = 0; i < 100 && !seen; i++) {
      seen = (await engine.status()).remote?.workers.find((w) => w.id === 'rogue-hb') as Record<string, unknown> | undefined;
      if (!seen) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(seen).toMatchObject({ id: 'rogue-hb', draining: false, sandboxes: { 'js-runner': { isolation: 'isolated-vm' } } });
    expect(seen).not.toHaveProperty('forged');
    const sandboxes = (seen?.sandboxes ?? {}) as Record<string, object>;
    expect(Object.keys(sandboxes)).toEqual(['js-runner']);
    expect(Object.keys(sandboxes['js-runner'] ?? {})).toEqual(['isolation']);
    expect(JSON.stringify(seen)).not.toContain('__proto__');
  });

  it('is sent the tools folder’s files and the links that stay inside it, never what a link out of it points to', async () => {
    project = tempProject({ ...tools, 'lib/shared.js': 'export const x = 1;\n' }, 'arium-remote-');
    const secret = 'a host file next to the tools folder\n';
    writeFileSync(join(project.dir, 'secret.txt'), secret);
    symlinkSync(join(project.dir, 'secret.txt'), join(project.tools, 'leak.txt'));
    symlinkSync('lib/shared.js', join(project.tools, 'alias.js'));
    symlinkSync('..', join(project.tools, 'lib', 'up'));
    mkdirSync(join(project.tools, 'loop'));
    symlinkSync('..', join(project.tools, 'loop', 'again'));
    const asked: Record<string, unknown>[] = [];
    await rogueWorker(async (call, ask) => {
      asked.push(await ask({ t: 'tree' }));
      asked.push(await ask({ t: 'blob', sha: createHash('sha256').update(secret).digest('hex'), offset: 0 }));
      asked.push(await ask({ t: 'blob', sha: createHash('sha256').update('export const x = 1;\n').digest('hex'), offset: 0 }));
      rogue.publish(String(call.inbox), json({ t: 'done', worker: 'rogue', host: 'h', ok: true, data: {}, logs: [], intrusions: [], meta: {} }));
    });
    engine = await remoteEngine(project, nats.url);
    expect(await engine.call('note', {})).toMatchObject({ ok: true });
    const paths = ((asked[0]?.entries ?? []) as [string, string, number][]).map(([path]) => path);
    expect(paths).toEqual(['alias.js', 'lib/shared.js', 'note.js', 'note.json']);
    expect(asked[1]).toMatchObject({ error: expect.any(String) });
    expect(asked[1]).not.toHaveProperty('data');
    expect(Buffer.from(String(asked[2]?.data), 'base64').toString()).toBe('export const x = 1;\n');
  });

  it('is never sent what a file listed in the call’s tree was replaced with since: only the listed bytes leave', async () => {
    project = tempProject({ ...tools, 'data.txt': 'listed\n' }, 'arium-remote-');
    writeFileSync(join(project.dir, 'secret.txt'), 'a host file\n');
    const asked: Record<string, unknown>[] = [];
    let swapped: () => void = () => {};
    const swap = new Promise<void>((resolve) => (swapped = resolve));
    await rogueWorker(async (call, ask) => {
      asked.push(await ask({ t: 'tree' }));
      await swap;
      asked.push(await ask({ t: 'blob', sha: createHash('sha256').update('listed\n').digest('hex'), offset: 0 }));
      rogue.publish(String(call.inbox), json({ t: 'done', worker: 'rogue', host: 'h', ok: true, data: {}, logs: [], intrusions: [], meta: {} }));
    });
    engine = await remoteEngine(project, nats.url);
    const running = engine.call('note', {});
    for (let i = 0; i < 100 && asked.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    rmSync(join(project.tools, 'data.txt'));
    symlinkSync(join(project.dir, 'secret.txt'), join(project.tools, 'data.txt'));
    swapped();
    expect(await running).toMatchObject({ ok: true });
    expect(asked[1]).toEqual({ t: 'blob', error: 'the file changed since the call was sent; retry the call' });
  });
});
