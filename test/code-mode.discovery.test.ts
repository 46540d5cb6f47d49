import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { callExported, exportTools } from '../src/surfaces/export.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { createMcpServer } from '../src/surfaces/mcp/server.js';
import { definition, FakeRunner, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * Discovery "search" over the real surfaces: the SDK's MCP client (in process and over Streamable
 * HTTP), the gateway's routes on 127.0.0.1, and the function-calling export. The project has 500
 * generated tools and one that needs net.fetch, which the engine grants and the surfaces' profiles do not.
 */

const KEY = 'sk-discovery-0123456789';
// code.run is offered too: its program reaches only what tools.search would find for the same caller.
const DISCOVERY = ['code.run', 'tools.call', 'tools.describe', 'tools.search'];
const PROFILE = { discovery: 'search', grants: ['vfs.read', 'exec.js'] };

let project: TempProject;
let engine: Engine;
let gateway: Gateway;
let base: string;
const genId = (i: number) => `gen${i}.item-${i % 2 ? 'list' : 'store'}`;
const fake = new FakeRunner({
  'net.exfiltrate': () => ({ sent: true }),
  ...Object.fromEntries(Array.from({ length: 500 }, (_, i) => [genId(i), (ctx: { input: unknown }) => ctx.input])),
});

function files(): Record<string, string> {
  const out: Record<string, string> = { 'tool.js': TRIVIAL_JS };
  for (let i = 0; i < 500; i++) {
    const id = genId(i);
    out[`${id}.json`] = definition({
      id,
      description: `Tool number ${i}: ${i % 2 ? 'lists' : 'stores'} items of kind ${i}`,
      schema: { type: 'object', properties: { [`kind${i}`]: { type: 'string', description: 'which kind' } } },
    });
  }
  out['net.exfiltrate.json'] = definition({
    id: 'net.exfiltrate',
    description: 'Sends items of every kind away',
    permissions: ['exec.js', 'net.fetch'],
  });
  return out;
}

beforeAll(async () => {
  project = tempProject(files());
  writeFileSync(
    join(project.dir, 'arium.json'),
    JSON.stringify({ grants: ['vfs.read', 'vfs.write', 'exec.js', 'net.fetch'], surfaces: { mcp: PROFILE, http: PROFILE } }),
  );
  // A second project whose HTTP profile offers one of its two tools.
  const narrow = join(project.workspace, 'narrow');
  mkdirSync(join(narrow, 'tools'), { recursive: true });
  writeFileSync(join(narrow, 'tools', 'tool.js'), TRIVIAL_JS);
  for (const id of ['notes.shown', 'notes.hidden'])
    writeFileSync(join(narrow, 'tools', `${id}.json`), definition({ id, description: 'Keeps notes' }));
  writeFileSync(join(narrow, 'arium.json'), JSON.stringify({ surfaces: { http: { discovery: 'search', tools: ['notes.shown'] } } }));
  engine = await openEngine(project, { runners: [fake] });
  gateway = await createGateway({
    workspace: project.workspace,
    project: 'p',
    apiKey: KEY,
    inspector: false,
    engineOptions: { runners: [fake], persist: false, watch: false },
  });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
}, 120_000);

afterAll(async () => {
  await gateway?.close();
  await engine?.close();
  project?.remove();
});

async function mcpClient(profile = engine.config.surfaces?.mcp): Promise<Client> {
  const { server } = createMcpServer(engine, profile ? { profile } : {});
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'discovery-test', version: '1' });
  await client.connect(clientSide);
  return client;
}

const structured = (result: CallToolResult) => result.structuredContent as Record<string, unknown>;
const foundIds = (result: CallToolResult) => (structured(result).tools as Array<{ id: string }>).map((t) => t.id);

