import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { type CallToolResult, ElicitRequestSchema, type ElicitResult } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Engine, EngineEvent } from '../src/index.js';
import { createMcpServer, type McpServerOptions } from '../src/surfaces/mcp/server.js';
import { nextEvent, openEngine, recordEvents, type TempProject, tempProject } from './support/project.js';

/** Approvals through MCP, with the SDK's own client: asked by elicitation, or told how to answer. */

let project: TempProject;
let engine: Engine;
const closers: Array<() => Promise<void>> = [];

beforeEach(async () => {
  project = tempProject();
  engine = await openEngine(project, { approvals: { rules: [{ tool: 'fs.delete' }], timeout_ms: 60_000 } });
  engine.vfs.write('/a.txt', 'a');
});

afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  await engine.close();
  project.remove();
});

/** A client connected in-process; with `answer`, it declares elicitation and answers each request so. */
async function connect(serverOptions: McpServerOptions, answer?: (message: string) => ElicitResult): Promise<{ client: Client; asked: string[] }> {
  const { server, detach } = createMcpServer(engine, serverOptions);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'approver', version: '1.0.0' }, answer ? { capabilities: { elicitation: {} } } : {});
  const asked: string[] = [];
  if (answer) {
    client.setRequestHandler(ElicitRequestSchema, (request) => {
      asked.push(request.params.message);
      return answer(request.params.message);
    });
  }
  await client.connect(clientSide);
  closers.push(async () => {
    detach();
    await client.close();
  });
  return { client, asked };
}

const text = (result: CallToolResult) => (result.content[0] as { text: string }).text;
const call = (client: Client) => client.callTool({ name: 'fs.delete', arguments: { path: '/a.txt' } }) as Promise<CallToolResult>;

describe('MCP approvals', () => {
  it('asks a client with elicitation, and runs the call when it approves', async () => {
    const events = recordEvents(engine);
    const { client, asked } = await connect({}, () => ({ action: 'accept', content: { decision: 'approve' } }));
    const result = await call(client);
    expect(result.isError).toBeFalsy();
    expect(asked).toHaveLength(1);
    expect(asked[0]).toContain('Approve fs.delete with input {"path":"/a.txt"');
    expect(engine.vfs.exists('/a.txt')).toBe(false);
    const resolved = events.find((e): e is Extract<EngineEvent, { type: 'ApprovalResolved' }> => e.type === 'ApprovalResolved');
    expect(resolved).toMatchObject({ outcome: 'approved', by: 'mcp:approver' });
  });

  it('ends the call as APPROVAL_DENIED when the elicited answer is deny, or the user declines', async () => {
    const answers: ElicitResult[] = [{ action: 'accept', content: { decision: 'deny', reason: 'not that file' } }, { action: 'decline' }];
    const { client } = await connect({}, () => answers.shift() as ElicitResult);
    const denied = await call(client);
    expect(denied.isError).toBe(true);
    expect(text(denied)).toContain('APPROVAL_DENIED');
    expect(text(denied)).toContain('not that file');
    const declined = await call(client);
    expect(text(declined)).toContain('the client answered decline');
    expect(engine.vfs.read('/a.txt').toString()).toBe('a');
  });

  it('tells a client without elicitation that approval is pending and how to give it, and the call waits on (gateway)', async () => {
    const { client } = await connect({ pendingApprovals: 'wait' });
    const result = await call(client);
    expect(result.isError).toBe(true);
    const [pending] = engine.approvals();
    expect(pending).toBeDefined();
    const runId = pending?.run_id as string;
    expect(text(result)).toContain(`run ${runId}`);
    expect(text(result)).toContain(`POST /v1/approvals/${runId}`);
    expect(text(result)).toContain(`arium approve ${runId}`);
    expect(result.structuredContent).toMatchObject({ approval: { status: 'pending', run_id: runId, tool: 'fs.delete' } });
    expect(engine.vfs.exists('/a.txt')).toBe(true);
    const ran = nextEvent(engine, 'result', (e) => e.run_id === runId);
    engine.approve(runId, { by: 'ops' });
    await ran;
    expect(engine.vfs.exists('/a.txt')).toBe(false);
  });

  it('denies at once, saying why, for a client without elicitation where nothing else can answer (stdio)', async () => {
    const { client } = await connect({});
    const result = await call(client);
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ error: { code: 'APPROVAL_DENIED', stage: 'permission' } });
    expect(text(result)).toContain('no elicitation capability');
    expect(engine.approvals()).toEqual([]);
    expect(engine.vfs.exists('/a.txt')).toBe(true);
  });

  it('calls no rule matches run as before, with or without elicitation', async () => {
    const { client, asked } = await connect({}, () => ({ action: 'accept', content: { decision: 'deny' } }));
    const result = (await client.callTool({ name: 'fs.read', arguments: { path: '/a.txt' } })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    expect(asked).toEqual([]);
  });
});
