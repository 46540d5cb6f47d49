import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
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
