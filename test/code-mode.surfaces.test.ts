import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CODE_RUN_TOOL } from '../runners/code/tool.js';
import { exportTools } from '../src/surfaces/export.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { type TempProject, tempProject } from './support/project.js';

// code.run over the gateway on a real socket: HTTP runs and MCP over Streamable HTTP, each with the
// surface's profile (its tools and grants), which bounds what a program may call.

let project: TempProject;
let gateway: Gateway;
let base: string;

const PROFILE = { tools: ['code.run', 'fs.read', 'fs.list', 'fs.write'], grants: ['exec.js', 'vfs.read', 'vfs.write:/out/**'] };

beforeAll(async () => {
  project = tempProject({});
  writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ surfaces: { http: PROFILE, mcp: PROFILE } }));
  gateway = await createGateway({ workspace: project.workspace, project: project.project, engineOptions: { persist: false, watch: false } });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
});

const PROGRAM = `
  await tools.fs.write({ path: '/out/report.txt', content: 'report' });
  const outcome = {};
  for (const [name, call] of [
    ['outside', () => tools.fs.write({ path: '/elsewhere.txt', content: 'x' })],
    ['notOffered', () => tools.fs.delete({ path: '/out/report.txt' })],
  ]) { try { await call(); outcome[name] = 'ran'; } catch (error) { outcome[name] = error.code + ': ' + error.message; } }
  outcome.read = (await tools.fs.read({ path: '/out/report.txt' })).content;
  return outcome;`;

async function runOver(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe('code.run on the surfaces', () => {
  it('runs over HTTP with the profile’s grants, and calls only the tools the profile offers', async () => {
    const { status, json } = await runOver('/v1/tools/code.run:run', { input: { code: PROGRAM }, trace_id: 'http-program' });
    expect(status).toBe(200);
    expect(json).toMatchObject({ ok: true, tool_id: 'code.run', meta: { trace_id: 'http-program' } });
    const output = json.output as Record<string, string>;
    expect(output.read).toBe('report');
    expect(output.outside).toMatch(/^DENIED: /);
    expect(output.notOffered).toMatch(/^DENIED: fs\.delete cannot be called from a code\.run program: the surface/);
  });

  it('is listed and called over MCP', async () => {
    const client = new Client({ name: 'code-mode-test', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    try {
      const listed = (await client.listTools()).tools.find((t) => t.name === 'code.run');
      expect(listed?.inputSchema).toMatchObject({ type: 'object', required: ['code'] });
      // A client may skip asking for a read-only tool: code.run, which may call any tool, claims nothing.
      expect(listed?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true, openWorldHint: true });
      const result = (await client.callTool({ name: 'code.run', arguments: { code: PROGRAM } })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect(result.structuredContent).toMatchObject({
        read: 'report',
        outside: expect.stringMatching(/^DENIED/),
        notOffered: expect.stringMatching(/^DENIED/),
      });
    } finally {
      await client.close();
    }
  });

  it('is exported for every model API as it is, strict mode included', () => {
    const tool = CODE_RUN_TOOL.spec;
    for (const vendor of ['openai', 'anthropic', 'gemini', 'mcp'] as const) {
      for (const strict of vendor === 'openai' ? [false, true] : [false]) {
        const exported = exportTools([{ ...tool, source: 'builtin' }], vendor, { strict });
        expect(exported.problems, `${vendor}${strict ? ' strict' : ''}`).toEqual([]);
        expect(exported.names).toEqual({ [vendor === 'mcp' ? 'code.run' : 'code__run']: 'code.run' });
      }
    }
  });
});
