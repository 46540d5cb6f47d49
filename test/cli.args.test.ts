import { describe, expect, it, test } from 'vitest';
import { closest, type FlagSpecs, int, maxPositionals, parseArgs, UsageError } from '../src/surfaces/cli/args.js';

const SPEC: FlagSpecs = {
  timeout: { value: true, arg: '<ms>', help: 'a value' },
  force: { help: 'a switch' },
};

const parse = (argv: string[]) => parseArgs(argv, SPEC);

describe('parseArgs', () => {
  test.each([
    { argv: ['a', 'b'], positionals: ['a', 'b'], flags: {} },
    { argv: ['--timeout', '5', 'x'], positionals: ['x'], flags: { timeout: '5' } },
    { argv: ['--timeout=5'], positionals: [], flags: { timeout: '5' } },
    { argv: ['--force', 'x'], positionals: ['x'], flags: { force: true } },
    { argv: ['--grant', 'vfs.read', '--grant=exec.js'], positionals: [], flags: { grant: ['vfs.read', 'exec.js'] } },
    {
      argv: ['--json', '--no-color', '--workspace', 'w', '--project', 'p'],
      positionals: [],
      flags: { json: true, 'no-color': true, workspace: 'w', project: 'p' },
    },
    { argv: ['-h'], positionals: [], flags: { help: true } },
    { argv: ['-'], positionals: ['-'], flags: {} },
    { argv: ['x', '--', '--force', '-1'], positionals: ['x', '--force', '-1'], flags: {} },
    { argv: ['--timeout', '-1'], positionals: [], flags: { timeout: '-1' } },
  ])('$argv', ({ argv, positionals, flags }) => {
    const parsed = parse(argv);
    expect(parsed.positionals).toEqual(positionals);
    expect(Object.fromEntries(parsed.flags)).toEqual(flags);
  });

  test.each([
    { argv: ['--colour'], message: 'Unknown option --colour' },
    { argv: ['--forse'], message: 'did you mean --force?' },
    { argv: ['--workspce', 'w'], message: 'did you mean --workspace?' },
    { argv: ['--zzzzzzzz'], message: 'this command accepts --workspace, --project, --grant, --json' },
    { argv: ['--timeout'], message: 'Option --timeout needs a value: --timeout <ms>' },
    { argv: ['--timeout', '--force'], message: 'Option --timeout needs a value' },
    { argv: ['--timeout='], message: 'Option --timeout needs a non-empty value' },
    { argv: ['--force=yes'], message: 'Option --force is a switch and takes no value (got --force=yes)' },
    { argv: ['--timeout', '1', '--timeout', '2'], message: 'Option --timeout is given twice' },
    { argv: ['-f'], message: 'Unknown option -f: options are written --name' },
    { argv: ['--__proto__'], message: 'Unknown option --__proto__' },
    { argv: ['--constructor'], message: 'Unknown option --constructor' },
  ])('refuses $argv', ({ argv, message }) => {
    expect(() => parse(argv)).toThrow(UsageError);
    expect(() => parse(argv)).toThrow(message);
  });

  it('suggests nothing when no flag is close', () => {
    expect(() => parse(['--quantum'])).toThrow(/Unknown option --quantum; this command accepts/);
  });
});

describe('int', () => {
  test.each([
    ['5', 1, 5],
    ['0', 0, 0],
    ['30000', 1, 30000],
  ])('--timeout %s (min %i) is %i', (value, min, expected) => {
    expect(int(parse(['--timeout', value]), 'timeout', min)).toBe(expected);
  });

  test.each(['0', '-1', '1.5', 'abc', '1e3', '99999999999999999999'])('refuses --timeout %s', (value) => {
    expect(() => int(parse([`--timeout=${value}`]), 'timeout')).toThrow(`Option --timeout needs a whole number of at least 1 (got "${value}")`);
  });

  it('is undefined when the flag is absent', () => {
    expect(int(parse([]), 'timeout')).toBeUndefined();
  });
});

describe('closest and maxPositionals', () => {
  it('finds the nearest name within two edits', () => {
    expect(closest('tols', ['tools', 'call'])).toBe('tools');
    expect(closest('dcotor', ['doctor', 'demo'])).toBe('doctor');
    expect(closest('xyz', ['tools', 'call'])).toBeUndefined();
  });

  it('names the unexpected arguments', () => {
    expect(() => maxPositionals(parse(['a', 'b', 'c']), 1, 'arium x <a>')).toThrow('Unexpected arguments "b" "c"; usage: arium x <a>');
    expect(() => maxPositionals(parse(['a']), 1, 'arium x <a>')).not.toThrow();
  });
});
