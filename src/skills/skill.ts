/**
 * A skill: the reference model's layer L2, an instruction-layer composite that guides a model through a
 * domain sequence. It is a folder `<name>/` holding `SKILL.md`: YAML front matter between `---` lines
 * (name, description, the tools it uses, its arguments), then the instructions in Markdown.
 */

/** A name a skill may have: also its folder's name, so it must be safe as one on every system. */
export const SKILL_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** An argument's name, as it appears in the body's `{{name}}` placeholders. */
export const ARGUMENT_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

export interface SkillArgument {
  name: string;
  description?: string;
  required: boolean;
}

/** A skill as read from its file (what it says; whether its tools exist is checked against a registry). */
export interface Skill {
  name: string;
  description: string;
  /** Tool ids the skill's instructions use. */
  tools: readonly string[];
  arguments: readonly SkillArgument[];
  /** The Markdown after the front matter, with its `{{argument}}` placeholders. */
  body: string;
  /** The file, relative to the project (`skills/review/SKILL.md`). */
  source: string;
  /** `line:column` in the file of each entry of `tools`, for the problem a missing tool is. */
  toolPositions: readonly (string | undefined)[];
  /** sha256 of the file: a change of version. */
  hash: string;
}

/** What surfaces and the library show of a skill. */
export interface SkillInfo {
  name: string;
  description: string;
  tools: string[];
  arguments: SkillArgument[];
  source: string;
}

export function skillInfo(skill: Skill): SkillInfo {
  return {
    name: skill.name,
    description: skill.description,
    tools: [...skill.tools],
    arguments: skill.arguments.map((a) => ({ ...a })),
    source: skill.source,
  };
}
