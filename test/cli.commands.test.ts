import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import { installAdvice } from '../runners/js/locate.js';
import { checkIsolatedVm } from '../runners/js/probe.js';
import { TOOL_META_SCHEMA } from '../src/index.js';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
});
afterEach(() => ws.cleanup());

const cli = (args: string[], options?: Parameters<typeof runCli>[2]) => runCli(ws.root, args, options);
const P = ['--workspace', 'ws', '--project', 'p'];

describe('arium tools', () => {
  it('lists builtins and project tools, and reports bad definition files with the reason', async () => {
    writeFileSync(join(ws.workspace, 'p', 'tools', 'broken.json'), '{ "id": ');
    writeFileSync(
      join(ws.workspace, 'p', 'tools', 'nowhere.json'),
      JSON.stringify({ id: 'x.y', description: 'd', runner: 'py-runner', entry: 'gone.py', schema: { type: 'object' }, permissions: ['exec.py'] }),
    );
    const human = await cli(['tools', ...P]);
    expect(human.code).toBe(0);
    expect(human.out).toMatch(/fs\.read\s+builtin\s+vfs\.read/);
    expect(human.out).toContain('2 definition files did not load:');
    expect(human.out).toContain('tools/broken.json');
    expect(human.out).toMatch(/tools\/nowhere\.json.*gone\.py/);
    const json = parseJson(await cli(['tools', ...P, '--json']));
    expect(json.project).toBe('p');
    expect(json.tools.map((t: { id: string }) => t.id)).toEqual(expect.arrayContaining(['fs.read', 'fs.write', 'vfs.snapshot', 'system.hash']));
    expect(json.tools.find((t: { id: string }) => t.id === 'fs.read')).toMatchObject({
      runner: 'builtin',
      permissions: ['vfs.read'],
      schema: { type: 'object' },
    });
    expect(json.problems.map((p: { file: string }) => p.file).sort()).toEqual(['tools/broken.json', 'tools/nowhere.json']);
    expect(json.problems.every((p: { message: string }) => p.message.length > 0)).toBe(true);
  });

  it('--format prints the tools in a function-calling schema; a wrong vendor or --strict without openai is a usage error', async () => {
    const openai = parseJson(await cli(['tools', ...P, '--format', 'openai', '--strict']));
    expect(openai.vendor).toBe('openai');
    expect(openai.names.fs__read).toBe('fs.read');
    expect(openai.tools.find((t: { function: { name: string } }) => t.function.name === 'fs__read')).toMatchObject({ type: 'function' });
    const anthropic = parseJson(await cli(['tools', ...P, '--format', 'anthropic']));
    expect(anthropic.tools.find((t: { name: string }) => t.name === 'fs__read')).toHaveProperty('input_schema');
    expect(openai.tools.find((t: { function: { name: string } }) => t.function.name === 'system__hash').function.strict).toBe(true);
    const gemini = parseJson(await cli(['tools', ...P, '--format', 'gemini']));
    expect(gemini.tools.find((t: { name: string }) => t.name === 'system__hash').parameters.oneOf).toBeUndefined();
    expect(gemini.rewrites).toContainEqual({ tool: 'system.hash', message: expect.stringContaining('top-level oneOf merged') });
    const wrong = await cli(['tools', ...P, '--format', 'cohere']);
    expect(wrong.code).toBe(2);
    expect(wrong.err).toContain('--format takes openai, anthropic, gemini, mcp (got "cohere")');
    expect((await cli(['tools', ...P, '--format', 'mcp', '--strict'])).code).toBe(2);
  });
});

