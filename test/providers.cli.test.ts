import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';

/** The `arium` command with a project that has providers: `doctor` tells each one's health, `call` runs their tools. */

const SERVER = new URL('../fixtures/providers/mcp-server.mjs', import.meta.url).pathname;
let ws: ReturnType<typeof tempWorkspace>;
const P = ['--workspace', 'ws', '--project', 'p'];

beforeEach(() => {
  ws = tempWorkspace();
  writeFileSync(
    join(ws.workspace, 'p', 'arium.json'),
    JSON.stringify({
      grants: ['vfs.read', 'vfs.write', 'net.fetch'],
      providers: {
        local: { mcp: { command: process.execPath, args: [SERVER] }, permissions: ['net.fetch'] },
        broken: { mcp: { command: join(ws.root, 'no-such-server') } },
      },
    }),
  );
});
afterEach(() => ws.cleanup());

describe('providers in the arium command', () => {
  it('doctor starts each provider and reports its health: ready with its tools, or why it did not start', async () => {
    const report = parseJson(await runCli(ws.root, ['doctor', ...P, '--json'])) as { checks: Array<{ name: string; ok: boolean; detail: string }> };
    const local = report.checks.find((c) => c.name === 'provider local');
    expect(local).toMatchObject({ ok: true });
    expect(local?.detail).toMatch(/^mcp, 6 tools/);
    const broken = report.checks.find((c) => c.name === 'provider broken');
    expect(broken?.ok).toBe(false);
    expect(broken?.detail).toMatch(/ENOENT|no-such-server/);
  }, 60_000);

  it('tools lists a lazy provider tools, started for the listing, and says where its problems come from', async () => {
    const listed = parseJson(await runCli(ws.root, ['tools', ...P, '--json'])) as {
      tools: Array<{ id: string; source: string }>;
      problems: Array<{ file: string; message: string }>;
    };
    expect(listed.tools.filter((t) => t.source === 'provider:local').map((t) => t.id)).toEqual([
      'local.echo',
      'local.fail',
      'local.grow',
      'local.read_env',
      'local.slow',
      'local.sum',
    ]);
    expect(listed.problems.find((p) => p.file === 'provider:broken')?.message).toMatch(/did not start/);
    const human = await runCli(ws.root, ['tools', ...P]);
    expect(human.out).toMatch(/builtin, 0 from tools\/, 6 from providers\)/);
  }, 60_000);

  it('call runs a provider tool, started for the call', async () => {
    const run = await runCli(ws.root, ['call', 'local.sum', '{"a":20,"b":22}', ...P, '--json']);
    expect(parseJson(run)).toMatchObject({ ok: true, data: { sum: 42 } });
  }, 60_000);
});
