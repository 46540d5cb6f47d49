import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGateway } from '../src/surfaces/http/gateway.js';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';

/** `arium call` on a tool an approvals rule matches: asked at a terminal, denied without one, or --approve. */

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
  writeFileSync(
    join(ws.workspace, 'p', 'arium.json'),
    JSON.stringify({ audit_log: true, approvals: { rules: [{ tool: 'fs.write', when: { path: { prefix: '/etc/' } } }], timeout_ms: 60_000 } }),
  );
});
afterEach(() => ws.cleanup());

const cli = (args: string[], options?: Parameters<typeof runCli>[2]) => runCli(ws.root, args, options);
const P = ['--workspace', 'ws', '--project', 'p'];
const WRITE = ['call', 'fs.write', '{"path":"/etc/motd","content":"hi"}', ...P];
const exists = async () => (await cli(['call', 'fs.stat', '{"path":"/etc/motd"}', ...P, '--json'])).code === 0;

describe('arium call and approvals', () => {
  it('without a terminal, fails as APPROVAL_DENIED saying how to approve, and writes nothing', async () => {
    const run = await cli([...WRITE, '--json']);
    expect(run.code).toBe(1);
    const { error } = parseJson(run);
    expect(error).toMatchObject({ code: 'APPROVAL_DENIED', stage: 'permission' });
    expect(error.message).toContain('approval is required');
    expect(error.message).toContain('--approve');
    expect(await exists()).toBe(false);
  });

  it('--approve runs the call, recorded as approved by the OS user', async () => {
    const run = await cli([...WRITE, '--approve', '--json']);
    expect(run.code).toBe(0);
    expect(await exists()).toBe(true);
    const events = await cli(['events', ...P, '--json']);
    expect(events.out).toContain('"ApprovalResolved"');
    expect(events.out).toContain('"by":"tester"');
  });

  it('at a terminal asks "Approve <tool> with input …? [y/N]" and does what the answer says', async () => {
    const no = await cli(WRITE, { answer: () => 'n' });
    expect(no.err).toContain('Approve fs.write with input {"path":"/etc/motd","content":"hi"');
    expect(no.err).toContain('[y/N]');
    expect(no.code).toBe(1);
    expect(no.out + no.err).toContain('APPROVAL_DENIED');
    expect(await exists()).toBe(false);
    const yes = await cli(WRITE, { answer: () => 'y' });
    expect(yes.code).toBe(0);
    expect(await exists()).toBe(true);
  });

  it('asks nothing for a call no rule matches', async () => {
    const questions: string[] = [];
    const run = await cli(['call', 'fs.write', '{"path":"/home/a","content":"x"}', ...P], {
      answer: (q) => {
        questions.push(q);
        return 'n';
      },
    });
    expect(run.code).toBe(0);
    expect(questions).toEqual([]);
  });
});

describe('arium approvals / approve / deny, through a running gateway', () => {
  it('lists a waiting call and answers it; a second answer and an unknown id fail with the reason', async () => {
    const gateway = await createGateway({ workspace: ws.workspace, project: 'p', inspector: false, engineOptions: { persist: false, watch: false } });
    try {
      const addr = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
      const A = ['--project', 'p', '--addr', addr];
      const run = fetch(`${addr}/v1/tools/fs.write:run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: { path: '/etc/hosts', content: 'x' } }),
      }).then((r) => r.json());
      let listed = parseJson(await cli(['approvals', ...A, '--json']));
      while (listed.approvals.length === 0) {
        await new Promise((r) => setTimeout(r, 10));
        listed = parseJson(await cli(['approvals', ...A, '--json']));
      }
      const runId = listed.approvals[0].run_id as string;
      const people = await cli(['approvals', ...A]);
      expect(people.out).toContain(runId);
      expect(people.out).toContain('fs.write');

      const denied = await cli(['deny', runId, '--reason', 'not hosts', ...A]);
      expect(denied.code).toBe(0);
      expect(denied.out).toContain(`denied fs.write run ${runId} (by tester)`);
      expect(await run).toMatchObject({ ok: false, error: { code: 'APPROVAL_DENIED', details: { by: 'tester', reason: 'not hosts' } } });

      const again = await cli(['approve', runId, ...A]);
      expect(again.code).toBe(1);
      expect(again.err).toContain('ALREADY_RESOLVED');
      expect(again.err).toContain('denied by tester');
      const unknown = await cli(['approve', 'no-such-run', ...A]);
      expect(unknown.code).toBe(1);
      expect(unknown.err).toContain('NOT_FOUND');
    } finally {
      await gateway.close();
    }
  });

  it('says how to start a gateway when none is running', async () => {
    const run = await cli(['approvals', ...P, '--addr-file', join(ws.root, 'none.addr')]);
    expect(run.code).toBe(3);
    expect(run.err).toContain('No running `arium serve` found');
    expect((await cli(['approve', ...P])).err).toContain('needs the run id');
  });
});

describe('arium snapshot and arium restore and approvals', () => {
  const rules = (tools: string[]) =>
    writeFileSync(join(ws.workspace, 'p', 'arium.json'), JSON.stringify({ audit_log: true, approvals: { rules: tools.map((tool) => ({ tool })) } }));
  const content = async () => parseJson(await cli(['call', 'fs.read', '{"path":"/doc.txt"}', ...P, '--json'])).data.content;

  it('a restore waits for approval as a call does: denied without a terminal, done with --approve, in the events', async () => {
    await cli(['call', 'fs.write', '{"path":"/doc.txt","content":"one"}', ...P]);
    expect((await cli(['snapshot', '--label', 'v1', ...P])).code).toBe(0);
    await cli(['call', 'fs.write', '{"path":"/doc.txt","content":"two"}', ...P]);
    rules(['vfs.restore', 'vfs.snapshot']);

    const refused = await cli(['restore', 'v1', ...P, '--json']);
    expect(refused.code).toBe(1);
    expect(parseJson(refused).error).toMatchObject({ code: 'APPROVAL_DENIED' });
    expect(parseJson(refused).error.message).toContain('--approve');
    expect(await content()).toBe('two');
    expect((await cli(['snapshot', '--label', 'v2', ...P, '--json'])).code).toBe(1);

    const asked = await cli(['restore', 'v1', ...P], { answer: () => 'n' });
    expect(asked.err).toContain('Approve vfs.restore with input {"snapshot":"v1"}');
    expect(await content()).toBe('two');

    const restored = await cli(['restore', 'v1', ...P, '--approve']);
    expect(restored.code).toBe(0);
    expect(restored.out).toContain('undoes this');
    expect(await content()).toBe('one');
    const events = (await cli(['events', ...P, '--json'])).out;
    expect(events).toMatch(/"type":"ApprovalResolved"[^\n]*"tool":"vfs.restore"|"tool":"vfs.restore"[^\n]*"type":"ApprovalResolved"/);
    expect(events).toContain('"by":"tester"');
  });
});
