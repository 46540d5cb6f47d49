import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
});
afterEach(() => ws.cleanup());

const cli = (args: string[], options?: Parameters<typeof runCli>[2]) => runCli(ws.root, args, options);
const P = ['--workspace', 'ws', '--project', 'p'];
const COMMANDS = ['tools', 'call', 'init', 'doctor', 'demo', 'events', 'schema', 'snapshot', 'log', 'diff', 'restore', 'gc', 'import', 'export'];
const ANSI = '\u001b[';

describe('help', () => {
  it('lists every command, the global options and the exit codes', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    for (const name of COMMANDS) expect(r.out).toContain(`\n  ${name} `);
    expect(r.out).toContain('--workspace <dir>');
    expect(r.out).toContain('2  usage error');
    expect(r.out).toContain('3  engine or configuration error');
  });

  it('bare arium prints the help and exits 2', async () => {
    const r = await cli([]);
    expect(r.code).toBe(2);
    expect(r.out).toContain('Commands:');
  });

  test.each(COMMANDS)('arium %s --help shows its usage, options and exit codes', async (name) => {
    const r = await cli([name, '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(new RegExp(`^usage: arium ${name}`));
    expect(r.out).toContain('Global options:');
    expect(r.out).toContain('Exit codes:');
    expect((await cli([name, '-h'])).out).toBe(r.out);
  });

  it('documents command options and inputs', async () => {
    const call = (await cli(['call', '--help'])).out;
    expect(call).toContain('--trace-id <id>');
    expect(call).toContain('--timeout <ms>');
    expect(call).toContain('@input.json');
    expect((await cli(['init', '--help'])).out).toContain('--force');
  });
});

describe('usage errors exit 2 with a hint', () => {
  it('an unknown command suggests the nearest one', async () => {
    const r = await cli(['tols']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('unknown command "tols"; did you mean "tools"?');
    expect(r.out).toBe('');
  });

  it('an unknown option names the ones that exist, and the usage', async () => {
    const r = await cli(['tools', '--colour']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('arium tools: Unknown option --colour');
    expect(r.err).toContain('usage: arium tools');
    expect((await cli(['call', 'fs.read', '--timout', '5'])).err).toContain('did you mean --timeout?');
  });

  it('an option of another command is unknown here', async () => {
    expect((await cli(['tools', '--force'])).err).toContain('Unknown option --force');
  });

  it('extra arguments are named', async () => {
    const r = await cli(['tools', 'extra', ...P]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('Unexpected argument "extra"');
  });

  it('with --json, a usage error is still exactly one JSON document on stdout', async () => {
    for (const args of [
      ['tools', '--colour', '--json'],
      ['nope', '--json'],
      ['call', '--json', ...P],
      ['call', 'fs.read', '{bad', '--json', ...P],
    ]) {
      const r = await cli(args);
      expect(r.code).toBe(2);
      const doc = parseJson(r);
      expect(doc.ok).toBe(false);
      expect(doc.error.code).toBe('USAGE');
      expect(typeof doc.error.message).toBe('string');
    }
  });
});

describe('global options before the command', () => {
  it('work as after it, each of them', async () => {
    const after = await cli(['tools', ...P, '--json']);
    expect(after.code).toBe(0);
    for (const args of [
      [...P, '--json', 'tools'],
      ['--workspace=ws', '--project=p', 'tools', '--json'],
      ['--json', '--workspace', 'ws', 'tools', '--project', 'p'],
      ['--no-color', '--grant', 'vfs.read', ...P, 'tools', '--json'],
      ['--recover', ...P, '--json', 'tools'],
    ]) {
      const r = await cli(args);
      expect([args.join(' '), r.code, r.err]).toEqual([args.join(' '), 0, '']);
      expect(parseJson(r)).toEqual(parseJson(after));
    }
  });

  it('--help before a command shows its help; before nothing, the general help', async () => {
    expect((await cli(['--help', 'tools'])).out).toBe((await cli(['tools', '--help'])).out);
    expect((await cli([...P, '-h', 'call'])).out).toMatch(/^usage: arium call/);
    const general = await cli(['--project', 'p', '--help']);
    expect(general.code).toBe(0);
    expect(general.out).toContain('Commands:');
  });

  it('an unknown or command option before the command is a usage error that says what may come first', async () => {
    const r = await cli(['--colour', 'tools']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('unknown option --colour before the command; only global options');
    expect((await cli(['--projct', 'p', 'tools'])).err).toContain('unknown option --projct before the command; did you mean --project?');
    expect((await cli(['--force', 'init', 'x'])).err).toContain('only global options (--workspace, --project');
    const json = await cli(['--json', '--projct', 'p', 'tools']);
    expect(json.code).toBe(2);
    expect(parseJson(json).error.code).toBe('USAGE');
    expect((await cli(['--project'])).err).toContain('option --project needs a value');
    expect((await cli([...P, '--project', 'q', 'tools'])).err).toContain('Option --project is given twice');
  });
});

describe('engine and configuration errors exit 3', () => {
  it('a missing project says how to create it', async () => {
    const r = await cli(['tools', '--workspace', 'ws', '--project', 'nope']);
    expect(r.code).toBe(3);
    expect(r.err).toContain('Project "nope" not found');
    expect(r.err).toContain('arium init nope');
  });

  it('a bad grant, a bad project name and a bad arium.json name what is wrong', async () => {
    expect((await cli(['tools', ...P, '--grant', 'vfs.fly'])).err).toContain('Unknown permission "vfs.fly"');
    expect((await cli(['tools', '--workspace', 'ws', '--project', '../x'])).err).toContain('Invalid project name');
    writeFileSync(join(ws.workspace, 'p', 'arium.json'), '{"grants": "vfs.read"}');
    const bad = await cli(['tools', ...P, '--json']);
    expect(bad.code).toBe(3);
    expect(parseJson(bad).error).toMatchObject({ code: 'EngineConfigError', field: 'arium.json grants' });
    expect(bad.err).toContain('arium.json');
  });
});

describe('colour', () => {
  const tty = { isTTY: true, env: {} };
  it('is on at a terminal', async () => {
    expect((await cli(['tools', ...P], tty)).out).toContain(ANSI);
  });

  test.each([
    ['--no-color', { isTTY: true, env: {} }, ['--no-color']],
    ['NO_COLOR=1', { isTTY: true, env: { NO_COLOR: '1' } }, []],
    ['a pipe', { isTTY: false, env: {} }, []],
    ['--json', { isTTY: true, env: {} }, ['--json']],
  ])('is off with %s', async (_, options, extra) => {
    expect((await cli(['tools', ...P, ...extra], options)).out).not.toContain(ANSI);
  });

  it('an empty NO_COLOR does not count (no-color.org)', async () => {
    expect((await cli(['tools', ...P], { isTTY: true, env: { NO_COLOR: '' } })).out).toContain(ANSI);
  });
});
