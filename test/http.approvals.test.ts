import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type CallToolResult, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { type TempProject, tempProject } from './support/project.js';

/** Approvals over HTTP: the list, the answers, the run that waits for them, and the event stream. */

const KEY = 'sk-approvals-0123456789';
const AUTH = { authorization: `Bearer ${KEY}` };

let project: TempProject;
let gateway: Gateway;
let base: string;

beforeAll(async () => {
  project = tempProject();
  writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ approvals: { rules: [{ tool: 'fs.delete' }], timeout_ms: 60_000 } }));
  // Another project of the workspace, with the same rule: its approvals are its own.
  mkdirSync(join(project.workspace, 'other', 'tools'), { recursive: true });
  writeFileSync(join(project.workspace, 'other', 'arium.json'), JSON.stringify({ approvals: { rules: [{ tool: 'fs.delete' }] } }));
  // A project whose HTTP profile offers only fs.read: its fs.delete approvals are not HTTP's to see or answer.
  mkdirSync(join(project.workspace, 'narrow', 'tools'), { recursive: true });
  writeFileSync(
    join(project.workspace, 'narrow', 'arium.json'),
    JSON.stringify({ approvals: { rules: [{ tool: 'fs.delete' }] }, surfaces: { http: { tools: ['fs.read'] } } }),
  );
  // A project whose snapshots and restores need approval, with an audit log.
  mkdirSync(join(project.workspace, 'history', 'tools'), { recursive: true });
  writeFileSync(
    join(project.workspace, 'history', 'arium.json'),
    JSON.stringify({ approvals: { rules: [{ tool: 'vfs.restore' }, { tool: 'vfs.snapshot' }] }, audit_log: true }),
  );
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    apiKey: KEY,
    inspector: false,
    engineOptions: { persist: false, watch: false },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  // Opens the default project's engine, so that tests can seed its VFS.
  await json('GET', '/v1/approvals');
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

async function json(method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = AUTH) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> & { approvals?: Array<Record<string, unknown>> } };
}

