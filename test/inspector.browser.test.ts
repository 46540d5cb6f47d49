/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
// Over 500 lines: one browser session (Debian's chromium) drives every view of the inspector; a
// second file would start a second browser on a 2-core machine.
// The functions given to page.evaluate run in the browser: they are typed against the DOM.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { installProject } from '../src/install.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';

/**
 * The web inspector in a real browser (Debian's chromium through playwright-core) against a gateway
 * serving a copy of workspace/demo. Every test drives the page as a user would and reads the DOM.
 * Screenshots and timings land in test-results/inspector/ (timings are recorded, never asserted).
 */

const CHROMIUM = '/usr/bin/chromium';
const ROOT = join(import.meta.dirname, '..');
const BUILT = join(ROOT, 'dist', 'inspector');
const OUT = join(ROOT, 'test-results', 'inspector');
const haveChromium = existsSync(CHROMIUM);

if (!haveChromium && process.env.CI) {
  describe('inspector (browser)', () => {
    it('needs chromium', () => {
      throw new Error(`The inspector's browser tests need ${CHROMIUM} on CI: apt-get install chromium`);
    });
  });
} else if (!haveChromium) {
  describe.skip(`inspector (browser): skipped, no ${CHROMIUM} (apt-get install chromium)`, () => {
    it('needs chromium', () => {});
  });
}