async function http(method: 'GET' | 'POST', path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('discovery "search" over MCP (the SDK client)', () => {
  it('lists the discovery tools only, a small part of the full list', async () => {
    const client = await mcpClient();
    const listed = await client.listTools();
    expect(listed.tools.map((t) => t.name).sort()).toEqual(DISCOVERY);
    const all = await (await mcpClient({ grants: PROFILE.grants })).listTools();
    expect(all.tools.length).toBeGreaterThan(500);
    expect(JSON.stringify(listed).length * 20).toBeLessThan(JSON.stringify(all).length);
  });

  it('finds, describes and calls the offered tools, and never the one its grants exclude', async () => {
    const client = await mcpClient();
    const found = (await client.callTool({ name: 'tools.search', arguments: { query: 'kind321', limit: 3 } })) as CallToolResult;
    expect(foundIds(found)[0]).toBe('gen321.item-list');
    const every = (await client.callTool({ name: 'tools.search', arguments: { query: 'items every kind away', limit: 50 } })) as CallToolResult;
    expect(foundIds(every)).not.toContain('net.exfiltrate');

    const described = (await client.callTool({ name: 'tools.describe', arguments: { ids: ['net.exfiltrate'] } })) as CallToolResult;
    expect(described.isError).toBe(true);
    expect(JSON.stringify(described.structuredContent)).toContain('UNKNOWN_TOOL');

    const called = (await client.callTool({ name: 'tools.call', arguments: { id: 'net.exfiltrate', input: {} } })) as CallToolResult;
    expect(called.isError).toBe(true);
    expect(fake.started).not.toContain('net.exfiltrate');

    const echoed = (await client.callTool({ name: 'tools.call', arguments: { id: 'gen2.item-store', input: { kind2: 'x' } } })) as CallToolResult;
    expect(echoed.isError).toBeFalsy();
    expect(echoed.structuredContent).toEqual({ kind2: 'x' });
  });

  it('finds nothing outside the profile’s tools patterns', async () => {
    const client = await mcpClient({ discovery: 'search', tools: ['gen1*'], grants: PROFILE.grants });
    const found = (await client.callTool({ name: 'tools.search', arguments: { query: 'gen2 stores items', limit: 50 } })) as CallToolResult;
    expect(foundIds(found).length).toBeGreaterThan(0);
    expect(foundIds(found).every((id) => id.startsWith('gen1') || DISCOVERY.includes(id))).toBe(true);
    const called = (await client.callTool({ name: 'tools.call', arguments: { id: 'gen2.item-store', input: {} } })) as CallToolResult;
    expect(called.isError).toBe(true);
    expect(JSON.stringify(called.structuredContent)).toContain('UNKNOWN_TOOL');
  });

  it('serves the callable tools’ declarations as a resource', async () => {
    const client = await mcpClient();
    const resources = await client.listResources();
    const uri = 'arium://p/code/types';
    expect(resources.resources.map((r) => r.uri)).toContain(uri);
    const read = await client.readResource({ uri });
    const text = (read.contents[0] as { text: string }).text;
    expect(text).toContain('itemList(input:');
    expect(text).not.toContain('exfiltrate');
  });

  it('refuses a profile with an unknown discovery mode, naming the ones there are', () => {
    expect(() => createMcpServer(engine, { profile: { discovery: 'lazy' as 'all' } })).toThrow(
      /"discovery" must be "all" or "search" \(got "lazy"\)/,
    );
  });
});

describe('discovery "search" over HTTP', () => {
  it('GET /v1/tools lists the discovery tools; search and call reach only what the profile grants', async () => {
    const listed = await http('GET', '/v1/tools');
    expect((listed.body.tools as Array<{ id: string }>).map((t) => t.id).sort()).toEqual(DISCOVERY);

    const found = await http('POST', '/v1/tools/tools.search:run', { input: { query: 'items every kind away', limit: 50 } });
    expect(found.status, JSON.stringify(found.body)).toBe(200);
    const ids = (found.body.output as { tools: Array<{ id: string }> }).tools.map((t) => t.id);
    expect(ids.length).toBeGreaterThan(0);
    expect(ids).not.toContain('net.exfiltrate');

    const called = await http('POST', '/v1/tools/tools.call:run', { input: { id: 'net.exfiltrate', input: {} } });
    expect(called.body).toMatchObject({ ok: false, error: { code: 'UNKNOWN_TOOL' } });
    const fine = await http('POST', '/v1/tools/tools.call:run', { input: { id: 'gen4.item-store', input: { kind4: 'y' } } });
    expect(fine.body).toMatchObject({ ok: true, output: { kind4: 'y' } });
    expect(fake.started).not.toContain('net.exfiltrate');
  });

  it('finds nothing outside the HTTP profile’s tools patterns', async () => {
    const found = await http('POST', '/p/narrow/v1/tools/tools.search:run', { input: { query: 'notes', limit: 50 } });
    expect((found.body.output as { tools: Array<{ id: string }> }).tools.map((t) => t.id)).toEqual(['notes.shown']);
    const called = await http('POST', '/p/narrow/v1/tools/tools.call:run', { input: { id: 'notes.hidden', input: {} } });
    expect(called.body).toMatchObject({ ok: false, error: { code: 'UNKNOWN_TOOL' } });
  });

  it('lists the discovery tools to an MCP client over Streamable HTTP', async () => {
    const client = new Client({ name: 'discovery-http', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } }));
    try {
      expect((await client.listTools()).tools.map((t) => t.name).sort()).toEqual(DISCOVERY);
      const found = (await client.callTool({ name: 'tools.search', arguments: { query: 'gen77', limit: 1 } })) as CallToolResult;
      expect(foundIds(found)).toEqual(['gen77.item-list']);
    } finally {
      await client.close();
    }
  });
});

describe('discovery "search" in the function-calling export', () => {
  it('exports the discovery tools only, and calls an exported tools.call through to its target', async () => {
    const exported = exportTools(engine.tools(), 'openai', { discovery: 'search' });
    expect(Object.values(exported.names).sort()).toEqual(DISCOVERY);
    const full = exportTools(engine.tools(), 'openai');
    expect(full.tools.length).toBeGreaterThan(500);
    const result = await callExported(engine, exported, 'tools__call', JSON.stringify({ id: 'gen6.item-store', input: { kind6: 'z' } }), {
      grants: PROFILE.grants,
    });
    expect(result).toMatchObject({ ok: true, data: { kind6: 'z' } });
    expect(() => exportTools(engine.tools(), 'openai', { discovery: 'some' as 'all' })).toThrow(/"discovery" must be "all" or "search"/);
  });
});

describe('arium tools --discovery', () => {
  it('exports the discovery tools only, and refuses a mode that is none', async () => {
    const { parseJson, runCli } = await import('./cli.helpers.js');
    const args = ['tools', '--workspace', project.workspace, '--project', 'narrow', '--format', 'anthropic'];
    const exported = parseJson(await runCli(project.workspace, [...args, '--discovery', 'search']));
    expect(exported.tools.map((t: { name: string }) => t.name).sort()).toEqual(['code__run', 'tools__call', 'tools__describe', 'tools__search']);
    const all = parseJson(await runCli(project.workspace, args));
    expect(all.tools.length).toBeGreaterThan(3);
    const bad = await runCli(project.workspace, [...args, '--discovery', 'lazy']);
    expect(bad.code).not.toBe(0);
    expect(bad.err).toContain('Option --discovery takes all or search (got "lazy")');
  });
});
