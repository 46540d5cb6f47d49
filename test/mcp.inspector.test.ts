import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * The MCP Inspector's command-line mode (`@modelcontextprotocol/inspector-cli`, from the npm registry)
 * against `arium mcp` over stdio and against `/mcp` of the gateway: a client we did not write.
 */

const ROOT = join(import.meta.dirname, '..');
const INSPECTOR = join(ROOT, 'node_modules', '@modelcontextprotocol', 'inspector-cli', 'build', 'cli.js');
const run = promisify(execFile);

let project: TempProject;

beforeAll(() => {
  project = tempProject({ 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo', output_schema: { type: 'object' } }) });
});
afterAll(() => project?.remove());

async function inspector(args: string[]): Promise<unknown> {
  // inspector-cli 1.0.3 checks for "../package.json" relative to the working folder but imports it
  // relative to its own build folder: run it from a folder whose parent has a package.json.
  const { stdout } = await run(process.execPath, [INSPECTOR, '--cli', ...args], { cwd: join(ROOT, 'test'), timeout: 60_000 });
  return JSON.parse(stdout);
}

describe('the MCP Inspector CLI', () => {
  const stdio = () => [
    process.execPath,
    join(ROOT, 'bin', 'arium.js'),
    '--workspace',
    project.workspace,
    '--project',
    project.project,
    'mcp',
    '--no-daemon',
  ];

  it('lists and calls tools over stdio', async () => {
    const listed = (await inspector([...stdio(), '--method', 'tools/list'])) as { tools: Array<{ name: string; annotations?: unknown }> };
    expect(listed.tools.map((t) => t.name)).toEqual(expect.arrayContaining(['demo.echo', 'fs.read', 'fs.write']));
    const called = await inspector([...stdio(), '--method', 'tools/call', '--tool-name', 'demo.echo', '--tool-arg', 'word=hello']);
    expect(called).toMatchObject({ structuredContent: { word: 'hello' }, content: [{ type: 'text', text: '{"word":"hello"}' }] });
    const failed = await inspector([...stdio(), '--method', 'tools/call', '--tool-name', 'fs.read', '--tool-arg', 'path=/nope.txt']);
    expect(failed).toMatchObject({ isError: true, structuredContent: { error: { code: 'NOT_FOUND' } } });
    const templates = (await inspector([...stdio(), '--method', 'resources/templates/list'])) as {
      resourceTemplates: Array<{ uriTemplate: string }>;
    };
    expect(templates.resourceTemplates.map((t) => t.uriTemplate)).toContain(`arium://${project.project}/vfs/{+path}`);
  }, 120_000);

  it('lists and calls tools over Streamable HTTP at /mcp', async () => {
    const gateway: Gateway = await createGateway({
      workspace: project.workspace,
      project: project.project,
      engineOptions: { persist: false, watch: false },
    });
    try {
      const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
      const http = [`${base}/mcp`, '--transport', 'http'];
      const listed = (await inspector([...http, '--method', 'tools/list'])) as { tools: Array<{ name: string }> };
      expect(listed.tools.map((t) => t.name)).toContain('demo.echo');
      expect(await inspector([...http, '--method', 'tools/call', '--tool-name', 'demo.echo', '--tool-arg', 'n=1'])).toMatchObject({
        structuredContent: { n: 1 },
      });
    } finally {
      await gateway.close();
    }
  }, 120_000);
});