async function pendingRun(path = ''): Promise<string> {
  for (let i = 0; i < 500; i++) {
    const { body } = await json('GET', `${path}/v1/approvals`);
    const first = body.approvals?.[0];
    if (first) return first.run_id as string;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('no approval became pending');
}

describe('approvals over HTTP', () => {
  it('neither lists nor answers an approval of a tool the HTTP profile does not offer', async () => {
    await json('GET', '/p/narrow/v1/approvals');
    const engine = gateway.engines().get('narrow');
    const call = engine?.call('fs.delete', { path: '/x' });
    expect(engine?.approvals()).toHaveLength(1);
    const runId = engine?.approvals()[0]?.run_id as string;
    expect((await json('GET', '/p/narrow/v1/approvals')).body.approvals).toEqual([]);
    expect((await json('POST', `/p/narrow/v1/approvals/${runId}`, { decision: 'approve', by: 'x' })).status).toBe(404);
    expect(engine?.approvals()).toHaveLength(1);
    engine?.deny(runId, { by: 'host' });
    expect((await call)?.ok).toBe(false);
  });

  it('lists a waiting run, approves it, and the run answers; a second answer is 409 naming the first', async () => {
    const engine = gateway.engines().get('p');
    engine?.vfs.write('/a.txt', 'a');
    const run = json('POST', '/v1/tools/fs.delete:run', { input: { path: '/a.txt' } });
    const runId = await pendingRun();
    const listed = (await json('GET', '/v1/approvals')).body.approvals?.[0];
    expect(listed).toMatchObject({ run_id: runId, tool: 'fs.delete', input: { path: '/a.txt' } });
    expect(listed?.caller).toMatch(/^http:/);

    const approved = await json('POST', `/v1/approvals/${runId}`, { decision: 'approve', by: 'ops' });
    expect(approved).toMatchObject({ status: 200, body: { run_id: runId, outcome: 'approved', by: 'ops' } });
    expect(await run).toMatchObject({ status: 200, body: { ok: true, tool_run_id: runId } });

    const late = await json('POST', `/v1/approvals/${runId}`, { decision: 'deny', by: 'late', reason: 'too late' });
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({ ok: false, error: { code: 'ALREADY_RESOLVED', retryable: false } });
    expect((late.body.error as { message: string }).message).toContain('approved by ops');
  });

  it('a denied run is 403 APPROVAL_DENIED with the reason, and the event stream carries both approval events', async () => {
    const stream = await openEvents(`${base}/v1/events`);
    try {
      const engine = gateway.engines().get('p');
      engine?.vfs.write('/b.txt', 'b');
      const run = json('POST', '/v1/tools/fs.delete:run', { input: { path: '/b.txt' } });
      const runId = await pendingRun();
      expect((await json('POST', `/v1/approvals/${runId}`, { decision: 'deny', by: 'sec', reason: 'keep it' })).status).toBe(200);
      const done = await run;
      expect(done.status).toBe(403);
      expect(done.body).toMatchObject({
        ok: false,
        error: { code: 'APPROVAL_DENIED', stage: 'permission', details: { by: 'sec', reason: 'keep it' } },
      });
      expect(engine?.vfs.read('/b.txt').toString()).toBe('b');
      await waitFor(() => stream.events.some((e) => e.event === 'ApprovalResolved' && e.data.includes(runId)));
      const mine = stream.events.filter((e) => e.data.includes(runId)).map((e) => e.event);
      expect(mine).toContain('ApprovalRequested');
      expect(mine).toContain('ApprovalResolved');
      expect(mine.indexOf('ApprovalRequested')).toBeLessThan(mine.indexOf('ApprovalResolved'));
    } finally {
      stream.close();
    }
  });

  it('an unknown run id is 404; a bad answer is 400; no key is 401', async () => {
    const unknown = await json('POST', '/v1/approvals/nope', { decision: 'approve', by: 'x' });
    expect(unknown).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
    expect((await json('POST', '/v1/approvals/nope', { decision: 'maybe', by: 'x' })).status).toBe(400);
    expect((await json('POST', '/v1/approvals/nope', { decision: 'approve' })).status).toBe(400);
    expect((await json('POST', '/v1/approvals/nope', { decision: 'approve', by: '' })).status).toBe(400);
    expect((await json('GET', '/v1/approvals', undefined, {})).status).toBe(401);
    expect((await json('POST', '/v1/approvals/nope', { decision: 'approve', by: 'x' }, {})).status).toBe(401);
  });

  it('keeps each project’s approvals to its own routes', async () => {
    const run = json('POST', '/p/other/v1/tools/fs.delete:run', { input: { path: '/none' } });
    const runId = await pendingRun('/p/other');
    expect((await json('GET', '/v1/approvals')).body.approvals).toEqual([]);
    expect((await json('POST', `/v1/approvals/${runId}`, { decision: 'approve', by: 'x' })).status).toBe(404);
    expect((await json('POST', `/p/other/v1/approvals/${runId}`, { decision: 'approve', by: 'x' })).status).toBe(200);
    expect((await run).body).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
  });
});

describe('the routes that change state wait for approval as calls do', () => {
  it('POST /v1/snapshots and POST /v1/restore wait, are listed, change nothing until approved, and are in the events and the audit log', async () => {
    await json('GET', '/p/history/v1/approvals');
    const engine = gateway.engines().get('history');
    engine?.vfs.write('/h.txt', 'before');
    const stream = await openEvents(`${base}/p/history/v1/events`);
    try {
      const taking = json('POST', '/p/history/v1/snapshots', { label: 'saved' });
      const snapshotRun = await pendingRun('/p/history');
      expect((await json('GET', '/p/history/v1/approvals')).body.approvals?.[0]).toMatchObject({ tool: 'vfs.snapshot', input: { label: 'saved' } });
      expect(engine?.snapshots()).toEqual([]);
      expect((await json('POST', `/p/history/v1/approvals/${snapshotRun}`, { decision: 'approve', by: 'ops' })).status).toBe(200);
      const taken = await taking;
      expect(taken).toMatchObject({ status: 201, body: { label: 'saved' } });

      engine?.vfs.write('/h.txt', 'after');
      const restoring = json('POST', '/p/history/v1/restore', { ref: 'saved' });
      const restoreRun = await pendingRun('/p/history');
      expect(engine?.vfs.read('/h.txt').toString()).toBe('after');
      expect((await json('POST', `/p/history/v1/approvals/${restoreRun}`, { decision: 'deny', by: 'sec', reason: 'no' })).status).toBe(200);
      expect(await restoring).toMatchObject({ status: 403, body: { ok: false, error: { code: 'APPROVAL_DENIED' } } });
      expect(engine?.vfs.read('/h.txt').toString()).toBe('after');

      const again = json('POST', '/p/history/v1/restore', { ref: 'saved' });
      const againRun = await pendingRun('/p/history');
      expect((await json('POST', `/p/history/v1/approvals/${againRun}`, { decision: 'approve', by: 'ops' })).status).toBe(200);
      expect(await again).toMatchObject({ status: 200, body: { restored: { label: 'saved' } } });
      expect(engine?.vfs.read('/h.txt').toString()).toBe('before');

      await waitFor(() => stream.events.some((e) => e.event === 'ToolResultEvent' && e.data.includes(againRun)));
      for (const runId of [snapshotRun, restoreRun, againRun]) {
        const mine = stream.events.filter((e) => e.data.includes(runId)).map((e) => e.event);
        expect(mine).toEqual(expect.arrayContaining(['ToolInvocationEvent', 'ApprovalRequested', 'ApprovalResolved']));
      }
      const audit = readFileSync(join(project.workspace, 'history', '.arium', 'audit.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { type: string; run_id: string; tool: string; caller?: string });
      for (const runId of [snapshotRun, restoreRun, againRun]) {
        expect(audit.filter((e) => e.run_id === runId).map((e) => e.type)).toEqual(
          expect.arrayContaining(['ToolInvocationEvent', 'ApprovalRequested', 'ApprovalResolved']),
        );
      }
      expect(audit.find((e) => e.run_id === againRun && e.type === 'ToolInvocationEvent')).toMatchObject({
        tool: 'vfs.restore',
        caller: expect.stringMatching(/^http:/),
      });
    } finally {
      stream.close();
    }
  });
});

describe('approvals over MCP at /mcp', () => {
  const connect = async (elicit: boolean) => {
    const client = new Client({ name: elicit ? 'asker' : 'plain', version: '1' }, elicit ? { capabilities: { elicitation: {} } } : {});
    if (elicit) client.setRequestHandler(ElicitRequestSchema, () => ({ action: 'accept', content: { decision: 'approve' } }));
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: AUTH } }));
    return client;
  };

  it('asks a client with elicitation on the call’s own stream, and the call runs', async () => {
    gateway.engines().get('p')?.vfs.write('/m.txt', 'm');
    const client = await connect(true);
    try {
      const result = (await client.callTool({ name: 'fs.delete', arguments: { path: '/m.txt' } })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect(gateway.engines().get('p')?.vfs.exists('/m.txt')).toBe(false);
    } finally {
      await client.close();
    }
  });

  it('tells a client without elicitation that the call waits, and POST /v1/approvals lets it run', async () => {
    const engine = gateway.engines().get('p');
    engine?.vfs.write('/n.txt', 'n');
    const client = await connect(false);
    try {
      const result = (await client.callTool({ name: 'fs.delete', arguments: { path: '/n.txt' } })) as CallToolResult;
      expect(result.isError).toBe(true);
      const runId = (result.structuredContent as { approval: { run_id: string } }).approval.run_id;
      expect((result.content[0] as { text: string }).text).toContain(`POST /v1/approvals/${runId}`);
      expect(engine?.vfs.exists('/n.txt')).toBe(true);
      const ran = new Promise<void>((resolve) =>
        engine?.events.on('result', (e) => {
          if (e.run_id === runId) resolve();
        }),
      );
      expect((await json('POST', `/v1/approvals/${runId}`, { decision: 'approve', by: 'ops' })).status).toBe(200);
      await ran;
      expect(engine?.vfs.exists('/n.txt')).toBe(false);
    } finally {
      await client.close();
    }
  });
});

interface Sse {
  events: Array<{ id: number; event: string; data: string }>;
  close: () => void;
}

function openEvents(url: string): Promise<Sse> {
  return new Promise((resolve, reject) => {
    const events: Sse['events'] = [];
    const req = httpRequest(url, { headers: { accept: 'text/event-stream', ...AUTH } }, (res) => {
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end = buffer.indexOf('\n\n');
        while (end !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = Object.fromEntries(
            block
              .split('\n')
              .filter((l) => !l.startsWith(':') && l.includes(':'))
              .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trimStart()]),
          );
          if (fields.event) events.push({ id: Number(fields.id ?? Number.NaN), event: fields.event, data: fields.data ?? '' });
          end = buffer.indexOf('\n\n');
        }
      });
      resolve({ events, close: () => req.destroy() });
    });
    req.on('error', (error) => {
      if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(error);
    });
    req.end();
  });
}

async function waitFor(condition: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
