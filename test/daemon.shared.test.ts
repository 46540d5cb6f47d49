/// <reference lib="dom" />
// The functions given to page.evaluate run in the browser: they are typed against the DOM.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type ProjectClient } from '../src/daemon/connect.js';
import { ensureDaemon } from '../src/daemon/link.js';
import { socketFetch } from '../src/daemon/socket-fetch.js';
import { arium, BIN, cleanUpDaemons, type DaemonFixture, daemonFixture, waitFor } from './support/daemon.js';
import { definition } from './support/project.js';

/**
 * One daemon, every kind of client at once on one project: MCP bridges (the SDK's client over stdio,
 * spawning `arium mcp`), HTTP clients on the daemon's loopback address, the inspector in chromium,
 * `arium` commands, and connect() from the library. Each appends its own tokens to one file by a
 * read-modify-write tool, all at once: every token must be there exactly once at the end.
 */

const CHROMIUM = '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
const EACH = 32;

const APPEND_JS = `export default async function run(input, ctx) {
  const text = await ctx.vfs.read('/log.txt');
  await ctx.vfs.write('/log.txt', text + input.token + '\\n');
  return { lines: text === '' ? 0 : text.split('\\n').length - 1 };
}
`;

let fixture: DaemonFixture;
let http: string;
const bridges: Client[] = [];
const clients: ProjectClient[] = [];
let browser: Browser | undefined;

function bridge(name: string): Promise<Client> {
  const client = new Client({ name, version: '1.0.0' });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--no-node-snapshot', BIN, 'mcp', '--workspace', fixture.project.workspace, '--project', 'p'],
    env: fixture.env,
    stderr: 'pipe',
  });
  bridges.push(client);
  return client.connect(transport).then(() => client);
}

const socket = () => socketFetch(fixture.paths.socket, { 'x-arium-client': 'test' });

async function pending(): Promise<Array<{ run_id: string; tool: string; caller: string | null; input: unknown }>> {
  const response = await socket()('/p/p/v1/approvals');
  const body = (await response.json()) as { approvals: Array<{ run_id: string; tool: string; caller: string | null; input: unknown }> };
  return body.approvals;
}

async function limited<T>(count: number, width: number, work: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await work(i);
      }
    }),
  );
  return results;
}

beforeAll(async () => {
  fixture = daemonFixture({
    'append.json': definition({ id: 'append', entry: 'append.js', permissions: ['exec.js', 'vfs.read:/**', 'vfs.write:/**'] }),
  });
  fixture.project.write('append.js', APPEND_JS);
  writeFileSync(join(fixture.project.dir, 'arium.json'), JSON.stringify({ approvals: { rules: [{ tool: 'fs.delete' }] } }));
  const link = await ensureDaemon(fixture.project.workspace, { env: fixture.env });
  expect(link.http).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  http = link.http as string;
  const made = await socket()('/p/p/v1/tools/fs.write:run', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: { path: '/log.txt', content: '' } }),
  });
  expect(made.status).toBe(200);
}, 60_000);

afterAll(async () => {
  await Promise.all(bridges.map((b) => b.close().catch(() => {})));
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await browser?.close();
  cleanUpDaemons();
});

