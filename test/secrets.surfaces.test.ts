import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine.js';
import type { EngineEvent } from '../src/events.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * Secrets where the surfaces show what a call or a file holds: the input a call waits for approval
 * with (engine.approvals(), GET /v1/approvals, the MCP elicitation), the names of files, a file's text
 * cut at 1 MiB, a patch cut at its limit, and an event's input cut at event_payload_bytes. A cut that
 * goes through a value must not leave its first characters.
 */

const VALUE = 'ghp_S3cretValue/with+odd=chars';
/** The first characters of the value: what a cut through it, scrubbed after the cut, would leave. */
const START = VALUE.slice(0, 6);
const NAME = 'FileNameSecret99';
const MiB = 1024 * 1024;

let project: TempProject;
let gateway: Gateway;
let base: string;
let engine: Engine;
const events: EngineEvent[] = [];

beforeAll(async () => {
  project = tempProject({
    'tool.js': TRIVIAL_JS,
    'use.json': definition({ id: 'use.token', permissions: ['exec.js', 'secret.read:github'] }),
  });
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    inspector: false,
    engineOptions: {
      persist: false,
      watch: false,
      changeLog: true,
      secrets: { github: VALUE, fname: NAME },
      grants: ['vfs.read', 'vfs.write', 'exec.js', 'secret.read:github'],
      approvals: { rules: [{ tool: 'use.token' }], timeout_ms: 60_000 },
    },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  await fetch(`${base}/v1/project`);
  engine = gateway.engines().get(project.project) as Engine;
  engine.events.on('event', (event) => events.push(event));
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

async function get(path: string): Promise<{ status: number; text: string; json: () => Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`);
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

async function pending(): Promise<string> {
  for (let i = 0; i < 500; i++) {
    const first = engine.approvals()[0];
    if (first) return first.run_id;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('no approval became pending');
}

/**
 * An input with the secret by reference, and typed out at the end of a string the event size cuts:
 * the budget of 4096 characters ends inside the value.
 */
const INPUT = { word: { $secret: 'github' }, note: `${'a'.repeat(4070)}${VALUE}` };

describe('secrets in what waits for approval', () => {
  it('engine.approvals(), GET /v1/approvals and the events show [secret:NAME], never the value or its start', async () => {
    events.length = 0;
    const call = engine.call('use.token', INPUT, { caller: 'test' });
    const runId = await pending();
    const listed = JSON.stringify(engine.approvals());
    expect(listed).toContain('[secret:github]');
    expect(listed).not.toContain(START);
    const answer = await get('/v1/approvals');
    expect(answer.text).toContain('[secret:github]');
    expect(answer.text).not.toContain(START);
    engine.deny(runId, { by: 'test' });
    expect((await call).ok).toBe(false);
    expect(events.map((e) => e.type)).toContain('ApprovalRequested');
    expect(JSON.stringify(events)).not.toContain(START);
  });

  it('the MCP elicitation sent to the calling agent shows [secret:NAME], never the value', async () => {
    const client = new Client({ name: 'asker', version: '1' }, { capabilities: { elicitation: {} } });
    const messages: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, (request) => {
      messages.push(request.params.message);
      return { action: 'accept', content: { decision: 'deny', reason: 'no' } };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    try {
      const result = await client.callTool({ name: 'use.token', arguments: INPUT });
      expect(result.isError).toBe(true);
      expect(messages).toHaveLength(1);
      expect(messages[0]).toContain('[secret:github]');
      expect(messages[0]).not.toContain(START);
    } finally {
      await client.close();
    }
  });
});

describe('secrets in the file views', () => {
  it('/v1/fs/list and /v1/fs/read scrub a file name made of a secret', async () => {
    engine.vfs.write(`/names/${NAME}.txt`, 'x');
    const listed = await get('/v1/fs/list?path=/names');
    expect(listed.status).toBe(200);
    expect(listed.text).toContain('[secret:fname].txt');
    expect(listed.text).not.toContain(NAME);
    const read = await get(`/v1/fs/read?path=/names/${NAME}.txt`);
    expect(read.status).toBe(200);
    expect(read.text).not.toContain(NAME);
  });

  it('/v1/fs/read of a text over 1 MiB cut inside a secret shows none of it', async () => {
    engine.vfs.write('/big.txt', `${'a'.repeat(MiB - 10)}${VALUE}tail`);
    const read = (await get('/v1/fs/read?path=/big.txt')).json();
    expect(read).toMatchObject({ truncated: true, binary: false, size: MiB + VALUE.length - 6 });
    const text = read.text as string;
    expect(text).not.toContain(START);
    expect(text.endsWith('a')).toBe(true);
  });

  it('a patch cut at its limit inside a secret shows none of it (vfs.diff over HTTP)', async () => {
    // The patch of a new one-line file: its header, then "+" and the line; cut at 256 Ki characters.
    const header = '--- /dev/null\n+++ b/cut.txt\n@@ -0,0 +1,1 @@\n+';
    const line = `${'b'.repeat(256 * 1024 - header.length - 10)}${VALUE}`;
    expect((await engine.call('fs.write', { path: '/cut.txt', content: `${line}\n` })).ok).toBe(true);
    const res = await fetch(`${base}/v1/tools/vfs.diff:run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: { path: '/cut.txt' } }),
    });
    const found = ((await res.json()) as { output: { files: Array<{ patch: string }> } }).output;
    const patch = found.files[0]?.patch as string;
    expect(patch).toMatch(/diff cut at \d+ characters$/);
    expect(patch).not.toContain(START);
  });
});
