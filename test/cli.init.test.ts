import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
});
afterEach(() => ws.cleanup());

const cli = (args: string[]) => runCli(ws.root, args);
const EXAMPLES = ['tools/text-upper.json', 'tools/upper.js', 'tools/text-words.json', 'tools/words.py', 'arium.json'];

describe('arium init', () => {
  it('creates a project whose example tools load without problems', async () => {
    const made = await cli(['init', 'fresh', '--workspace', 'ws']);
    expect(made.code).toBe(0);
    expect(made.out).toContain('created project fresh');
    for (const file of EXAMPLES) expect(existsSync(join(ws.workspace, 'fresh', file))).toBe(true);
    const tools = parseJson(await cli(['tools', '--workspace', 'ws', '--project', 'fresh', '--json']));
    expect(tools.problems).toEqual([]);
    // The runners that bring their own tools (the builtins, code.run) are not the example's.
    const own = tools.tools.filter((t: { runner: string }) => !['builtin', 'code'].includes(t.runner));
    expect(own.map((t: { id: string; runner: string }) => [t.id, t.runner]).sort()).toEqual([
      ['text.upper', 'js-runner'],
      ['text.words', 'py-runner'],
    ]);
  });

  it('points $schema at the published schemas, relative to wherever the workspace is', async () => {
    await cli(['init', 'fresh', '--workspace', 'ws']);
    const toolsDir = join(ws.workspace, 'fresh', 'tools');
    const def = JSON.parse(readFileSync(join(toolsDir, 'text-upper.json'), 'utf8'));
    expect(existsSync(resolve(toolsDir, def.$schema))).toBe(true);
    const config = JSON.parse(readFileSync(join(ws.workspace, 'fresh', 'arium.json'), 'utf8'));
    expect(resolve(dirname(toolsDir), config.$schema)).toMatch(/schema[/\\]project\.schema\.json$/);
    // A new project keeps an audit log, so `arium events` shows its calls from the start.
    expect(config.audit_log).toBe(true);
    expect((await cli(['call', 'fs.write', '{"path":"/a","content":"a"}', '--workspace', 'ws', '--project', 'fresh'])).code).toBe(0);
    const events = await cli(['events', '--workspace', 'ws', '--project', 'fresh', '--json']);
    expect(events.code).toBe(0);
    expect(events.out).toContain('"tool":"fs.write"');
  });

  it('--format yaml writes the definitions in YAML, which load and run as the JSON ones do', async () => {
    const made = parseJson(await cli(['init', 'fresh', '--format', 'yaml', '--workspace', 'ws', '--json']));
    expect(made.created).toEqual(['tools/text-upper.yaml', 'tools/upper.js', 'tools/text-words.yaml', 'tools/words.py', 'arium.json']);
    const toolsDir = join(ws.workspace, 'fresh', 'tools');
    const text = readFileSync(join(toolsDir, 'text-upper.yaml'), 'utf8');
    const ref = /^# yaml-language-server: \$schema=(.+)\n/.exec(text)?.[1];
    expect(ref && existsSync(resolve(toolsDir, ref))).toBe(true);
    const tools = parseJson(await cli(['tools', '--workspace', 'ws', '--project', 'fresh', '--json']));
    expect(tools.problems).toEqual([]);
    expect(tools.tools.filter((t: { runner: string }) => !['builtin', 'code'].includes(t.runner)).map((t: { id: string }) => t.id)).toEqual([
      'text.upper',
      'text.words',
    ]);
    const called = parseJson(await cli(['call', 'text.upper', '{"text":"hi"}', '--workspace', 'ws', '--project', 'fresh', '--json']));
    expect(called).toMatchObject({ ok: true, data: { text: 'HI' } });
    const wrong = await cli(['init', 'other', '--format', 'toml', '--workspace', 'ws']);
    expect(wrong.code).toBe(2);
    expect(wrong.err).toContain('--format toml: the tool definitions are written as json or yaml');
  });

  it('takes the name from --project, then "demo"', async () => {
    expect((await cli(['init', '--workspace', 'ws', '--project', 'viaflag'])).code).toBe(0);
    expect(existsSync(join(ws.workspace, 'viaflag', 'tools', 'upper.js'))).toBe(true);
    expect((await cli(['init', '--workspace', 'ws'])).code).toBe(0);
    expect(existsSync(join(ws.workspace, 'demo', 'arium.json'))).toBe(true);
    const both = await cli(['init', 'a', '--project', 'b', '--workspace', 'ws']);
    expect(both.code).toBe(2);
    expect(both.err).toContain('Two project names: "a" and --project b');
  });

  it('refuses an existing, non-empty project unless --force, which rewrites only the example files', async () => {
    await cli(['init', 'fresh', '--workspace', 'ws']);
    const upper = join(ws.workspace, 'fresh', 'tools', 'upper.js');
    const mine = join(ws.workspace, 'fresh', 'tools', 'mine.js');
    writeFileSync(upper, '// edited');
    writeFileSync(mine, '// my own tool');
    const again = await cli(['init', 'fresh', '--workspace', 'ws']);
    expect(again.code).toBe(2);
    expect(again.err).toContain('Project "fresh" already exists');
    expect(again.err).toContain('--force');
    expect(readFileSync(upper, 'utf8')).toBe('// edited');
    const forced = parseJson(await cli(['init', 'fresh', '--workspace', 'ws', '--force', '--json']));
    expect(forced).toMatchObject({ project: 'fresh', created: [] });
    expect(forced.overwritten).toEqual(EXAMPLES);
    expect(readFileSync(upper, 'utf8')).toContain('toUpperCase');
    expect(readFileSync(mine, 'utf8')).toBe('// my own tool');
  });

  it('accepts an existing empty folder', async () => {
    mkdirSync(join(ws.workspace, 'empty'));
    const r = parseJson(await cli(['init', 'empty', '--workspace', 'ws', '--json']));
    expect(r.created).toEqual(EXAMPLES);
  });

  test.each(['../evil', 'a/b', '.hidden', '-x', 'x'.repeat(65), 'a..b', 'sp ace'])('refuses the project name %j', async (name) => {
    const r = await cli(['init', '--workspace', 'ws', '--', name]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`Invalid project name "${name}"`);
    expect(existsSync(join(ws.workspace, name))).toBe(false);
  });

  it('a file where the project folder should be is an exit 3 that says so', async () => {
    writeFileSync(join(ws.workspace, 'afile'), 'x');
    const r = await cli(['init', 'afile', '--workspace', 'ws']);
    expect(r.code).toBe(3);
    expect(r.err).toContain('exists and is not a folder');
  });
});
