import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { JsRunner } from '../runners/js/index.js';
import { isolatedVmDir } from '../runners/js/locate.js';
import { createEngine } from '../src/index.js';
import { dataOf, errorOf, JS_FIXTURES, jsEngine } from './support/js-engine.js';

// What happens around the sandbox: isolated-vm missing or broken, status, shutdown, code changes.

const temp = mkdtempSync(join(tmpdir(), 'arium-js-'));

afterAll(() => {
  rmSync(temp, { recursive: true, force: true });
});

describe('without a working isolated-vm', () => {
  it.each([
    ['missing', () => join(temp, 'no-such-isolated-vm')],
    [
      'failing to load',
      () => {
        const dir = join(temp, 'broken-isolated-vm');
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'isolated-vm', version: '0.0.0', main: 'index.js' }));
        writeFileSync(join(dir, 'index.js'), "throw new Error('The module was compiled against a different Node.js version');");
        return dir;
      },
    ],
  ])('builtins still work and a JS call is MISCONFIGURED (not retryable) with how to fix it (isolated-vm %s)', async (_case, dir) => {
    const runner = new JsRunner({ isolatedVm: dir() });
    const engine = await jsEngine('project', { runners: [runner] });
    try {
      dataOf(await engine.call('fs.write', { path: '/still.txt', content: 'works' }));
      const error = errorOf(await engine.call('reverse', { text: 'x' }));
      expect(error).toMatchObject({ code: 'MISCONFIGURED', stage: 'execution', retryable: false });
      expect(error.message).toMatch(/npm install isolated-vm@[56]/);
      expect(error.message).not.toContain(temp);
      const status = await engine.status();
      expect(status.runners['js-runner']).toMatchObject({ available: false });
      expect(String(status.runners['js-runner']?.reason)).toContain('isolated-vm');
    } finally {
      await engine.close();
    }
  });
});

describe('which isolated-vm the runner loads', () => {
  /** A project whose node_modules holds the given folders, each an isolated-vm of that version; where lookups start. */
  function project(name: string, installed: Record<string, string>): string {
    const root = join(temp, name);
    for (const [folder, version] of Object.entries(installed)) {
      const dir = join(root, 'node_modules', folder);
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'isolated-vm', version, main: 'index.js' }));
      writeFileSync(join(dir, 'index.js'), '');
    }
    return pathToFileURL(join(root, 'index.js')).href;
  }

  it('takes the line made for the running Node from the aliases a plain npm install leaves', () => {
    const both = project('both-lines', { 'isolated-vm-5': '5.0.4', 'isolated-vm-6': '6.2.0' });
    const modules = join(temp, 'both-lines', 'node_modules');
    expect(isolatedVmDir('20.20.2', both)).toBe(join(modules, 'isolated-vm-5'));
    expect(isolatedVmDir('22.23.3', both)).toBe(join(modules, 'isolated-vm-6'));
    expect(isolatedVmDir('24.21.0', both)).toBe(join(modules, 'isolated-vm-6'));
  });

  it('prefers an isolated-vm installed under its own name, when it fits this Node', () => {
    const own = project('own-line', { 'isolated-vm': '6.1.2', 'isolated-vm-5': '5.0.4', 'isolated-vm-6': '6.2.0' });
    const modules = join(temp, 'own-line', 'node_modules');
    expect(isolatedVmDir('24.21.0', own)).toBe(join(modules, 'isolated-vm'));
    expect(isolatedVmDir('20.20.2', own)).toBe(join(modules, 'isolated-vm-5'));
  });

  it('falls back to a line that does not fit (its load error is the clearer message), and to null without any', () => {
    const stale = project('stale-line', { 'isolated-vm-5': '5.0.4' });
    expect(isolatedVmDir('24.21.0', stale)).toBe(join(temp, 'stale-line', 'node_modules', 'isolated-vm-5'));
    expect(isolatedVmDir('24.21.0', project('no-line', {}))).toBeNull();
  });
});

describe('status and shutdown', () => {
  it('reports the isolation in force, and engine.close() ends the sandbox process', async () => {
    const engine = await jsEngine('project');
    const status = (await engine.status()).runners['js-runner'];
    expect(status).toMatchObject({ available: true, isolated_vm: expect.stringMatching(/^\d+\./), node: process.version });
    expect(String(status?.isolation)).toContain('isolated-vm');
    const pid = status?.pid as number;
    expect(() => process.kill(pid, 0)).not.toThrow();
    await engine.close();
    expect(() => process.kill(pid, 0)).toThrow();
    expect(errorOf(await engine.call('reverse', { text: 'x' })).code).toBe('UNAVAILABLE');
  });
});

describe('tool code', () => {
  it('refuses code too large for the memory limit before compiling it', async () => {
    const workspace = join(temp, 'ws-big');
    mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
    const tools = join(workspace, 'p', 'tools');
    writeFileSync(join(tools, 'big.js'), `// ${'x'.repeat(1_200_000)}\nexport default () => 1;\n`);
    writeFileSync(
      join(tools, 'big.json'),
      JSON.stringify({
        id: 'big',
        description: 'big',
        runner: 'js-runner',
        entry: 'big.js',
        schema: { type: 'object' },
        permissions: ['exec.js'],
        limits: { memory_mb: 8 },
      }),
    );
    const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false });
    try {
      const error = errorOf(await engine.call('big', {}));
      expect(error).toMatchObject({ code: 'TOOL_ERROR' });
      expect(error.message).toContain('too large for its memory limit of 8 MB');
    } finally {
      await engine.close();
    }
  });

  it('picks up a changed imported file on the next call, without a reload of the definitions', async () => {
    const workspace = join(temp, 'ws');
    cpSync(join(JS_FIXTURES, 'project'), join(workspace, 'p'), { recursive: true });
    const engine = await createEngine({ workspace, project: 'p', watch: false, persist: false });
    try {
      expect(dataOf(await engine.call('greet', { name: 'Bo' }))).toMatchObject({ text: 'Hello, Bo.' });
      const lib = join(workspace, 'p', 'tools', 'lib', 'format.ts');
      writeFileSync(lib, "export function format(name: string, p = '!') { const text = 'Hi ' + name + p; return { text, length: text.length }; }\n");
      expect(dataOf(await engine.call('greet', { name: 'Bo' }))).toMatchObject({ text: 'Hi Bo.' });
      writeFileSync(lib, 'export function format( {\n');
      const error = errorOf(await engine.call('greet', { name: 'Bo' }));
      expect(error).toMatchObject({ code: 'TOOL_ERROR' });
      expect(error.message).toContain('tools/lib/format.ts');
    } finally {
      await engine.close();
    }
  });
});
