import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { daemonPaths } from '../src/daemon/paths.js';
import { checkSchema } from '../src/surfaces/vendor-rules.js';
import { type Json, runCli } from './cli.helpers.js';
import { alive, waitFor } from './support/daemon.js';
import { definition, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * `arium mcp-config` prints what a desktop client runs; the test runs exactly that, with the MCP SDK's
 * client, from a working directory that has nothing of Arium in it (as a client starts its servers).
 */

let project: TempProject;
let elsewhere: string;
let runtime: string;

/** An input nested 70 objects deep: past what any model API takes, so listed to none. */
function deepSchema(levels: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < levels; i++) schema = { type: 'object', properties: { x: schema } };
  return schema;
}

beforeAll(() => {
  project = tempProject({
    'deep.json': definition({ id: 'note.deep', schema: deepSchema(70) }),
    'tool.js': TRIVIAL_JS,
    'either.json': definition({
      id: 'note.either',
      schema: {
        type: 'object',
        properties: { id: { type: 'integer' }, title: { type: 'string' } },
        oneOf: [{ required: ['id'] }, { required: ['title'] }],
        additionalProperties: false,
      },
    }),
  });
  elsewhere = mkdtempSync(join(tmpdir(), 'arium-client-cwd-'));
  runtime = mkdtempSync(join(tmpdir(), 'arium-client-run-'));
});

afterAll(async () => {
  // The bridge started the workspace's daemon: it outlives the client by design, not the test. It
  // writes its state as it stops, so the project goes only once the daemon has gone.
  let pid: number | null = null;
  try {
    pid = (JSON.parse(readFileSync(daemonPaths(project.workspace, { XDG_RUNTIME_DIR: runtime }).record, 'utf8')) as { pid: number }).pid;
    process.kill(pid, 'SIGTERM');
  } catch {}
  if (pid !== null) {
    const daemon = pid;
    await waitFor(() => !alive(daemon), 15_000, 'the daemon stopping').catch(() => process.kill(daemon, 'SIGKILL'));
  }
  project?.remove();
  rmSync(elsewhere, { recursive: true, force: true });
  rmSync(runtime, { recursive: true, force: true });
});

const config = async (args: string[], cwd = project.workspace, env: Record<string, string> = {}): Promise<Json> => {
  const run = await runCli(cwd, ['mcp-config', ...args], { env: { PATH: process.env.PATH ?? '', ...env } });
  expect(run.code, run.err).toBe(0);
  return JSON.parse(run.out);
};

describe('arium mcp-config', () => {
  it('prints absolute paths: this node, this bin/arium.js, the workspace resolved from a relative --workspace', async () => {
    const printed = await config(['--workspace', '.', '--project', 'p']);
    const server = printed.mcpServers.arium;
    expect(server.command).toBe(process.execPath);
    expect(server.args).toEqual([join(import.meta.dirname, '..', 'bin', 'arium.js'), '--workspace', project.workspace, '--project', 'p', 'mcp']);
    expect(server.env.PATH).toBe(process.env.PATH);
    expect(JSON.stringify(printed)).not.toContain('npx');
  });

  it('in each client’s shape', async () => {
    const args = ['--workspace', project.workspace, '--project', 'p', '--client'];
    expect(Object.keys((await config([...args, 'claude-desktop'])).mcpServers.arium)).toEqual(['command', 'args', 'env']);
    expect((await config([...args, 'cursor'])).mcpServers.arium.command).toBe(process.execPath);
    expect((await config([...args, 'claude-code'])).mcpServers.arium.type).toBe('stdio');
    expect((await config([...args, 'vscode'])).servers.arium).toMatchObject({ type: 'stdio', command: process.execPath });
    const wrong = await runCli(project.workspace, ['mcp-config', '--client', 'emacs']);
    expect(wrong.code).toBe(2);
    expect(wrong.err).toContain('--client takes claude-desktop, claude-code, cursor, vscode (got "emacs")');
    const missing = await runCli(project.workspace, ['mcp-config', '--workspace', project.workspace, '--project', 'nope']);
    expect(missing.code).toBe(3);
    expect(missing.err).toContain('there is no project "nope"');
  });

  it('the printed configuration, started from another directory, serves the tools: listed in shapes the model APIs take, and callable', async () => {
    const server = (await config(['--workspace', project.workspace, '--project', 'p'], project.workspace, { XDG_RUNTIME_DIR: runtime })).mcpServers
      .arium;
    // The bridge looks for the daemon where this shell's commands do.
    expect(server.env).toEqual({ PATH: process.env.PATH, XDG_RUNTIME_DIR: runtime });
    const transport = new StdioClientTransport({ command: server.command, args: server.args, env: server.env, cwd: elsewhere, stderr: 'pipe' });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const client = new Client({ name: 'desktop', version: '1.0.0' });
    try {
      await client.connect(transport);
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['fs.write', 'system.hash', 'note.either']));
      for (const tool of tools) expect(checkSchema(tool.inputSchema, 'mcp'), tool.name).toEqual([]);
      expect(tools.find((t) => t.name === 'system.hash')?.inputSchema).not.toHaveProperty('oneOf');
      // One tool no model API takes is left out of the list, not sent to break every request.
      expect(tools.map((t) => t.name)).not.toContain('note.deep');
      const wrote = await client.callTool({ name: 'fs.write', arguments: { path: '/hello.txt', content: 'hi\n' } });
      expect(wrote.isError, JSON.stringify(wrote)).toBeFalsy();
      const hashed = await client.callTool({ name: 'system.hash', arguments: { path: '/hello.txt' } });
      expect(hashed.structuredContent).toMatchObject({ algorithm: 'sha256', size: 3, path: '/hello.txt' });
      // Published without its oneOf; still checked against it.
      const both = await client.callTool({ name: 'system.hash', arguments: { path: '/hello.txt', text: 'x' } });
      expect(both.isError).toBe(true);
      expect(JSON.stringify(both.content)).toContain('INVALID_INPUT');
    } finally {
      await client.close();
    }
    expect(stderr).toContain(`bridging to the engine daemon of ${project.workspace}`);
    const listed = JSON.parse((await runCli(project.workspace, ['tools', '--workspace', project.workspace, '--project', 'p', '--json'])).out);
    expect(listed.problems).toContainEqual(
      expect.objectContaining({ id: 'note.deep', vendor: 'mcp', message: expect.stringContaining('levels deep') }),
    );
  });
});