describe('arium call', () => {
  it('takes the input inline, from a file and from stdin', async () => {
    const write = await cli(['call', 'fs.write', '{"path":"/a.txt","content":"hi\\n"}', ...P, '--json']);
    expect(write.code).toBe(0);
    expect(parseJson(write)).toMatchObject({ ok: true, data: { created: true }, meta: { tool: 'fs.write' } });
    writeFileSync(join(ws.root, 'in.json'), '{\n  "path": "/a.txt"\n}\n');
    expect(parseJson(await cli(['call', 'fs.read', '@in.json', ...P, '--json'])).data.content).toBe('hi\n');
    expect(parseJson(await cli(['call', 'fs.stat', '-', ...P, '--json'], { stdin: '{"path":"/a.txt"}' })).data.size).toBe(3);
    expect(parseJson(await cli(['call', 'fs.list', ...P, '--json'])).data.path).toBe('/'); // no input is {}: fs.list lists /
  });

  it('prints the data for people, with the diff fs.write returns (when asked) as a patch', async () => {
    await cli(['call', 'fs.write', '{"path":"/a.txt","content":"one\\n"}', ...P]);
    const r = await cli(['call', 'fs.write', '{"path":"/a.txt","content":"two\\n","diff":true}', ...P]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^ok fs\.write · [\d.]+ ms · run [0-9a-f]{8}/);
    expect(r.out).toContain('\n-one\n+two');
  });

  it('exits 1 on a failed result and shows stage, code, message and details', async () => {
    const missing = await cli(['call', 'fs.read', '{"path":"/nope"}', ...P]);
    expect(missing.code).toBe(1);
    expect(missing.out).toContain('NOT_FOUND at execution');
    const invalid = await cli(['call', 'fs.read', '{"pth":1}', ...P]);
    expect(invalid.out).toContain('INVALID_INPUT at validation');
    expect(invalid.out).toContain('/pth is not an allowed property');
    const denied = await cli(['call', 'fs.write', '{"path":"/b","content":"x"}', ...P, '--grant', 'vfs.read', '--json']);
    expect(denied.code).toBe(1);
    expect(parseJson(denied)).toMatchObject({ ok: false, error: { stage: 'permission', code: 'DENIED', details: { permission: 'vfs.write' } } });
    const unknown = await cli(['call', 'fs.reed', '{}', ...P, '--json']);
    expect(parseJson(unknown).error).toMatchObject({ stage: 'validation', code: 'UNKNOWN_TOOL' });
  });

  it('passes --trace-id and --timeout to the call', async () => {
    const r = parseJson(await cli(['call', 'fs.list', '{"path":"/"}', ...P, '--trace-id', 'trace-42', '--timeout', '500', '--json']));
    expect(r.meta.trace_id).toBe('trace-42');
    expect((await cli(['call', 'fs.list', '{}', ...P, '--timeout', 'soon'])).err).toContain('--timeout needs a whole number');
  });

  test.each([
    { input: ['{path:'], fragment: 'The input argument is not valid JSON' },
    { input: ['{"a":1}', 'extra'], fragment: 'Unexpected argument "extra"' },
    { input: ['@missing.json'], fragment: 'Cannot read the input file' },
    { input: ['@'], fragment: '"@" needs a file name' },
    { input: ['@ws'], fragment: 'it is a folder' },
    { input: ['-'], fragment: 'The input from stdin is empty' },
    { input: [], fragment: 'arium call needs a tool id', noId: true },
  ])('a bad input is a usage error: $fragment', async ({ input, fragment, noId }) => {
    const r = await cli(['call', ...(noId ? [] : ['fs.read']), ...input, ...P]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(fragment);
  });

  it('says on which line and column a file holds bad JSON', async () => {
    writeFileSync(join(ws.root, 'bad.json'), '{\n  "path": "/a",\n  oops\n}\n');
    const r = await cli(['call', 'fs.read', '@bad.json', ...P]);
    expect(r.err).toContain(`in ${join(ws.root, 'bad.json')} is not valid JSON`);
    expect(r.err).toMatch(/line 3/);
  });
});

describe('arium schema', () => {
  it('prints the tool definition schema', async () => {
    const r = await cli(['schema']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toEqual(JSON.parse(JSON.stringify(TOOL_META_SCHEMA)));
  });
});

describe('history and transfer commands', () => {
  it('snapshot, log, diff and restore work across separate invocations (the state persists)', async () => {
    await cli(['call', 'fs.write', '{"path":"/doc.txt","content":"one\\n"}', ...P]);
    const snap = await cli(['snapshot', '--label', 'v1', ...P, '--json']);
    expect(snap.code).toBe(0);
    const id = parseJson(snap).id as string;
    await cli(['call', 'fs.write', '{"path":"/doc.txt","content":"two\\n"}', ...P]);
    const diff = await cli(['diff', 'v1', ...P]);
    expect(diff.out).toContain('M /doc.txt');
    expect(diff.out).toContain('-one');
    expect(diff.out).toContain('+two');
    expect((await cli(['diff', 'v1', ...P, '--stat'])).out).not.toContain('+two');
    expect(parseJson(await cli(['log', ...P, '--json'])).snapshots[0].id).toBe(id);
    expect((await cli(['restore', 'v1', ...P])).out).toContain('undoes this');
    expect(parseJson(await cli(['call', 'fs.read', '{"path":"/doc.txt"}', ...P, '--json'])).data.content).toBe('one\n');
    const unknown = await cli(['restore', 'nope', ...P, '--json']);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain('Unknown snapshot');
    expect(parseJson(unknown).ok).toBe(false);
    expect((await cli(['gc', ...P])).out).toContain('kept');
  });

  it('imports and exports host folders', async () => {
    mkdirSync(join(ws.root, 'src'));
    writeFileSync(join(ws.root, 'src', 'x.txt'), 'x');
    expect((await cli(['import', 'src', '/in', ...P])).out).toContain('imported 1 files');
    expect((await cli(['export', '/in', 'out', ...P])).code).toBe(0);
    expect(readFileSync(join(ws.root, 'out', 'x.txt'), 'utf8')).toBe('x');
    const again = await cli(['export', '/in', 'out', ...P]);
    expect(again.code).toBe(1);
    expect(again.err).toContain('not empty (add --overwrite to write into it)');
    expect((await cli(['export', '/in', 'out', '--overwrite', ...P])).code).toBe(0);
  });
});

describe('arium doctor on isolated-vm', () => {
  it('gives the advice a JS call gives: the isolated-vm line that builds on this Node', async () => {
    const missing = await checkIsolatedVm(() => {
      throw new Error('Cannot find module isolated-vm/package.json');
    });
    expect(missing).toMatchObject({ name: 'isolated-vm', ok: false, detail: 'not installed', fix: installAdvice() });
    expect(installAdvice('20.20.2')).toContain('`npm install isolated-vm@5`');
    expect(installAdvice('22.1.0')).toContain('`npm install isolated-vm@6`');
    expect(installAdvice('24.21.0')).toContain('`npm install isolated-vm@6`');
    expect(installAdvice('24.21.0')).toContain('On Node 24.21.0');
  });
});
