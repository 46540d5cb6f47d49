import { createHash } from 'node:crypto';
import { lstat, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { RegistryProblem } from '../events.js';
import { DEFAULT_REGISTRY_LIMITS, SKILL_LIMITS } from '../limits.js';
import { lineColumn } from '../registry/text-position.js';
import { parseYamlData, YamlDataError } from '../registry/yaml-data.js';
import { PLACEHOLDER } from './render.js';
import { ARGUMENT_NAME, SKILL_NAME, type Skill, type SkillArgument } from './skill.js';

/** What reading a folder of skills is held to (SKILL_LIMITS, and the definitions' depth for front matter). */
export interface SkillReadOptions {
  /** How the folder is named in problems: `skills` gives `skills/review/SKILL.md`. */
  shown: string;
  limits?: typeof SKILL_LIMITS;
  max_depth?: number;
}

/** One folder's outcome: its skill, or why it has none. */
export type SkillEntry = { file: string; skill: Skill; problem?: undefined } | { file: string; skill?: undefined; problem: RegistryProblem };

export const SKILL_FILE = 'SKILL.md';

class SkillError extends Error {
  constructor(
    message: string,
    readonly at?: string,
  ) {
    super(message);
  }
}

/**
 * Reads every `<dir>/<name>/SKILL.md`, in name order; never throws. A folder that cannot hold a skill
 * (a name that is not folder-safe, no SKILL.md, a link) is a problem; so is each skill that does not
 * read. A missing `dir` is no skills and no problem. Whether the tools a skill names exist is not
 * checked here (see `linkSkills`): the same folder may be read for a project and for a pack.
 */
export async function readSkills(dir: string, options: SkillReadOptions): Promise<{ entries: SkillEntry[]; problems: RegistryProblem[] }> {
  const limits = options.limits ?? SKILL_LIMITS;
  const problems: RegistryProblem[] = [];
  let names: string[];
  try {
    const listed = await readdir(dir, { withFileTypes: true });
    names = listed
      .filter((e) => !e.name.startsWith('.'))
      .filter((e) => {
        if (e.isDirectory()) return true;
        problems.push({
          file: `${options.shown}/${e.name}`,
          message: `a skill is a folder holding ${SKILL_FILE}, not a ${e.isSymbolicLink() ? 'link' : 'file'}`,
        });
        return false;
      })
      .map((e) => e.name)
      .sort();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { entries: [], problems };
    problems.push({ file: `${options.shown}/`, message: `the skills folder could not be read: ${(error as Error).message}` });
    return { entries: [], problems };
  }
  const entries: SkillEntry[] = [];
  for (const name of names) {
    const file = `${options.shown}/${name}/${SKILL_FILE}`;
    if (!SKILL_NAME.test(name)) {
      problems.push({
        file: `${options.shown}/${name}`,
        message: `"${name}" is not a skill name: use 1 to 64 lower-case letters, digits, "_" and "-", starting with a letter or digit`,
      });
      continue;
    }
    if (entries.length >= limits.max_skills) {
      problems.push({ file, message: `the folder already has ${limits.max_skills} skills, the most one may hold` });
      continue;
    }
    entries.push(await readSkill(join(dir, name, SKILL_FILE), name, file, limits, options.max_depth ?? DEFAULT_REGISTRY_LIMITS.max_definition_depth));
  }
  return { entries, problems };
}

async function readSkill(path: string, folder: string, file: string, limits: typeof SKILL_LIMITS, maxDepth: number): Promise<SkillEntry> {
  try {
    const text = await readBounded(path, limits.max_skill_bytes);
    return { file, skill: parseSkill(text, folder, file, limits, maxDepth) };
  } catch (error) {
    if (error instanceof SkillError) {
      const problem: RegistryProblem = { file, message: error.message, id: folder };
      if (error.at !== undefined) problem.at = error.at;
      return { file, problem };
    }
    const code = (error as NodeJS.ErrnoException).code;
    const message = code === 'ENOENT' ? `the folder has no ${SKILL_FILE}` : `could not be read: ${(error as Error).message}`;
    return { file, problem: { file, message, id: folder } };
  }
}

async function readBounded(path: string, max: number): Promise<string> {
  const info = await lstat(path);
  if (!info.isFile()) throw new SkillError(`${SKILL_FILE} must be a regular file, not a link or folder`);
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    if (size > max) throw new SkillError(`the file is ${size} bytes, over the limit of ${max} bytes for a skill`);
    // At most max+1 bytes: the file may grow between stat and read.
    const buffer = Buffer.alloc(Math.min(size, max) + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    if (bytesRead > max) throw new SkillError(`the file grew past the limit of ${max} bytes while being read`);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

const FIELDS = ['name', 'description', 'tools', 'arguments', 'license', 'metadata'];

/** A skill from the text of its SKILL.md; throws `SkillError` with a line:column. */
function parseSkill(raw: string, folder: string, file: string, limits: typeof SKILL_LIMITS, maxDepth: number): Skill {
  const text = raw.replace(/^\ufeff/, '');
  const opening = /^---[ \t]*\r?\n/.exec(text);
  if (!opening)
    throw new SkillError(
      `${SKILL_FILE} must begin with front matter: a line "---", the YAML fields (name, description, tools, arguments), and "---"`,
      '1:1',
    );
  const closing = /^---[ \t]*(?:\r?\n|$)/m.exec(text.slice(opening[0].length));
  if (!closing) throw new SkillError('the front matter has no closing "---" line', '1:1');
  const yamlStart = opening[0].length;
  const yamlText = text.slice(yamlStart, yamlStart + closing.index);
  const bodyStart = yamlStart + closing.index + closing[0].length;
  if (yamlText.trim() === '') throw new SkillError('the front matter is empty: it needs at least "name" and "description"', '2:1');
  let data: ReturnType<typeof parseYamlData>;
  try {
    // The front matter starts on the file's second line: positions are the file's.
    data = parseYamlData(yamlText, { max_bytes: limits.max_skill_bytes, max_depth: maxDepth }, 2);
  } catch (error) {
    if (error instanceof YamlDataError) throw new SkillError(`front matter: ${error.message}`, error.at);
    throw error;
  }
  const at = (pointer: string) => data.locate(pointer);
  const fm = data.value;
  if (typeof fm !== 'object' || fm === null || Array.isArray(fm)) throw new SkillError('the front matter must be a YAML mapping of fields', '2:1');
  const fields = fm as Record<string, unknown>;
  for (const key of Object.keys(fields)) {
    if (!FIELDS.includes(key))
      throw new SkillError(`front matter: "${key}" is not a skill field (the fields are ${FIELDS.join(', ')})`, at(`/${key}`));
  }
  const name = fields.name;
  if (typeof name !== 'string')
    throw new SkillError('front matter: "name" is required, a string: the folder\'s name', name === undefined ? '2:1' : at('/name'));
  if (name !== folder)
    throw new SkillError(`front matter: the name "${name}" is not the folder's name "${folder}"; a skill is named by its folder`, at('/name'));
  const description = fields.description;
  if (typeof description !== 'string' || description.trim() === '') {
    throw new SkillError(
      'front matter: "description" is required, a string that says when to use the skill',
      description === undefined ? '2:1' : at('/description'),
    );
  }
  if (description.length > limits.max_description_chars) {
    throw new SkillError(
      `front matter: the description is ${description.length} characters, over the limit of ${limits.max_description_chars}`,
      at('/description'),
    );
  }
  const tools = fields.tools ?? [];
  if (!Array.isArray(tools) || tools.some((t) => typeof t !== 'string' || t === '')) {
    throw new SkillError('front matter: "tools" is a list of tool ids (strings)', at('/tools'));
  }
  const args = parseArguments(fields.arguments, limits, at);
  const body = text.slice(bodyStart);
  const declared = new Set(args.map((a) => a.name));
  for (const match of body.matchAll(PLACEHOLDER)) {
    if (!declared.has(match[1] as string)) {
      throw new SkillError(
        `the body's placeholder ${match[0]} names no argument; declare "${match[1]}" in the front matter's arguments, or write the braces otherwise`,
        lineColumn(text, bodyStart + (match.index ?? 0)),
      );
    }
  }
  return {
    name,
    description,
    tools: Object.freeze([...tools] as string[]),
    arguments: Object.freeze(args),
    body,
    source: file,
    toolPositions: Object.freeze(tools.map((_, i) => at(`/tools/${i}`))),
    hash: createHash('sha256').update(raw).digest('hex'),
  };
}

function parseArguments(value: unknown, limits: typeof SKILL_LIMITS, at: (pointer: string) => string | undefined): SkillArgument[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new SkillError('front matter: "arguments" is a list of {name, description, required}', at('/arguments'));
  if (value.length > limits.max_arguments) {
    throw new SkillError(`front matter: ${value.length} arguments, over the limit of ${limits.max_arguments}`, at('/arguments'));
  }
  const seen = new Set<string>();
  return value.map((item, i) => {
    const where = `/arguments/${i}`;
    if (typeof item !== 'object' || item === null || Array.isArray(item)) {
      throw new SkillError('front matter: each argument is a mapping with "name" (and "description", "required")', at(where));
    }
    const { name, description, required, ...rest } = item as Record<string, unknown>;
    const extra = Object.keys(rest)[0];
    if (extra !== undefined)
      throw new SkillError(`front matter: "${extra}" is not an argument field (name, description, required)`, at(`${where}/${extra}`));
    if (typeof name !== 'string' || !ARGUMENT_NAME.test(name)) {
      throw new SkillError(
        'front matter: an argument\'s "name" is letters, digits and "_", starting with a letter or "_" (it is written {{name}} in the body)',
        at(name === undefined ? where : `${where}/name`),
      );
    }
    if (seen.has(name)) throw new SkillError(`front matter: the argument "${name}" is declared twice`, at(`${where}/name`));
    seen.add(name);
    if (description !== undefined && typeof description !== 'string')
      throw new SkillError('front matter: an argument\'s "description" is a string', at(`${where}/description`));
    if (required !== undefined && typeof required !== 'boolean') {
      throw new SkillError('front matter: an argument\'s "required" is true or false', at(`${where}/required`));
    }
    return { name, ...(description !== undefined ? { description } : {}), required: required === true };
  });
}
