import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, isRetryable } from '../src/errors.js';
import { PERMISSION_NAMES } from '../src/permissions.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

function tableRows(heading: string): string[] {
  const start = readme.indexOf(heading);
  expect(start, `README section "${heading}"`).toBeGreaterThan(-1);
  return readme
    .slice(start)
    .split('\n')
    .filter((line) => /^\| `[A-Za-z_.]+` \|/.test(line))
    .map((line) => (/^\| `([A-Za-z_.]+)` \|/.exec(line) as RegExpExecArray)[1] as string);
}

describe('README stays true to the code', () => {
  it('documents every error code, and only those, in the error-code table', () => {
    const documented = tableRows('| code | stage | meaning |').filter((c) => /^[A-Z_]+$/.test(c));
    expect(new Set(documented)).toEqual(new Set(ERROR_CODES));
  });

  it('says retryable is true exactly for the codes isRetryable accepts', () => {
    const retryable = ERROR_CODES.filter(isRetryable);
    expect(retryable.sort()).toEqual(['BUSY', 'CONFLICT', 'TIMEOUT', 'UNAVAILABLE']);
    expect(readme).toContain('`retryable` is true only for `BUSY`, `CONFLICT`,\n`TIMEOUT` and `UNAVAILABLE`');
  });

  it('lists every permission name', () => {
    const section = readme.slice(readme.indexOf('| permission | grants |'));
    for (const name of PERMISSION_NAMES) expect(section).toContain(`| \`${name}\` |`);
  });

  it('gives the two set-up commands near the top', () => {
    const top = readme.slice(0, 1500);
    expect(top).toContain('npm install && npm run demo');
    expect(top).toContain('npm install && npm test');
  });
});
