import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, test } from 'vitest';
import { type Engine, type RegistryProblem, SKILL_LIMITS, SkillArgumentError } from '../src/index.js';
import { DEFAULT_REGISTRY_LIMITS } from '../src/limits.js';
import { readSkills } from '../src/skills/load.js';
import { definition, nextEvent, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';
import { REVIEW, writeSkill } from './support/skills.js';

/** Skills: `skills/<name>/SKILL.md`, front matter in YAML, read, checked against the tools, served, reloaded. */

let project: TempProject;
let engine: Engine;

afterEach(async () => {
  await engine?.close();
  project?.remove();
});

const TOOLS = { 'tool.js': TRIVIAL_JS, 'echo.json': definition({ id: 'demo.echo' }) };

async function withSkills(skills: Record<string, string>, options = {}): Promise<RegistryProblem[]> {
  project = tempProject(TOOLS);
  for (const [name, text] of Object.entries(skills)) writeSkill(project, name, text);
  engine = await openEngine(project, { warmUp: false, ...options });
  return engine.problems();
}

describe('a skill', () => {
  it('is read from skills/<name>/SKILL.md and listed with its arguments', async () => {
    expect(await withSkills({ review: REVIEW })).toEqual([]);
    expect(engine.skills()).toEqual([
      {
        name: 'review',
        description: "Review a change with the project's tools",
        tools: ['demo.echo', 'fs.read'],
        arguments: [
          { name: 'path', description: 'The file to review', required: true },
          { name: 'focus', description: 'What to look at', required: false },
        ],
        source: 'skills/review/SKILL.md',
      },
    ]);
    expect(engine.skill('review')?.body).toBe('Read {{path}} with fs.read, then echo what you found.\nFocus on: {{ focus }}.\n');
  });

  it('puts its arguments in once: a value is text, never read again for placeholders', async () => {
    await withSkills({ review: REVIEW });
    expect(engine.renderSkill('review', { path: '/docs/a.md', focus: 'naming' })).toBe(
      'Read /docs/a.md with fs.read, then echo what you found.\nFocus on: naming.\n',
    );
    // An optional argument not given is nothing; a value holding a placeholder stays those characters.
    expect(engine.renderSkill('review', { path: '{{focus}} $& $1' })).toBe(
      'Read {{focus}} $& $1 with fs.read, then echo what you found.\nFocus on: .\n',
    );
    expect(engine.renderSkill('nope', {})).toBeUndefined();
  });

  test.each([
    [{}, 'skill "review" needs the argument "path"'],
    [{ path: 'a', extra: 'b' }, 'skill "review" has no argument "extra" (it takes: path, focus)'],
    [{ path: 7 }, 'the argument "path" must be a string, not number'],
    [{ path: 'x'.repeat(SKILL_LIMITS.max_argument_chars + 1) }, `over the limit of ${SKILL_LIMITS.max_argument_chars}`],
  ])('refuses bad arguments (%#) with a clear error', async (args, message) => {
    await withSkills({ review: REVIEW });
    let thrown: unknown;
    try {
      engine.renderSkill('review', args);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(SkillArgumentError);
    expect((thrown as Error).message).toContain(message);
  });

  it('is not served while a tool it names does not exist, and comes back with the tool', async () => {
    const problems = await withSkills({ review: REVIEW.replace('[demo.echo, fs.read]', '[fs.read,\n  demo.missing]') });
    expect(problems).toEqual([
      {
        file: 'skills/review/SKILL.md',
        id: 'review',
        at: '5:3',
        message: 'the skill uses the tool "demo.missing", which the project does not have (arium tools lists them)',
      },
    ]);
    expect(engine.skills()).toEqual([]);
    project.write('missing.json', definition({ id: 'demo.missing' }));
    const back = nextEvent(engine, 'skills', (e) => e.added.includes('review'), 5000);
    await engine.refresh();
    await back;
    expect(engine.skills().map((s) => s.name)).toEqual(['review']);
    expect(engine.problems()).toEqual([]);
  });
});

const FM = (fields: string, body = 'Do it.\n') => `---\n${fields}\n---\n${body}`;
const OK_FIELDS = 'name: s\ndescription: a skill';

// What SKILL.md says, and the problem: message fragments and line:column.
const HOSTILE: Array<[string, string, string[], string | undefined]> = [
  ['no front matter', '# Just markdown\n', ['must begin with front matter'], '1:1'],
  ['no closing line', '---\nname: s\ndescription: x\n', ['no closing "---" line'], '1:1'],
  ['an empty front matter', '---\n---\nbody\n', ['the front matter is empty'], '2:1'],
  ['a tab as indentation', FM(`${OK_FIELDS}\narguments:\n\t- name: a`), ['front matter: malformed YAML', 'Tabs'], '5:1'],
  ['a key given twice', FM(`${OK_FIELDS}\nname: s`), ['the key "name" appears twice', 'first at 2:1'], '4:1'],
  ['a custom tag', FM(`${OK_FIELDS}\ntools: !!js/function "f"`), ['tags are not read here'], '4:8'],
  ['a merge key', FM(`${OK_FIELDS}\nmetadata:\n  <<: {a: 1}`), ['merge keys (<<) are not read here'], '5:3'],
  ['a recursive alias', FM(`${OK_FIELDS}\nmetadata: &m\n  self: *m`), ['the alias *m refers to a collection that contains it'], '5:9'],
  ['billion laughs', FM(`${OK_FIELDS}\nmetadata:\n${laughs()}`), ['its aliases expand past the bound'], undefined],
  [
    'deep nesting',
    FM(`${OK_FIELDS}\nmetadata: ${'['.repeat(100_000)}${']'.repeat(100_000)}`),
    [`nested deeper than ${DEFAULT_REGISTRY_LIMITS.max_definition_depth} levels`],
    `4:${10 + DEFAULT_REGISTRY_LIMITS.max_definition_depth}`,
  ],
  ['a missing name', FM('description: a skill'), ['"name" is required'], '2:1'],
  ['a name not its folder', FM('name: other\ndescription: a skill'), ['the name "other" is not the folder\'s name "s"'], '2:7'],
  ['a missing description', FM('name: s'), ['"description" is required'], '2:1'],
  ['a description too long', FM(`name: s\ndescription: ${'d'.repeat(SKILL_LIMITS.max_description_chars + 1)}`), ['over the limit of 1024'], '3:14'],
  ['an unknown field', FM(`${OK_FIELDS}\nallowed_tools: [a]`), ['"allowed_tools" is not a skill field'], '4:16'],
  ['tools not a list', FM(`${OK_FIELDS}\ntools: fs.read`), ['"tools" is a list of tool ids'], '4:8'],
  ['yes as a tool (a string, not a boolean)', FM(`${OK_FIELDS}\ntools: [yes]`), ['the tool "yes", which the project does not have'], '4:9'],
  ['an argument named badly', FM(`${OK_FIELDS}\narguments:\n  - name: "a b"`), ['an argument\'s "name" is letters, digits'], '5:11'],
  ['an argument declared twice', FM(`${OK_FIELDS}\narguments:\n  - name: a\n  - name: a`), ['the argument "a" is declared twice'], '6:11'],
  ['required not a boolean', FM(`${OK_FIELDS}\narguments:\n  - name: a\n    required: yes`), ['"required" is true or false'], '6:15'],
  [
    'a placeholder naming nothing',
    FM(OK_FIELDS, 'line one\nUse {{ nothing }} here.\n'),
    ["the body's placeholder {{ nothing }} names no argument"],
    '6:5',
  ],
  [
    'too many arguments',
    FM(`${OK_FIELDS}\narguments:\n${Array.from({ length: 33 }, (_, i) => `  - name: a${i}`).join('\n')}`),
    ['33 arguments, over the limit of 32'],
    '5:3',
  ],
];

function laughs(): string {
  const lines = ['  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]'];
  for (let i = 1; i < 9; i++)
    lines.push(
      `  ${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9)
        .fill(`*${String.fromCharCode(96 + i)}`)
        .join(', ')}]`,
    );
  return lines.join('\n');
}

describe('hostile skills', () => {
  test.each(HOSTILE)('%s is a load problem at its line and column', async (_what, text, fragments, at) => {
    const problems = await withSkills({ s: text });
    expect(problems, JSON.stringify(problems)).toHaveLength(1);
    const [problem] = problems as [RegistryProblem];
    expect(problem.file).toBe('skills/s/SKILL.md');
    for (const fragment of fragments) expect(problem.message).toContain(fragment);
    expect(problem.at).toBe(at);
    expect(engine.skills()).toEqual([]);
  });

  it('a file over the size limit is refused unread', async () => {
    const problems = await withSkills({ s: FM(OK_FIELDS, 'x'.repeat(SKILL_LIMITS.max_skill_bytes)) });
    expect(problems).toEqual([
      { file: 'skills/s/SKILL.md', id: 's', message: expect.stringContaining(`over the limit of ${SKILL_LIMITS.max_skill_bytes} bytes for a skill`) },
    ]);
  });

  it('folders that cannot hold a skill are problems; the good skill beside them is served', async () => {
    project = tempProject(TOOLS);
    writeSkill(project, 's', FM(OK_FIELDS));
    writeSkill(project, 'Bad Name', FM('name: Bad Name\ndescription: x'));
    writeSkill(project, '..evil', FM(OK_FIELDS));
    mkdirSync(join(project.dir, 'skills', 'empty'));
    writeFileSync(join(project.dir, 'skills', 'loose.md'), 'not in a folder');
    writeFileSync(join(project.dir, 'outside.md'), FM('name: linked\ndescription: x'));
    mkdirSync(join(project.dir, 'skills', 'linked'));
    symlinkSync(join(project.dir, 'outside.md'), join(project.dir, 'skills', 'linked', 'SKILL.md'));
    symlinkSync(join(project.dir, 'skills', 's'), join(project.dir, 'skills', 'alias'));
    engine = await openEngine(project, { warmUp: false });
    expect(engine.skills().map((s) => s.name)).toEqual(['s']);
    expect(engine.problems().map((p) => [p.file, p.message])).toEqual([
      ['skills/alias', 'a skill is a folder holding SKILL.md, not a link'],
      ['skills/loose.md', 'a skill is a folder holding SKILL.md, not a file'],
      ['skills/Bad Name', expect.stringContaining('"Bad Name" is not a skill name: use 1 to 64 lower-case letters')],
      ['skills/empty/SKILL.md', 'the folder has no SKILL.md'],
      ['skills/linked/SKILL.md', 'SKILL.md must be a regular file, not a link or folder'],
    ]);
  });

  it('readSkills takes any folder, so other sources of skills read them the same way', async () => {
    project = tempProject(TOOLS);
    writeSkill(project, 'review', REVIEW);
    const { entries, problems } = await readSkills(join(project.dir, 'skills'), { shown: 'packs/p/skills' });
    expect(problems).toEqual([]);
    expect(entries.map((e) => [e.file, e.skill?.name])).toEqual([['packs/p/skills/review/SKILL.md', 'review']]);
    expect(await readSkills(join(project.dir, 'nowhere'), { shown: 'x' })).toEqual({ entries: [], problems: [] });
  });
});

describe('hot reload of skills', () => {
  it('adds, updates, breaks (serving the last good version) and removes a skill as its file changes', async () => {
    project = tempProject(TOOLS);
    engine = await openEngine(project, { warmUp: false, watch: true });
    const added = nextEvent(engine, 'skills', (e) => e.added.includes('review'), 5000);
    writeSkill(project, 'review', REVIEW);
    await added;
    const updated = nextEvent(engine, 'skills', (e) => e.updated.includes('review'), 5000);
    writeSkill(project, 'review', REVIEW.replace('Review a change', 'Version two,'));
    await updated;
    expect(engine.skill('review')?.description).toContain('Version two,');
    const broken = nextEvent(engine, 'skills', (e) => e.problems.length > 0, 5000);
    writeSkill(project, 'review', REVIEW.replace('name: review', 'name: review\nname: again'));
    const event = await broken;
    expect(event.problems).toEqual([expect.objectContaining({ file: 'skills/review/SKILL.md', at: '3:1', stale: true })]);
    expect(engine.skill('review')?.description).toContain('Version two,');
    const removed = nextEvent(engine, 'skills', (e) => e.removed.includes('review'), 5000);
    rmSync(join(project.dir, 'skills'), { recursive: true });
    await removed;
    expect(engine.skills()).toEqual([]);
    expect(engine.problems()).toEqual([]);
  });

  it('hides a skill whose tool goes away, and says why', async () => {
    project = tempProject(TOOLS);
    writeSkill(project, 'review', REVIEW);
    engine = await openEngine(project, { warmUp: false, watch: true });
    expect(engine.skills()).toHaveLength(1);
    const gone = nextEvent(engine, 'skills', (e) => e.removed.includes('review'), 5000);
    rmSync(join(project.tools, 'echo.json'));
    const event = await gone;
    expect(event.problems.map((p) => [p.at, p.message])).toEqual([['4:9', expect.stringContaining('"demo.echo", which the project does not have')]]);
  });
});