describe('one daemon, every client at once', () => {
  it('loses no update of read-modify-writes from four bridges, two HTTP clients, the inspector, the CLI and connect()', async () => {
    const agents = await Promise.all(['agent-1', 'agent-2', 'agent-3', 'agent-4'].map(bridge));
    clients.push(await connect({ workspace: fixture.project.workspace, project: 'p', name: 'loop', env: fixture.env }));
    const library = clients[0] as ProjectClient;
    let page: Page | undefined;
    if (haveChromium) {
      browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
      page = await (await browser.newContext()).newPage();
      await page.goto(`${http}/p/p/`);
    }
    const tokens: string[] = [];
    const work: Array<Promise<unknown>> = [];
    agents.forEach((agent, a) => {
      for (let i = 0; i < EACH; i++) {
        const token = `mcp${a}-${i}`;
        tokens.push(token);
        work.push(
          agent.callTool({ name: 'append', arguments: { token } }).then((result) => {
            expect(result.isError ?? false, JSON.stringify(result)).toBe(false);
          }),
        );
      }
    });
    for (const h of [0, 1]) {
      for (let i = 0; i < EACH; i++) {
        const token = `http${h}-${i}`;
        tokens.push(token);
        work.push(
          fetch(`${http}/p/p/v1/tools/append:run`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ input: { token } }),
          }).then(async (response) => {
            expect(response.status, await response.clone().text()).toBe(200);
          }),
        );
      }
    }
    for (let i = 0; i < EACH; i++) {
      const token = `lib-${i}`;
      tokens.push(token);
      work.push(library.call('append', { token }).then((result) => expect(result.ok, JSON.stringify(result)).toBe(true)));
    }
    if (page) {
      const fromPage = Array.from({ length: EACH }, (_, i) => `page-${i}`);
      tokens.push(...fromPage);
      // The inspector's own origin calling its gateway, as its Tools panel does.
      work.push(
        page
          .evaluate(async (list) => {
            const statuses = await Promise.all(
              list.map((token) =>
                fetch('/p/p/v1/tools/append:run', {
                  method: 'POST',
                  headers: { 'content-type': 'application/json' },
                  body: JSON.stringify({ input: { token } }),
                }).then((r) => r.status),
              ),
            );
            return statuses;
          }, fromPage)
          .then((statuses) => expect(statuses.every((s) => s === 200)).toBe(true)),
      );
    }
    const fromCli = Array.from({ length: EACH }, (_, i) => `cli-${i}`);
    tokens.push(...fromCli);
    work.push(
      limited(EACH, 8, async (i) => {
        const ran = await arium(fixture, ['call', 'append', JSON.stringify({ token: fromCli[i] }), '--project', 'p']);
        expect(ran.code, ran.stderr).toBe(0);
      }),
    );
    await Promise.all(work);

    const read = await library.call<{ content: string }>('fs.read', { path: '/log.txt' });
    if (!read.ok) throw new Error(JSON.stringify(read.error));
    const lines = read.data.content.split('\n').filter((line) => line !== '');
    expect(lines.length).toBe(tokens.length);
    expect([...lines].sort()).toEqual([...tokens].sort());
    // One engine served them all: the CLI's commands ran in the daemon, named as theirs.
    expect(existsSync(fixture.paths.record)).toBe(true);
    const record = JSON.parse(readFileSync(fixture.paths.record, 'utf8')) as { pid: number };
    expect(record.pid).toBe(library.daemon?.pid);
  }, 300_000);

  it.runIf(haveChromium)(
    'shows a bridge’s call live in the inspector, named by the MCP client',
    async () => {
      const page = await (browser as Browser).newPage();
      await page.goto(`${http}/p/p/#activity`);
      await page.locator('.stream.open').waitFor({ timeout: 15_000 });
      const agent = bridges[1] as Client;
      const result = await agent.callTool({ name: 'append', arguments: { token: 'watched' } });
      const runId = (result._meta as Record<string, string> | undefined)?.['arium/run_id'];
      expect(runId).toBeTypeOf('string');
      // The call has ended for the client, but its result event may reach the page after the row
      // its invocation made: wait for the row to show it ended well.
      const row = page.locator(`.act-row[data-run="${runId}"][data-status="ok"]`);
      await row.waitFor({ timeout: 15_000 });
      await row.click();
      await page.getByTestId('call-detail').filter({ hasText: 'mcp:agent-2' }).first().waitFor({ timeout: 10_000 });
      await page.close();
    },
    60_000,
  );

  it('answers an approval a bridge waits on from the inspector, and another from the CLI', async () => {
    // A client that can be asked (elicitation) is asked; its person has not answered yet when another
    // one does, from the CLI or the inspector, which reach the same engine.
    const agent = new Client({ name: 'asker', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    const asked: string[] = [];
    agent.setRequestHandler(ElicitRequestSchema, (request) => {
      asked.push(request.params.message);
      return new Promise<never>(() => {});
    });
    await agent.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: ['--no-node-snapshot', BIN, 'mcp', '--workspace', fixture.project.workspace, '--project', 'p'],
        env: fixture.env,
        stderr: 'pipe',
      }),
    );
    bridges.push(agent);
    const library = clients[0] as ProjectClient;
    for (const name of ['/gate/a.txt', '/gate/b.txt']) expect((await library.call('fs.write', { path: name, content: 'x' })).ok).toBe(true);

    const byCli = agent.callTool({ name: 'fs.delete', arguments: { path: '/gate/a.txt' } });
    let waiting: { run_id: string; caller: string | null } | undefined;
    await waitFor(async () => {
      waiting = (await pending()).find((p) => JSON.stringify(p.input).includes('/gate/a.txt'));
      return waiting !== undefined;
    });
    expect(waiting?.caller).toBe('mcp:asker');
    await waitFor(() => asked.length === 1);
    const approved = await arium(fixture, ['approve', waiting?.run_id as string, '--by', 'cli-person', '--project', 'p']);
    expect(approved.code, approved.stderr).toBe(0);
    const answered = await byCli;
    expect(answered.isError ?? false, JSON.stringify(answered)).toBe(false);
    expect((await library.call('fs.stat', { path: '/gate/a.txt' })).ok).toBe(false);

    if (!haveChromium) return;
    const page = await (browser as Browser).newPage();
    await page.goto(`${http}/p/p/#approvals`);
    const byPage = agent.callTool({ name: 'fs.delete', arguments: { path: '/gate/b.txt' } });
    const item = page.locator('.approval', { hasText: '/gate/b.txt' });
    await item.waitFor({ timeout: 15_000 });
    await item.filter({ hasText: 'asked by mcp:asker' }).waitFor();
    await page.getByLabel('Answer as').fill('page-person');
    await item.getByRole('button', { name: 'Approve' }).click();
    const fromPage = await byPage;
    expect(fromPage.isError ?? false, JSON.stringify(fromPage)).toBe(false);
    expect((await library.call('fs.stat', { path: '/gate/b.txt' })).ok).toBe(false);
    await page.close();
  }, 120_000);
});
