import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { createGateway } from '../src/surfaces/http/gateway.js';
import { type TempProject, tempProject } from './support/project.js';

/**
 * The web inspector in a real browser with an MCP server as a provider: its tools are listed with the
 * others, run from the page, and their view says which provider serves them and in what state.
 */

const CHROMIUM = '/usr/bin/chromium';
const SERVER = new URL('../fixtures/providers/mcp-server.mjs', import.meta.url).pathname;
const BUILT = join(import.meta.dirname, '..', 'dist', 'inspector', 'index.html');

describe.runIf(existsSync(CHROMIUM) && existsSync(BUILT))('a provider in the inspector (browser)', () => {
  it("lists the provider's tools, runs one, and shows the provider's state", async () => {
    const project: TempProject = tempProject();
    writeFileSync(
      join(project.dir, 'arium.json'),
      JSON.stringify({
        grants: ['vfs.read', 'vfs.write', 'net.fetch'],
        providers: { local: { mcp: { command: process.execPath, args: [SERVER] }, permissions: ['net.fetch'], start: 'eager' } },
      }),
    );
    const gateway = await createGateway({ workspace: project.workspace, project: project.project, engineOptions: { persist: false, watch: false } });
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    try {
      const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
      const page = await browser.newPage();
      await page.goto(`${base}/`);
      await page.getByRole('tab', { name: 'Tools' }).click();
      await page.locator('.tool-item', { hasText: 'local.echo' }).click();
      const provider = page.getByTestId('provider');
      await provider.filter({ hasText: 'local (mcp)' }).waitFor({ timeout: 10_000 });
      expect(await provider.textContent()).toContain('ready');
      const form = page.locator('form.run-form');
      await form.locator('[data-pointer="/text"]').locator('input, textarea').first().fill('from the page');
      await form.getByRole('button', { name: 'Run' }).click();
      await page.getByTestId('run-result').filter({ hasText: 'from the page' }).waitFor({ timeout: 10_000 });
    } finally {
      await browser.close();
      await gateway.close();
      project.remove();
    }
  }, 60_000);
});