describe.runIf(haveChromium)('inspector (browser)', () => {
  let workspace: string;
  let gateway: Gateway;
  let base: string;
  let browser: Browser;
  const requests: string[] = [];
  const consoleProblems: string[] = [];
  const pageErrors: string[] = [];
  const dialogs: string[] = [];
  const failed: string[] = [];
  const timings: Record<string, number> = {};
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    // `npm test` builds first; a test run on its own builds when nothing is there.
    if (!existsSync(join(BUILT, 'index.html'))) {
      const { build } = await import('vite');
      await build({ configFile: join(ROOT, 'inspector', 'vite.config.ts'), logLevel: 'warn' });
    }
    mkdirSync(OUT, { recursive: true });
    workspace = mkdtempSync(join(tmpdir(), 'arium-inspector-'));
    cpSync(join(ROOT, 'workspace', 'demo'), join(workspace, 'demo'), { recursive: true, filter: (source) => !source.includes('.arium') });
    // fs.delete waits for approval (no other test calls it): the Approvals panel's test answers it.
    const config = JSON.parse(readFileSync(join(workspace, 'demo', 'arium.json'), 'utf8'));
    writeFileSync(join(workspace, 'demo', 'arium.json'), JSON.stringify({ ...config, approvals: { rules: [{ tool: 'fs.delete' }] } }));
    // The demo pins an npm package and a Python wheel for two of its tools: installed as a user would.
    await installProject({ workspace, project: 'demo', offline: true });
    gateway = await createGateway({ workspace, project: 'demo', engineOptions: { persist: false } });
    base = await gateway.app.listen({ port: 0, host: '127.0.0.1' });
    // The engine opens on its first request: warm it, so that the page's timings are the page's.
    await fetch(`${base}/v1/tools`);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  }, 60_000);

  // A test's pages close with it: a page left open would go on following the tree the next test changes.
  afterEach(async () => {
    for (const context of contexts.splice(0)) await context.close().catch(() => {});
  });

  afterAll(async () => {
    await browser?.close();
    await gateway?.close();
    if (workspace) rmSync(workspace, { recursive: true, force: true });
    if (browser) {
      writeFileSync(
        join(OUT, 'timings.json'),
        `${JSON.stringify({ date: new Date().toISOString(), chromium: browser.version(), timings_ms: timings }, null, 2)}\n`,
      );
    }
  });

  /** A fresh page: every request, console problem, uncaught error and dialog is recorded. */
  async function open(path = '/', options: { colorScheme?: 'light' | 'dark'; height?: number } = {}): Promise<Page> {
    const context = await browser.newContext({
      viewport: { width: 1360, height: options.height ?? 860 },
      colorScheme: options.colorScheme ?? 'light',
    });
    contexts.push(context);
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    page.on('request', (request) => requests.push(request.url()));
    page.on('console', (message) => {
      // Failed requests are checked one by one below, from their responses.
      if (/^Failed to load resource/.test(message.text())) return;
      if (message.type() === 'error' || /Content Security Policy|Refused to/i.test(message.text())) consoleProblems.push(message.text());
    });
    page.on('response', (response) => {
      if (response.status() >= 400) failed.push(`${response.status()} ${response.request().method()} ${new URL(response.url()).pathname}`);
    });
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('dialog', (dialog) => {
      dialogs.push(`${dialog.type()}: ${dialog.message()}`);
      void dialog.dismiss();
    });
    await page.goto(`${base}${path}`);
    return page;
  }

  /** Whether `selector` is in view in the pane that scrolls it, and whether it has the focus. */
  async function placement(page: Page, selector: string): Promise<{ visible: boolean; focused: boolean }> {
    return page.evaluate((sel) => {
      const element = document.querySelector(sel) as HTMLElement;
      const pane = element.closest('.main') as HTMLElement;
      const box = element.getBoundingClientRect();
      const view = pane.getBoundingClientRect();
      // In view: all of it, or as much of it as the pane can show (a tall result from its top).
      const bottom = Math.min(view.bottom, innerHeight);
      const shown = Math.min(box.bottom, bottom) - Math.max(box.top, view.top);
      return { visible: shown >= Math.min(box.height, bottom - view.top) - 2, focused: document.activeElement === element };
    }, selector);
  }

  const engine = () => {
    const found = gateway.engines().get('demo');
    if (!found) throw new Error('the demo engine is not open yet');
    return found;
  };

  async function tab(page: Page, name: string): Promise<void> {
    await page.getByRole('tab', { name }).click();
  }

  async function runFsWrite(page: Page, path: string, content: string): Promise<string> {
    await tab(page, 'Tools');
    await page.locator('.tool-item', { hasText: 'fs.write' }).click();
    const form = page.locator('form.run-form');
    await form.locator('[data-pointer="/path"] input').fill(path);
    await form.locator('[data-pointer="/content"] textarea').fill(content);
    await form.getByRole('button', { name: 'Run' }).click();
    const result = page.getByTestId('run-result');
    await expectText(result, '"bytes_written"');
    return (await result.locator('.run-id').textContent()) ?? '';
  }

  async function expectText(locator: ReturnType<Page['locator']>, text: string, timeout = 10_000): Promise<void> {
    await locator.filter({ hasText: text }).first().waitFor({ timeout });
  }

  /** The lines of a rendered diff2html patch, split into added and removed. */
  async function diffLines(page: Page, scope: string): Promise<{ added: string[]; removed: string[] }> {
    return page.evaluate((selector) => {
      const lines = (kind: string) =>
        [...document.querySelectorAll(`${selector} td.${kind}:not(.d2h-code-linenumber) .d2h-code-line-ctn`)].map((e) => e.textContent ?? '');
      return { added: lines('d2h-ins'), removed: lines('d2h-del') };
    }, scope);
  }

  it('runs a tool from the generated form, shows the engine’s violations on their fields, and lists the call in Activity', async () => {
    const page = await open('/');
    // Navigation start → the tools list is in the page.
    timings.first_render_tools = await page
      .waitForFunction(() => (document.querySelector('[data-testid=tool-list] button') ? performance.now() : 0), null, { polling: 'raf' })
      .then((handle) => handle.jsonValue());
    await expectText(page.getByTestId('tool-list'), 'demo.text-stats');

    const runId = await runFsWrite(page, '/notes/hello.md', 'Hello\nworld\n');
    expect(runId).toMatch(/[0-9a-f-]{36}/);
    await expectText(page.getByTestId('run-result'), '"path": "/notes/hello.md"');
    await page.screenshot({ path: join(OUT, 'tools.png') });

    // An empty path: the engine's minLength violation shows under the path field.
    const form = page.locator('form.run-form');
    await form.locator('[data-pointer="/path"] input').fill('');
    await form.getByRole('button', { name: 'Run' }).click();
    await expectText(form.locator('.field-errors[data-pointer="/path"]'), 'must NOT have fewer than 1 characters');
    await expect(page.getByTestId('run-result').textContent()).resolves.toContain('INVALID_INPUT');

    // Raw JSON input the form cannot produce: a number for a string; the violation names its pointer.
    await form.getByRole('button', { name: 'JSON' }).click();
    await form.locator('textarea.code').fill('{"path": "/x.txt", "content": 5}');
    await form.getByRole('button', { name: 'Run' }).click();
    await expectText(form.locator('.form-errors'), '/content: must be string');
    // Back to the form: the violation moves onto the content field.
    await form.getByRole('button', { name: 'JSON' }).click();
    await form.getByRole('button', { name: 'Run' }).click();
    await expectText(form.locator('.field-errors[data-pointer="/content"]'), 'must be string');

    await tab(page, 'Activity');
    const row = page.locator(`.act-row[data-run="${runId}"]`);
    await row.waitFor();
    await expect(row.getAttribute('data-status')).resolves.toBe('ok');
    await expect(page.locator('.act-row[data-status="error"]').count()).resolves.toBeGreaterThanOrEqual(2);
    await row.click();
    const detail = page.getByTestId('call-detail');
    await expectText(detail, '"bytes_written": 12');
    await expectText(detail.getByTestId('call-changes'), '/notes/hello.md');
    await detail.getByRole('button', { name: 'Open diff' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.locator('.d2h-code-line-ctn').first().waitFor();
    await expect.poll(() => diffLines(page, 'dialog'), { timeout: 15_000 }).toEqual({ added: ['Hello', 'world'], removed: [] });
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });

    // The filters: status error keeps only failed calls; a run id keeps that call.
    await page.locator('.filters select').nth(1).selectOption('error');
    await expect(page.locator('.act-row[data-status="ok"]').count()).resolves.toBe(0);
    await page.locator('.filters select').nth(1).selectOption('');
    await page.locator('.filters input[type=search]').fill(runId.slice(0, 8));
    await expect(page.locator('.act-row').count()).resolves.toBe(1);
    await page.locator('.filters input[type=search]').fill('');
    await row.click();
    await page.screenshot({ path: join(OUT, 'activity.png') });
  });

  it('shows a tool dropped into tools/ without a reload, drops it when removed, and lists a broken definition with its file', async () => {
    const page = await open('/');
    const list = page.getByTestId('tool-list');
    await expectText(list, 'fs.write');
    const tools = join(workspace, 'demo', 'tools');
    writeFileSync(join(tools, 'live-echo.js'), 'export default function run(input) {\n  return { echo: input.text };\n}\n');
    writeFileSync(
      join(tools, 'live-echo.json'),
      JSON.stringify({
        id: 'live.echo',
        name: 'Live echo',
        description: 'Says back its text',
        runner: 'js-runner',
        entry: 'live-echo.js',
        schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false },
        permissions: ['exec.js'],
      }),
    );
    await expectText(list, 'live.echo');
    unlinkSync(join(tools, 'live-echo.json'));
    unlinkSync(join(tools, 'live-echo.js'));
    await list.locator('.tool-item', { hasText: 'live.echo' }).waitFor({ state: 'detached', timeout: 10_000 });

    writeFileSync(
      join(tools, 'broken.json'),
      JSON.stringify({ id: 'broken.tool', runner: 'js-runner', entry: 'nowhere.js', schema: { type: 'object' } }),
    );
    const problems = page.getByTestId('problems');
    await expectText(problems, 'broken.json');
    await expect(problems.textContent()).resolves.toMatch(/permissions|nowhere\.js|description|name/);
    unlinkSync(join(tools, 'broken.json'));
    await page.getByTestId('problems').filter({ hasText: 'broken.json' }).waitFor({ state: 'detached', timeout: 10_000 });
  });

  it('lists the skills, shows one with its instructions as text, and follows changes to the folder', async () => {
    const page = await open('/#skills');
    const list = page.getByTestId('skill-list');
    const folder = join(workspace, 'demo', 'skills', 'tidy');
    mkdirSync(folder, { recursive: true });
    const body = 'Tidy {{path}} with fs.write.\n<img src=x onerror="alert(1)"><script>alert(2)</script>\n';
    writeFileSync(
      join(folder, 'SKILL.md'),
      `---\nname: tidy\ndescription: Tidy a file\ntools: [fs.read, fs.write]\narguments:\n  - name: path\n    required: true\n---\n${body}`,
    );
    await expectText(list, 'tidy');
    await page.locator('.tool-item', { hasText: 'tidy' }).click();
    const shown = page.getByTestId('skill-body');
    await expectText(shown, 'Tidy {{path}} with fs.write.');
    await expect(shown.textContent()).resolves.toBe(body);
    await expect(page.locator('[data-testid="skill-detail"] img, [data-testid="skill-detail"] script').count()).resolves.toBe(0);
    writeFileSync(join(folder, 'SKILL.md'), '---\nname: tidy\ndescription: Tidy a file\ntools: [fs.nowhere]\n---\nx\n');
    const problems = page.getByTestId('skill-problems');
    await expectText(problems, 'fs.nowhere');
    await expect(problems.textContent()).resolves.toContain('4:9');
    rmSync(join(workspace, 'demo', 'skills'), { recursive: true });
    await problems.waitFor({ state: 'detached', timeout: 10_000 });
    await list.locator('.tool-item', { hasText: 'tidy' }).waitFor({ state: 'detached', timeout: 10_000 });
    expect(failed.filter((line) => line.includes('/v1/skills'))).toEqual([]);
  });

  it('takes a snapshot, diffs it against a change made from the page, and restores it after showing what changes', async () => {
    const page = await open('/');
    await runFsWrite(page, '/notes/plan.md', 'alpha\nbeta\ngamma\n');

    await tab(page, 'Snapshots');
    const take = page.getByRole('form', { name: 'Take snapshot' });
    await take.getByLabel('Label').fill('before-edit');
    await take.getByLabel('Message').fill('Plan, first draft');
    await take.getByRole('button', { name: 'Take snapshot' }).click();
    const point = page.locator('.point', { hasText: 'before-edit' });
    await point.waitFor();

    await runFsWrite(page, '/notes/plan.md', 'alpha\nBETA\ngamma\ndelta\n');
    await tab(page, 'Snapshots');
    await point.getByRole('button', { name: 'From' }).click();
    await page.locator('.point[data-ref="live"]').getByRole('button', { name: 'To' }).click();
    const file = page.locator('.diff-file[data-path="/notes/plan.md"]');
    await file.locator('.d2h-code-line-ctn').first().waitFor();
    await expect(file.locator('.counts').textContent()).resolves.toBe('+2 −1');
    await expect
      .poll(() => diffLines(page, '.diff-file[data-path="/notes/plan.md"]'), { timeout: 15_000 })
      .toEqual({ added: ['BETA', 'delta'], removed: ['beta'] });
    await page.getByRole('button', { name: 'Unified' }).click();
    await expect
      .poll(() => diffLines(page, '.diff-file[data-path="/notes/plan.md"]'), { timeout: 15_000 })
      .toEqual({ added: ['BETA', 'delta'], removed: ['beta'] });
    await page.getByRole('button', { name: 'Side by side' }).click();
    await page.screenshot({ path: join(OUT, 'diff.png') });

    await point.getByRole('button', { name: 'Restore…' }).click();
    const dialog = page.getByRole('dialog');
    await expectText(dialog.getByTestId('restore-files'), '/notes/plan.md');
    await expect(dialog.getByTestId('restore-files').textContent()).resolves.toContain('+1');
    await dialog.getByRole('button', { name: 'Restore', exact: true }).click();
    await dialog.waitFor({ state: 'detached' });

    await tab(page, 'Files');
    const tree = page.getByTestId('file-tree');
    await tree.locator('[data-path="/notes"]').click();
    await tree.locator('[data-path="/notes/plan.md"]').click();
    await expect(page.getByTestId('file-text').textContent({ timeout: 10_000 })).resolves.toBe('alpha\nbeta\ngamma\n');
  });

  it('shows a snapshot’s tree, highlights a file, and shows hostile markup as text in files and diffs', async () => {
    const vfs = engine().vfs;
    const code = 'export function greet(name: string): string {\n  return "hello " + name;\n}\n';
    const hostile = '<script>alert("script")</script>\n<img src=x onerror="alert(\'img\')">\n';
    vfs.write('/src/greet.ts', code);
    vfs.write('/src/hostile.html', hostile);
    engine().snapshot({ label: 'files-test' });
    vfs.delete('/src', { recursive: true });
    vfs.write('/hostile.md', `${hostile}<iframe src="javascript:alert('frame')"></iframe>\n`);

    const page = await open('/#files');
    const tree = page.getByTestId('file-tree');
    await tree.locator('[data-path="/notes"]').waitFor();
    await expect(tree.locator('[data-path="/src"]').count()).resolves.toBe(0);
    const select = page.getByTestId('tree-select');
    await select.selectOption({ label: (await select.locator('option', { hasText: 'files-test' }).textContent()) ?? '' });
    await tree.locator('[data-path="/src"]').click();
    await tree.locator('[data-path="/src/greet.ts"]').click();
    const text = page.getByTestId('file-text');
    await text.locator('.hljs-keyword').first().waitFor();
    await expect(text.textContent()).resolves.toBe(code);
    await expect(text.locator('.hljs-keyword', { hasText: 'function' }).count()).resolves.toBe(1);
    await page.screenshot({ path: join(OUT, 'files.png') });

    await tree.locator('[data-path="/src/hostile.html"]').click();
    await page.locator('[data-testid=file-view][data-path="/src/hostile.html"]').waitFor();
    await expect(page.getByTestId('file-text').textContent()).resolves.toBe(hostile);
    await expect(page.locator('[data-testid=file-view] script, [data-testid=file-view] img').count()).resolves.toBe(0);

    // The same markup in a diff: diff2html shows it as text.
    await tab(page, 'Snapshots');
    await page.locator('.point', { hasText: 'files-test' }).getByRole('button', { name: 'From' }).click();
    const added = page.locator('.diff-file[data-path="/hostile.md"]');
    await added.locator('.d2h-code-line-ctn').first().waitFor();
    const lines = await diffLines(page, '.diff-file[data-path="/hostile.md"]');
    expect(lines.added).toContain('<script>alert("script")</script>');
    expect(lines.added).toContain('<img src=x onerror="alert(\'img\')">');
    await expect(page.locator('.patch script, .patch img, .patch iframe').count()).resolves.toBe(0);
    await page.waitForTimeout(200);
    expect(dialogs).toEqual([]);
  });

  it('shows a long file in the pane’s height, and another one from its first line', async () => {
    const lines = (tag: string) => Array.from({ length: 300 }, (_, i) => `${tag} ${i}`).join('\n');
    engine().vfs.write('/reading/a.txt', `${lines('a')}\n`);
    engine().vfs.write('/reading/b.txt', `${lines('b')}\n`);
    const page = await open('/#files');
    const tree = page.getByTestId('file-tree');
    await tree.locator('[data-path="/reading"]').click();
    await tree.locator('[data-path="/reading/a.txt"]').click();
    await expectText(page.getByTestId('file-text'), 'a 299');
    // The pane scrolls through the file, rather than a box of its own inside the pane.
    const pane = page.locator('section.main[aria-label="File"]');
    await expect(page.getByTestId('file-text').evaluate((element) => element.scrollHeight - element.clientHeight)).resolves.toBe(0);
    await pane.evaluate((element) => element.scrollTo(0, element.scrollHeight));
    await expect(pane.evaluate((element) => element.scrollTop)).resolves.toBeGreaterThan(0);
    await tree.locator('[data-path="/reading/b.txt"]').click();
    await expectText(page.getByTestId('file-text'), 'b 299');
    await expect.poll(() => pane.evaluate((element) => element.scrollTop)).toBe(0);
    await page.context().close();
    engine().vfs.delete('/reading', { recursive: true });
  });

  it('opens a folder of 10,000 files as a virtualized list (timing recorded)', async () => {
    const vfs = engine().vfs;
    for (let i = 0; i < 10_000; i++) vfs.write(`/big/file-${String(i).padStart(5, '0')}.txt`, `file ${i}\n`);
    const page = await open('/#files');
    const tree = page.getByTestId('file-tree');
    await tree.locator('[data-path="/big"]').waitFor();
    timings.tree_10k_expand = await page.evaluate(
      () =>
        new Promise<number>((resolve) => {
          const start = performance.now();
          (document.querySelector('[data-path="/big"]') as HTMLElement).click();
          const check = () =>
            document.querySelector('[data-path="/big/file-00000.txt"]') ? resolve(performance.now() - start) : requestAnimationFrame(check);
          check();
        }),
    );
    // Only the rows in view (and a few more) are in the DOM.
    const rendered = await tree.locator('[role=treeitem]').count();
    expect(rendered).toBeGreaterThan(10);
    expect(rendered).toBeLessThan(200);
    // The keyboard reaches the end of the list: /notes and /hostile.md come after /big's files.
    await tree.focus();
    await page.keyboard.press('End');
    await page.keyboard.press('ArrowUp');
    await page.keyboard.press('ArrowUp');
    await tree.locator('[data-path="/big/file-09999.txt"].active').waitFor();
    await page.keyboard.press('Enter');
    await expect(page.getByTestId('file-text').textContent({ timeout: 10_000 })).resolves.toBe('file 9999\n');
    await page.context().close();
    vfs.delete('/big', { recursive: true });
  });

  it('shows a 1,000-line diff (timing recorded)', async () => {
    const vfs = engine().vfs;
    const lines = (tag: string) => Array.from({ length: 1000 }, (_, i) => `${tag} line ${i}`).join('\n');
    vfs.write('/long.txt', `${lines('old')}\n`);
    engine().snapshot({ label: 'long-before' });
    vfs.write('/long.txt', `${lines('new')}\n`);
    const page = await open('/');
    await page.getByTestId('tool-list').locator('button').first().waitFor();
    timings.diff_1k_lines = await page.evaluate(
      () =>
        new Promise<number>((resolve) => {
          const start = performance.now();
          (document.getElementById('tab-snapshots') as HTMLElement).click();
          const check = () =>
            document.querySelector('[data-path="/long.txt"] .d2h-ins') ? resolve(performance.now() - start) : requestAnimationFrame(check);
          check();
        }),
    );
    await expect(page.locator('[data-path="/long.txt"] .counts').textContent()).resolves.toBe('+1000 −1000');
    // The first inserted line timed the diff; on a loaded machine the rest may land a frame or a re-render later.
    await expect.poll(() => page.locator('[data-path="/long.txt"] .d2h-ins .d2h-code-line-ctn').count(), { timeout: 15_000 }).toBe(1000);
  });

  it('keeps up with 20,000 streamed events in Activity (timing recorded)', async () => {
    const page = await open('/#activity');
    await page.locator('.stream.open').waitFor();
    const bus = engine().events;
    const count = 10_000;
    const start = Date.now();
    for (let i = 0; i < count; i++) {
      const run_id = `synthetic-${i}`;
      const at = new Date().toISOString();
      bus.publish({ type: 'ToolInvocationEvent', at, run_id, trace_id: run_id, tool: 'demo.synthetic', input: { i }, caller: 'test' });
      bus.publish({
        type: 'ToolResultEvent',
        at,
        run_id,
        trace_id: run_id,
        tool: 'demo.synthetic',
        duration_ms: 1,
        output_bytes: 10,
        input: { i },
        output: { i },
        vfs: null,
        attempts: 1,
      });
      // Let the socket drain now and then: the gateway drops a reader more than 8 MB behind.
      if (i % 500 === 499) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await page.waitForFunction(
      (want) => {
        const text = document.querySelector('[data-testid=activity-count]')?.textContent ?? '';
        return Number(/(\d+) events/.exec(text)?.[1] ?? 0) >= want;
      },
      count * 2,
      { timeout: 30_000 },
    );
    timings.activity_20k_events_streamed = Date.now() - start;
    const rendered = await page.locator('.act-row').count();
    expect(rendered).toBeLessThan(200);
    await page.locator('.act-row[data-run="synthetic-9999"]').waitFor();
  }, 40_000);

  it('asks for the API key when the gateway needs one, then works with it', async () => {
    const keyed = mkdtempSync(join(tmpdir(), 'arium-inspector-key-'));
    cpSync(join(ROOT, 'workspace', 'demo'), join(keyed, 'demo'), { recursive: true, filter: (source) => !source.includes('.arium') });
    const second = await createGateway({ workspace: keyed, project: 'demo', apiKey: 'open-sesame', engineOptions: { persist: false } });
    const secondBase = await second.app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
      contexts.push(context);
      context.setDefaultTimeout(10_000);
      const page = await context.newPage();
      page.on('request', (request) => requests.push(request.url()));
      page.on('console', (message) => {
        // The requests refused before the key is given are expected 401s.
        if (/Content Security Policy|Refused to/i.test(message.text())) consoleProblems.push(message.text());
      });
      page.on('pageerror', (error) => pageErrors.push(error.message));
      await page.goto(`${secondBase}/`);
      const dialog = page.getByRole('dialog', { name: 'API key needed' });
      await dialog.waitFor();
      // Nothing entered: the prompt says what it wants instead of doing nothing.
      await dialog.getByRole('button', { name: 'Use key' }).click();
      await expectText(dialog, 'Enter the key first.');
      // A wrong key: the prompt comes back saying the key was refused.
      await dialog.getByLabel('API key').fill('wrong-key');
      await dialog.getByRole('button', { name: 'Use key' }).click();
      await expectText(page.getByRole('dialog', { name: 'API key needed' }), 'The gateway refused the key given before');
      await dialog.getByLabel('API key').fill('open-sesame');
      await dialog.getByRole('button', { name: 'Use key' }).click();
      await expectText(page.getByTestId('tool-list'), 'demo.text-stats');
      await expect(page.evaluate(() => sessionStorage.getItem('arium.inspector.key'))).resolves.toBe('open-sesame');
      await tab(page, 'Activity');
      await page.locator('.stream.open').waitFor();
    } finally {
      await second.close();
      rmSync(keyed, { recursive: true, force: true });
    }
  });

  it('follows the system colour scheme, and a toggle saved in localStorage', async () => {
    const page = await open('/#activity', { colorScheme: 'dark' });
    await page.locator('.act-row').first().waitFor();
    await expect(page.evaluate(() => document.documentElement.dataset.theme)).resolves.toBe('dark');
    await page.locator('.act-row').first().click();
    await page.screenshot({ path: join(OUT, 'activity-dark.png') });
    await page.getByTestId('theme-toggle').click();
    await expect(page.evaluate(() => [document.documentElement.dataset.theme, localStorage.getItem('arium.inspector.theme')])).resolves.toEqual([
      'light',
      'light',
    ]);
    await page.reload();
    await page.getByRole('tab', { name: 'Activity' }).waitFor();
    await expect(page.evaluate(() => document.documentElement.dataset.theme)).resolves.toBe('light');
  });

  it('brings the result of a call from a long form into view and gives it the focus', async () => {
    // A short window: the form of fs.write fills it, so the result lands below the fold.
    const page = await open('/', { height: 560 });
    await tab(page, 'Tools');
    await page.locator('.tool-item', { hasText: 'fs.write' }).click();
    const form = page.locator('form.run-form');
    await form.locator('[data-pointer="/path"] input').fill('/notes/fold.md');
    await form.locator('[data-pointer="/content"] textarea').fill('one\ntwo\nthree\n');
    await form.getByRole('button', { name: 'Run' }).click();
    await expectText(page.getByTestId('run-result'), '"bytes_written"');
    await expect.poll(() => placement(page, '[data-testid=run-result]')).toEqual({ visible: true, focused: true });
    await page.screenshot({ path: join(OUT, 'result-in-view.png') });

    // A violation shown on a field takes the focus to that field instead.
    await form.locator('[data-pointer="/path"] input').fill('');
    await form.getByRole('button', { name: 'Run' }).click();
    await expectText(form.locator('.field-errors[data-pointer="/path"]'), 'must NOT have fewer than 1 characters');
    await expect.poll(() => page.evaluate(() => document.activeElement?.closest('[data-pointer]')?.getAttribute('data-pointer'))).toBe('/path');
  });

  it('draws a diff returned in a call’s output as a diff, in Tools and in Activity, in both themes', async () => {
    let earlierRun: string | null = null;
    for (const colorScheme of ['light', 'dark'] as const) {
      const page = await open('/', { colorScheme });
      await runFsWrite(page, `/notes/diffed-${colorScheme}.md`, 'alpha\nbeta\ngamma\n');
      const form = page.locator('form.run-form');
      await form.locator('[data-pointer="/content"] textarea').fill('alpha\nBETA\ngamma\ndelta\n');
      await form.locator('[data-pointer="/diff"] input').check();
      await form.getByRole('button', { name: 'Run' }).click();
      const result = page.getByTestId('run-result');
      const patch = result.locator('.output-patch[data-pointer="/diff"]');
      await patch.locator('.d2h-code-line-ctn').first().waitFor();
      await expect
        .poll(() => diffLines(page, '[data-testid=run-result] .output-patch'), { timeout: 15_000 })
        .toEqual({ added: ['BETA', 'delta'], removed: ['beta'] });
      await expect(patch.locator('.diff-stats').textContent()).resolves.toBe('/diff +2 −1');
      // The pane scrolled to the result: each line number still sits on its line.
      await expect(page.locator('section.main[aria-label="Tool"]').evaluate((element) => element.scrollTop)).resolves.toBeGreaterThan(0);
      const offsets = await patch.evaluate((element) =>
        [...element.querySelectorAll('.d2h-code-side-linenumber')].map(
          (cell) => cell.getBoundingClientRect().top - (cell.closest('tr') as HTMLElement).getBoundingClientRect().top,
        ),
      );
      expect(offsets.length).toBeGreaterThan(0);
      for (const offset of offsets) expect(Math.abs(offset)).toBeLessThan(2);
      // The JSON beside it keeps the other fields and no longer carries the patch as an escaped string.
      const json = (await result.locator('.data > pre.code').first().textContent()) ?? '';
      expect(json).toContain('"added": 2');
      expect(json).not.toContain('@@');
      await page.screenshot({ path: join(OUT, `output-diff-${colorScheme}.png`) });

      const runId = (await result.locator('.run-id').textContent()) ?? '';
      await tab(page, 'Activity');
      await page.locator(`.act-row[data-run="${runId}"]`).click();
      const detail = page.getByTestId('call-detail');
      await detail.locator('.output-patch .d2h-code-line-ctn').first().waitFor();
      await expect
        .poll(() => diffLines(page, '[data-testid=call-detail] .output-patch'), { timeout: 15_000 })
        .toEqual({ added: ['BETA', 'delta'], removed: ['beta'] });
      await page.screenshot({ path: join(OUT, `activity-output-diff-${colorScheme}.png`) });
      if (earlierRun) {
        // Another call's details (as long as these) start at their top, however far down the last one was read.
        const pane = page.locator('section.main[aria-label="Call details"]');
        await pane.evaluate((element) => element.scrollTo(0, element.scrollHeight));
        await expect(pane.evaluate((element) => element.scrollTop)).resolves.toBeGreaterThan(0);
        await page.locator(`.act-row[data-run="${earlierRun}"]`).click();
        await detail.locator('.output-patch .d2h-code-line-ctn').first().waitFor();
        await expect.poll(() => pane.evaluate((element) => element.scrollTop)).toBe(0);
      }
      earlierRun = runId;
      await page.context().close();
    }
  });

  it('shows text of several lines in a call’s output and input as text, not as an escaped JSON string', async () => {
    engine().vfs.write('/notes/poem.md', 'roses\nviolets\n  indented\n');
    const page = await open('/');
    await tab(page, 'Tools');
    await page.locator('.tool-item', { hasText: 'fs.read' }).click();
    const form = page.locator('form.run-form');
    await form.locator('[data-pointer="/path"] input').fill('/notes/poem.md');
    await form.getByRole('button', { name: 'Run' }).click();
    const result = page.getByTestId('run-result');
    const text = result.locator('.output-text[data-pointer="/content"] pre');
    await text.waitFor();
    await expect(text.textContent()).resolves.toBe('roses\nviolets\n  indented\n');
    await expect(result.locator('.data > pre.code').first().textContent()).resolves.not.toContain('\\n');
    await page.screenshot({ path: join(OUT, 'output-text.png') });

    // In Activity, a write's content (its input) reads the same way.
    const runId = await runFsWrite(page, '/notes/poem-copy.md', 'one\ntwo\n');
    await tab(page, 'Activity');
    await page.locator(`.act-row[data-run="${runId}"]`).click();
    await expect(page.getByTestId('call-detail').locator('.output-text[data-pointer="/content"] pre').textContent()).resolves.toBe('one\ntwo\n');
  });

  it('says in plain words whether Activity receives events, and that it retries when it cannot', async () => {
    const page = await open('/#activity');
    const status = page.getByTestId('stream-status');
    await expectText(status, 'live: receiving events');
    await expect(status.getAttribute('title')).resolves.toMatch(/event stream/);
    // An empty list says why it is empty.
    await page.locator('.filters input[type=search]').fill('no-such-run');
    await expectText(page.getByTestId('activity-empty'), 'No call matches these filters.');
    await page.locator('.filters input[type=search]').fill('');
    await page.screenshot({ path: join(OUT, 'activity-live.png') });

    // A page whose event stream is refused: it says so, and that it keeps trying; once let through, it is live.
    const cut = await open('/#activity', { colorScheme: 'dark' });
    await cut.route('**/v1/events*', (route) => route.abort());
    await cut.reload();
    const cutStatus = cut.getByTestId('stream-status');
    await expectText(cutStatus, 'disconnected — retrying');
    await expect(cutStatus.getAttribute('title')).resolves.toMatch(/tries again/);
    await cut.screenshot({ path: join(OUT, 'activity-disconnected-dark.png') });
    await cut.unroute('**/v1/events*');
    await expectText(cutStatus, 'live: receiving events', 20_000);
  });

  it('shows a code.run program with its calls below it, as a tree by parent_run_id', async () => {
    const page = await open('/#activity');
    await expectText(page.getByTestId('stream-status'), 'live: receiving events');
    const code = `await tools.fs.write({ path: '/tree/a.txt', content: 'a' }); return (await tools.fs.read({ path: '/tree/a.txt' })).content;`;
    const result = await engine().call('code.run', { code });
    expect(result.ok).toBe(true);
    const outer = result.meta.run_id;
    const program = page.locator(`.act-row[data-run="${outer}"]`);
    await program.waitFor();
    const programIndex = Number(await program.getAttribute('data-index'));
    // The two calls follow the program, in the order it made them, marked as inner calls.
    const next = page.locator(`.act-row[data-index="${programIndex + 1}"]`);
    const after = page.locator(`.act-row[data-index="${programIndex + 2}"]`);
    await expectText(next, '↳ fs.write');
    await expectText(after, '↳ fs.read');
    await next.click();
    await expectText(page.getByTestId('call-detail'), outer);
    await page.screenshot({ path: join(OUT, 'activity-code-run-tree.png') });
  });

  it('says when a waiting call times out, and why Approve is disabled until “Answer as” is filled', async () => {
    engine().vfs.write('/gate/wait.txt', 'w');
    const waiting = engine().call('fs.delete', { path: '/gate/wait.txt' }, { caller: 'browser-test' });
    for (const colorScheme of ['light', 'dark'] as const) {
      const page = await open('/#approvals', { colorScheme });
      const item = page.locator('.approval', { hasText: '/gate/wait.txt' });
      await item.waitFor();
      const text = (await item.textContent()) ?? '';
      expect(text).toMatch(/waits until \d\d:\d\d:\d\d \(\d+:\d\d left\), then is denied \(timeout\)/);
      expect(text).not.toContain('denied as timed out');
      // The countdown runs.
      const first = await item.getByTestId('countdown').textContent();
      await expect.poll(() => item.getByTestId('countdown').textContent(), { timeout: 5_000 }).not.toBe(first);

      // No name yet: the buttons are disabled and say, next to them and to assistive technology, what enables them.
      const approve = item.getByRole('button', { name: 'Approve' });
      await expect(approve.isDisabled()).resolves.toBe(true);
      const why = await approve.evaluate((button) => document.getElementById(button.getAttribute('aria-describedby') ?? '')?.textContent ?? '');
      expect(why).toContain('fill in “Answer as”');
      await expect(item.locator('.why-disabled').isVisible()).resolves.toBe(true);
      await page.screenshot({ path: join(OUT, `approvals-why-${colorScheme}.png`) });
      // Its link takes the focus to the field; once filled, the buttons work and the hint is gone.
      await item.getByRole('button', { name: 'fill in “Answer as”' }).click();
      await expect(page.evaluate(() => document.activeElement?.id)).resolves.toBe('approver');
      await page.keyboard.type('browser-user');
      await expect(approve.isEnabled()).resolves.toBe(true);
      await expect(item.locator('.why-disabled').count()).resolves.toBe(0);
      if (colorScheme === 'dark') {
        await item.getByRole('button', { name: 'Deny' }).click();
        await expectText(page.getByTestId('approvals'), 'No calls wait for approval.');
      }
      await page.context().close();
    }
    const answered = await waiting;
    expect(answered.ok ? null : answered.error).toMatchObject({ code: 'APPROVAL_DENIED', details: { by: 'browser-user' } });
  });

  it('lists a call waiting for approval in the Approvals panel, and approves or denies it from there', async () => {
    engine().vfs.write('/gate/a.txt', 'a');
    engine().vfs.write('/gate/b.txt', 'b');
    const first = engine().call('fs.delete', { path: '/gate/a.txt' }, { caller: 'browser-test' });
    expect(engine().approvals()).toHaveLength(1);
    const page = await open('/#approvals');
    const item = page.locator('.approval', { hasText: 'fs.delete' });
    await expectText(item, '/gate/a.txt');
    await expectText(page.getByTestId('approvals-count'), '1');
    await expectText(item, 'asked by browser-test');
    await page.getByLabel('Answer as').fill('browser-user');
    await page.screenshot({ path: join(OUT, 'approvals.png') });
    await item.getByRole('button', { name: 'Approve' }).click();
    expect((await first).ok).toBe(true);
    expect(engine().vfs.exists('/gate/a.txt')).toBe(false);
    await expectText(page.getByTestId('approvals'), 'No calls wait for approval.');

    // The next one reaches the page through the event stream: wait until it is connected.
    await tab(page, 'Activity');
    await page.locator('.stream.open').waitFor();
    await tab(page, 'Approvals');
    const second = engine().call('fs.delete', { path: '/gate/b.txt' });
    const next = page.locator('.approval', { hasText: '/gate/b.txt' });
    await next.waitFor();
    await next.getByPlaceholder('reason (for a denial)').fill('keep b');
    await next.getByRole('button', { name: 'Deny' }).click();
    const denied = await second;
    expect(denied.ok ? null : denied.error).toMatchObject({ code: 'APPROVAL_DENIED', details: { by: 'browser-user', reason: 'keep b' } });
    expect(engine().vfs.read('/gate/b.txt').toString()).toBe('b');
    await expectText(page.getByTestId('approvals'), 'No calls wait for approval.');
  });

  it('requested nothing from outside this server, with no CSP violation, page error or dialog', () => {
    expect(requests.length).toBeGreaterThan(20);
    const outside = requests.filter((url) => !/^http:\/\/127\.0\.0\.1:\d+\//.test(url) && url !== 'data:,');
    expect(outside).toEqual([]);
    expect(consoleProblems).toEqual([]);
    // The only failed requests are the invalid inputs the first test sends on purpose.
    expect(failed.length).toBeGreaterThan(0);
    expect(failed.filter((line) => line !== '400 POST /v1/tools/fs.write:run')).toEqual([]);
    expect(pageErrors).toEqual([]);
    expect(dialogs).toEqual([]);
    // The built page names no other host: only XML namespace identifiers and highlight.js's own
    // documentation links in its console warnings, neither of which is ever requested.
    const allowed = [/^http:\/\/www\.w3\.org\//, /^https:\/\/github\.com\/highlightjs\/highlight\.js\//];
    for (const file of ['index.html', ...readdirSync(join(BUILT, 'assets')).map((name) => join('assets', name))]) {
      const text = readFileSync(join(BUILT, file), 'utf8');
      const urls = text.match(/(?:https?:)?\/\/[a-z0-9.-]+\.[a-z]{2,}[^\s"'`)]*/gi) ?? [];
      expect(
        urls.filter((url) => !allowed.some((re) => re.test(url))),
        file,
      ).toEqual([]);
    }
  });
});
