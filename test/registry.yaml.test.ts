import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, test } from 'vitest';
import { stringify } from 'yaml';
import { DEFAULT_REGISTRY_LIMITS, type Engine, type RegistryProblem } from '../src/index.js';
import { copyFixtureProject, definition, nextEvent, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/** `tools/*.yaml` and `*.yml` are read as the JSON they stand for; what YAML has beyond that is refused. */

let project: TempProject;
let engine: Engine;

afterEach(async () => {
  await engine?.close();
  project?.remove();
});

const HEAD = 'id: y.tool\ndescription: a YAML tool\nrunner: js-runner\nentry: tool.js\npermissions: [exec.js]\n';

async function problemsOf(files: Record<string, string>): Promise<RegistryProblem[]> {
  project = tempProject({ 'tool.js': TRIVIAL_JS, ...files });
  engine = await openEngine(project, { warmUp: false });
  return engine.problems();
}

async function onlyProblem(yaml: string): Promise<RegistryProblem> {
  const problems = await problemsOf({ 'y.yaml': yaml });
  expect(problems, JSON.stringify(problems)).toHaveLength(1);
  expect(engine.tool('y.tool')).toBeUndefined();
  return problems[0] as RegistryProblem;
}

describe('a YAML definition', () => {
  it('serves a tool that is called like its JSON twin, .yaml and .yml alike', async () => {
    const problems = await problemsOf({
      'y.yaml': `${HEAD}schema:\n  type: object\n  properties:\n    text: {type: string}\n  required: [text]\n`,
      'z.yml': `${HEAD.replace('y.tool', 'z.tool')}schema: {type: object}\n`,
    });
    expect(problems).toEqual([]);
    expect(engine.tool('y.tool')).toMatchObject({ source: 'tools/y.yaml', permissions: ['exec.js'], schema: { required: ['text'] } });
    expect(engine.tool('z.tool')?.source).toBe('tools/z.yml');
    const result = await engine.call('y.tool', { text: 'hi' });
    expect(result.ok ? result.data : result.error).toEqual({ text: 'hi' });
    const bad = await engine.call('y.tool', {});
    expect(bad.ok ? null : bad.error.code).toBe('INVALID_INPUT');
  });

  it('keeps yes, no, on and off as strings (YAML 1.2 core schema), and reads a BOM', async () => {
    const problems = await problemsOf({
      'y.yaml': `\ufeff${HEAD}schema:\n  type: object\n  properties:\n    answer: {type: string, enum: [yes, no, on, off, y, n], default: no}\n`,
    });
    expect(problems).toEqual([]);
    expect(engine.tool('y.tool')?.schema).toEqual({
      type: 'object',
      properties: { answer: { type: 'string', enum: ['yes', 'no', 'on', 'off', 'y', 'n'], default: 'no' } },
    });
  });

  it('allows an alias that reuses a part, as the JSON it expands to', async () => {
    const problems = await problemsOf({
      'y.yaml': `${HEAD}schema:\n  type: object\n  properties:\n    a: &str {type: string, maxLength: 9}\n    b: *str\n`,
    });
    expect(problems).toEqual([]);
    expect(engine.tool('y.tool')?.schema).toMatchObject({ properties: { b: { type: 'string', maxLength: 9 } } });
  });
});

// What the file says, and the problem: message fragments and line:column.
const HOSTILE: Array<[string, string, string[], string | undefined]> = [
  [
    'a key given twice',
    `${HEAD}schema: {type: object}\nentry: other.js\n`,
    ['the key "entry" appears twice in the top-level mapping', 'first at 4:1'],
    '7:1',
  ],
  [
    'a key given twice, nested',
    `${HEAD}schema:\n  type: object\n  properties:\n    t: {type: string, maxLength: 1, maxLength: 2}\n`,
    ['the key "maxLength" appears twice in the mapping at /schema/properties/t', 'first at 9:23'],
    '9:37',
  ],
  ['a tab as indentation', `${HEAD}schema:\n\ttype: object\n`, ['malformed YAML', 'Tabs are not allowed as indentation'], '7:1'],
  [
    'a !!js/function tag',
    `${HEAD}schema: {type: object}\nexamples: [!!js/function "function () { return 1 }"]\n`,
    ['js/function', 'tags are not read here'],
    '7:12',
  ],
  ['a custom tag', `${HEAD}schema: !include other.yaml\n`, ['!include', 'tags are not read here'], '6:9'],
  ['a merge key', `${HEAD}base: &b {type: object}\nschema:\n  <<: *b\n`, ['merge keys (<<) are not read here'], '8:3'],
  [
    'a recursive alias',
    `${HEAD}schema: &s\n  type: object\n  properties: {self: *s}\n`,
    ['the alias *s refers to a collection that contains it'],
    '8:22',
  ],
  [
    'a recursive alias in a sequence',
    `${HEAD}schema: {type: object}\nexamples: &e [*e]\n`,
    ['the alias *e refers to a collection that contains it'],
    '7:15',
  ],
  ['an undefined alias', `${HEAD}schema: *nowhere\n`, ['the alias *nowhere names no anchor set before it'], '6:9'],
  [
    'a key that is not a string',
    `${HEAD}schema:\n  type: object\n  properties:\n    1: {type: string}\n`,
    ['a key must be a string', '1 is a number: quote it'],
    '9:5',
  ],
  ['a key that is a sequence', `${HEAD}schema: {type: object}\n? [a, b]\n: 1\n`, ['a key must be a string'], '7:3'],
  [
    'a number JSON cannot hold',
    `${HEAD}schema:\n  type: object\n  properties:\n    n: {type: number, maximum: .inf}\n`,
    ['.inf is not a number JSON can hold'],
    '9:32',
  ],
  ['two documents', `${HEAD}schema: {type: object}\n---\nid: other\n`, ['malformed YAML', 'Source contains multiple documents'], '7:1'],
  ['a sequence at the top', '- id: y.tool\n', ['must be a YAML mapping, not an array'], undefined],
  ['a scalar at the top', 'yes\n', ['must be a YAML mapping, not string'], undefined],
  ['an empty file', '  \n# nothing\n', ['the file is empty'], undefined],
  // A schema problem names the line, and keeps the pointer in the message.
  [
    'a schema violation',
    `${HEAD}schema: {type: object}\nlimits: {timeout_ms: 9999999}\n`,
    ['/limits/timeout_ms: must be <= 600000', '(at /limits/timeout_ms)'],
    '7:22',
  ],
];

describe('hostile YAML definitions', () => {
  test.each(HOSTILE)('%s is a load problem with its line and column', async (_what, yaml, fragments, at) => {
    const problem = await onlyProblem(yaml);
    for (const fragment of fragments) expect(problem.message).toContain(fragment);
    expect(problem).toMatchObject({ file: 'tools/y.yaml' });
    expect(problem.at).toBe(at);
  });

  it('billion laughs: exponential aliases are refused, quickly', async () => {
    const levels = ['a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]'];
    for (const [i, name] of ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'].entries()) {
      const prev = String.fromCharCode(97 + i);
      levels.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(', ')}]`);
    }
    const yaml = `${HEAD}schema: {type: object}\nexamples:\n  - {}\nx-laughs:\n${levels.map((l) => `  ${l}`).join('\n')}\n`;
    const problem = await onlyProblem(yaml);
    expect(problem.message).toContain(`its aliases expand past the bound of 100`);
  });

  it('aliases that expand a small file past the definition size are refused', async () => {
    const big = 'x'.repeat(60_000);
    const yaml = `${HEAD}schema:\n  type: object\n  description: &d "${big}"\nexamples: [{}]\nx: [${Array(20).fill('*d').join(', ')}]\n`;
    const problem = await onlyProblem(yaml);
    expect(problem.message).toContain(`its aliases expand it past ${DEFAULT_REGISTRY_LIMITS.max_definition_bytes} bytes as JSON`);
  });

  it('aliases that nest past the depth bound are refused', async () => {
    // Under the bound in the text, over it once the alias stands for its anchor.
    const half = Math.ceil((DEFAULT_REGISTRY_LIMITS.max_definition_depth * 5) / 8);
    const [open, close] = ['['.repeat(half), ']'.repeat(half)];
    const problem = await onlyProblem(`${HEAD}schema: {type: object}\nx:\n  a: &a ${open}1${close}\n  b: ${open}*a${close}\n`);
    expect(problem.message).toContain(`nested deeper than ${DEFAULT_REGISTRY_LIMITS.max_definition_depth} levels`);
  });

  it('a file of 200,000 nested brackets is a problem at the first level too deep, not a crash', async () => {
    const n = 200_000;
    const problem = await onlyProblem(`${HEAD}schema: {type: object, x: ${'['.repeat(n)}${']'.repeat(n)}}\n`);
    expect(problem.message).toContain(`nested deeper than ${DEFAULT_REGISTRY_LIMITS.max_definition_depth} levels`);
    expect(problem.at).toBe(`6:${25 + DEFAULT_REGISTRY_LIMITS.max_definition_depth}`);
    // The engine is still there.
    expect((await engine.call('fs.list', { path: '/' })).ok).toBe(true);
  });

  it('deep block nesting is refused before it is parsed', async () => {
    const depth = 1000;
    const nested = Array.from({ length: depth }, (_, i) => `${' '.repeat(i)}k:`).join('\n');
    const problem = await onlyProblem(`${HEAD}schema: {type: object}\nx:\n${nested.replace(/^/gm, '  ')} 1\n`);
    expect(problem.message).toContain('nested deeper than');
    expect(problem.at).toMatch(/^\d+:\d+$/);
  });

  it('a file over the size limit is refused unread', async () => {
    const problem = await onlyProblem(`${HEAD}schema: {type: object}\ndescription2: "${'x'.repeat(DEFAULT_REGISTRY_LIMITS.max_definition_bytes)}"\n`);
    expect(problem.message).toContain(`over the limit of ${DEFAULT_REGISTRY_LIMITS.max_definition_bytes} bytes`);
  });

  it('a JSON file of 200,000 nested brackets gets the same clear problem', async () => {
    const n = 200_000;
    const problems = await problemsOf({ 'deep.json': `{"x": ${'['.repeat(n)}${']'.repeat(n)}}` });
    expect(problems).toEqual([
      {
        file: 'tools/deep.json',
        at: `1:${6 + DEFAULT_REGISTRY_LIMITS.max_definition_depth}`,
        message: `nested deeper than ${DEFAULT_REGISTRY_LIMITS.max_definition_depth} levels of arrays and objects, the most a definition may have`,
      },
    ]);
  });
});

describe('JSON and YAML side by side', () => {
  it('an id defined in both is the clash two JSON files are: the first file in name order wins', async () => {
    const problems = await problemsOf({
      'a.json': definition({ id: 'same' }),
      'b.yaml': `${HEAD.replace('y.tool', 'same')}schema: {type: object}\n`,
    });
    expect(engine.tool('same')?.source).toBe('tools/a.json');
    expect(problems).toEqual([
      {
        file: 'tools/b.yaml',
        id: 'same',
        at: '/id',
        message: 'duplicate id "same": already defined by tools/a.json; the first file (in name order) wins',
      },
    ]);
  });

  it('every fixture definition gives, written as YAML, the problems its JSON form gives', async () => {
    project = copyFixtureProject('definitions');
    const names = readdirSync(project.tools).filter((name) => name.endsWith('.json'));
    engine = await openEngine(project, { warmUp: false });
    const fromJson = new Map(engine.problems().map((p) => [p.file, p]));
    const tools = engine.tools().filter((t) => t.source !== 'builtin');
    await engine.close();
    let converted = 0;
    for (const name of names) {
      let value: unknown;
      try {
        value = JSON.parse(readFileSync(join(project.tools, name), 'utf8').replace(/^\ufeff/, ''));
      } catch {
        continue;
      }
      // Files whose problem is JSON's own text (a key given twice, malformed) have no YAML twin.
      if (fromJson.get(`tools/${name}`)?.message.includes('appears twice')) continue;
      writeFileSync(join(project.tools, name.replace(/\.json$/, '.yaml')), stringify(value));
      converted++;
    }
    expect(converted).toBeGreaterThan(30);
    // Only the YAML twins define tools now.
    for (const name of names) rmSync(join(project.tools, name));
    engine = await openEngine(project, { warmUp: false });
    const fromYaml = new Map(engine.problems().map((p) => [p.file, p]));
    for (const [file, json] of fromJson) {
      const yaml = fromYaml.get(file.replace(/\.json$/, '.yaml'));
      if (!yaml) continue;
      const pointer = /\(at (\/[^)]*)\)$/.exec(yaml.message)?.[1];
      const message = pointer ? yaml.message.slice(0, -` (at ${pointer})`.length) : yaml.message;
      expect([message.replace(/\.yaml\b/g, '.json').replace('a YAML mapping', 'a JSON object'), pointer ?? yaml.at], file).toEqual([
        json.message,
        json.at,
      ]);
      if (pointer) expect(yaml.at, file).toMatch(/^\d+:\d+$/);
    }
    const yamlTools = engine.tools().filter((t) => t.source !== 'builtin');
    expect(yamlTools.map((t) => [t.id, t.source.replace(/\.yaml$/, '.json'), t.schema, t.permissions])).toEqual(
      tools.map((t) => [t.id, t.source, t.schema, t.permissions]),
    );
  });
});

describe('hot reload of YAML definitions', () => {
  it('adds, updates and removes a .yaml tool as the file changes', async () => {
    project = tempProject({ 'tool.js': TRIVIAL_JS });
    engine = await openEngine(project, { watch: true, warmUp: false });
    const added = nextEvent(engine, 'registry', (e) => e.added.includes('y.tool'), 5000);
    project.write('y.yaml', `${HEAD}schema: {type: object}\n`);
    await added;
    const updated = nextEvent(engine, 'registry', (e) => e.updated.includes('y.tool'), 5000);
    project.write('y.yaml', `${HEAD.replace('a YAML tool', 'version 2')}schema: {type: object}\n`);
    await updated;
    expect(engine.tool('y.tool')?.description).toBe('version 2');
    const broken = nextEvent(engine, 'registry', (e) => e.problems.some((p) => p.file === 'tools/y.yaml'), 5000);
    project.write('y.yaml', `${HEAD}schema:\n\ttype: object\n`);
    const event = await broken;
    expect(event.problems.find((p) => p.file === 'tools/y.yaml')).toMatchObject({ at: '7:1', stale: true });
    const removed = nextEvent(engine, 'registry', (e) => e.removed.includes('y.tool'), 5000);
    rmSync(join(project.tools, 'y.yaml'));
    await removed;
  });
});
