import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { PromptListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';
import { REVIEW, writeSkill } from './support/skills.js';

/**
 * Skills over the real surfaces: the gateway on 127.0.0.1, MCP prompts through the SDK's own client
 * over Streamable HTTP, and the HTTP routes; a profile that does not offer a skill's tool hides it.
 */

let project: TempProject;
let gateway: Gateway;
let base: string;
const clients: Client[] = [];

afterEach(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  clients.length = 0;
  await gateway?.close();
  project?.remove();
});

const NOTES = `---
name: notes
description: Write notes with the builtins only
tools: [fs.write]
---
Write your notes to /notes.md.
`;

async function serve(config: object | null = null, watch = false): Promise<void> {
  project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
  writeSkill(project, 'review', REVIEW);
  writeSkill(project, 'notes', NOTES);
  if (config) writeFileSync(join(project.dir, 'arium.json'), JSON.stringify(config));
  gateway = await createGateway({ workspace: project.workspace, project: project.project, engineOptions: { persist: false, watch, warmUp: false } });
  base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
}

async function mcpClient(): Promise<Client> {
  const client = new Client({ name: 'skills-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  clients.push(client);
  return client;
}

const get = async (path: string) => {
  const response = await fetch(`${base}${path}`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
};

describe('skills as MCP prompts', () => {
  it('are listed with their arguments, and got with the arguments put in', async () => {
    await serve();
    const client = await mcpClient();
    expect(client.getServerCapabilities()?.prompts).toEqual({ listChanged: true });
    const { prompts } = await client.listPrompts();
    expect(prompts).toEqual([
      { name: 'notes', description: 'Write notes with the builtins only', arguments: [] },
      {
        name: 'review',
        description: "Review a change with the project's tools",
        arguments: [
          { name: 'path', description: 'The file to review', required: true },
          { name: 'focus', description: 'What to look at', required: false },
        ],
      },
    ]);
    const got = await client.getPrompt({ name: 'review', arguments: { path: '/a.md', focus: '{{path}}' } });
    expect(got).toEqual({
      description: "Review a change with the project's tools",
      messages: [{ role: 'user', content: { type: 'text', text: 'Read /a.md with fs.read, then echo what you found.\nFocus on: {{path}}.\n' } }],
    });
  });

  it('refuse a missing argument, an unknown one and an unknown prompt as invalid params', async () => {
    await serve();
    const client = await mcpClient();
    await expect(client.getPrompt({ name: 'review', arguments: {} })).rejects.toThrow(/-32602.*needs the argument "path"/);
    await expect(client.getPrompt({ name: 'review', arguments: { path: 'a', x: 'b' } })).rejects.toThrow(/has no argument "x"/);
    await expect(client.getPrompt({ name: 'nope' })).rejects.toThrow(/No prompt "nope" is offered here/);
  });

  it('hide a skill whose tool the profile does not offer, on MCP and HTTP alike', async () => {
    await serve({ surfaces: { mcp: { tools: ['fs.*'] }, http: { tools: ['fs.*'] } } });
    const client = await mcpClient();
    expect((await client.listPrompts()).prompts.map((p) => p.name)).toEqual(['notes']);
    await expect(client.getPrompt({ name: 'review', arguments: { path: 'a' } })).rejects.toThrow(/No prompt "review" is offered here/);
    expect((await get('/v1/skills')).body.skills).toEqual([expect.objectContaining({ name: 'notes' })]);
    const hidden = await get('/v1/skills/review');
    expect(hidden.status).toBe(404);
    expect(hidden.body.error).toMatchObject({ code: 'NOT_FOUND', message: 'No skill "review" is offered here; GET /v1/skills lists them' });
  });

  it('tell the client when the list changes, and serve the new version to a get racing the change', async () => {
    await serve(null, true);
    const client = await mcpClient();
    let changed = 0;
    client.setNotificationHandler(PromptListChangedNotificationSchema, () => {
      changed++;
    });
    // Two whole versions; every answer while the file flips between them must be one of them, never a mix.
    const versions = ['A', 'B'].map((v) => REVIEW.replace('then echo what you found.', `version ${v} ${v.repeat(20_000)}`));
    const rendered = versions.map((v) =>
      v
        .slice(v.indexOf('---\nRead') + 4)
        .replace('{{path}}', '/x')
        .replace('{{ focus }}', ''),
    );
    let writes = 0;
    const writer = (async () => {
      for (; writes < 40; writes++) {
        writeSkill(project, 'review', versions[writes % 2] as string);
        await new Promise((r) => setTimeout(r, 15));
      }
    })();
    const answers: string[] = [];
    while (writes < 40) {
      const batch = await Promise.all(
        Array.from({ length: 4 }, () => client.getPrompt({ name: 'review', arguments: { path: '/x' } }).catch((e: Error) => e.message)),
      );
      for (const answer of batch)
        answers.push(typeof answer === 'string' ? answer : String((answer.messages[0]?.content as { text?: string } | undefined)?.text));
    }
    await writer;
    expect(answers.length).toBeGreaterThan(8);
    const original = 'Read /x with fs.read, then echo what you found.\nFocus on: .\n';
    for (const answer of answers) expect([original, ...rendered]).toContain(answer);
    await expect.poll(() => changed, { timeout: 5000 }).toBeGreaterThan(0);
  });
});

describe('skills over MCP stdio (arium mcp, from the build)', () => {
  it('are listed and got as prompts, and a profile hides a skill whose tool it does not offer', async () => {
    project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) });
    writeSkill(project, 'review', REVIEW);
    writeSkill(project, 'notes', NOTES);
    const connectStdio = async () => {
      const client = new Client({ name: 'skills-stdio', version: '1.0.0' });
      await client.connect(
        new StdioClientTransport({
          command: process.execPath,
          args: [
            join(import.meta.dirname, '..', 'bin', 'arium.js'),
            '--workspace',
            project.workspace,
            '--project',
            project.project,
            'mcp',
            '--no-daemon',
          ],
          env: { PATH: process.env.PATH ?? '' },
        }),
      );
      clients.push(client);
      return client;
    };
    const client = await connectStdio();
    expect((await client.listPrompts()).prompts.map((p) => p.name)).toEqual(['notes', 'review']);
    const got = await client.getPrompt({ name: 'review', arguments: { path: '/a.md' } });
    expect(got.messages).toEqual([
      { role: 'user', content: { type: 'text', text: 'Read /a.md with fs.read, then echo what you found.\nFocus on: .\n' } },
    ]);
    await client.close();
    writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ surfaces: { mcp: { tools: ['fs.*'] } } }));
    const narrowed = await connectStdio();
    expect((await narrowed.listPrompts()).prompts.map((p) => p.name)).toEqual(['notes']);
  });
});

describe('skills over HTTP', () => {
  it('are listed with their problems, and read one by one with the body', async () => {
    await serve();
    writeSkill(project, 'broken', '---\nname: broken\ndescription: uses a tool that is not there\ntools: [demo.none]\n---\nx\n');
    await gateway.project('p').then((engine) => engine.refresh());
    const listed = await get('/v1/skills');
    expect(listed.status).toBe(200);
    expect((listed.body.skills as Array<{ name: string }>).map((s) => s.name)).toEqual(['notes', 'review']);
    expect(listed.body.problems).toEqual([
      { file: 'skills/broken/SKILL.md', id: 'broken', at: '4:9', message: expect.stringContaining('"demo.none", which the project does not have') },
    ]);
    const one = await get('/v1/skills/review');
    expect(one.body).toMatchObject({ name: 'review', tools: ['demo.echo', 'fs.read'], body: expect.stringContaining('Read {{path}} with fs.read') });
    expect((await get('/v1/skills/none')).status).toBe(404);
    // The same problems are the project's: GET /v1/tools shows them with the definitions'.
    expect((await get('/v1/tools')).body.problems).toEqual(listed.body.problems);
  });
});
