import { SKILL_LIMITS } from '../limits.js';
import type { Skill } from './skill.js';

/**
 * How a skill's body takes its arguments: `{{name}}` (spaces inside the braces allowed) is replaced by
 * the value of the declared argument `name`, or by nothing when an optional one is not given. The
 * replacement is one pass over the body as written: a value is inserted as plain text and never read
 * again, so a value holding `{{other}}` stays those characters, and nothing else in the body (no
 * expressions, no includes, no files) is evaluated. A placeholder naming no declared argument is a
 * load problem of the skill, so every `{{…}}` that looks like one is one.
 */
export const PLACEHOLDER = /\{\{\s*([A-Za-z_][A-Za-z0-9_]{0,63})\s*\}\}/g;

export class SkillArgumentError extends Error {
  constructor(
    message: string,
    readonly argument?: string,
  ) {
    super(message);
  }
}

/** The skill's body with `args` put in; throws `SkillArgumentError` for a missing, unknown or oversized argument. */
export function renderSkill(skill: Skill, args: Readonly<Record<string, unknown>> = {}, limits = SKILL_LIMITS): string {
  const declared = new Map(skill.arguments.map((a) => [a.name, a] as const));
  for (const name of Object.keys(args)) {
    if (!declared.has(name)) {
      const known = skill.arguments.map((a) => a.name).join(', ') || 'none';
      throw new SkillArgumentError(`skill "${skill.name}" has no argument "${name}" (it takes: ${known})`, name);
    }
  }
  const values = new Map<string, string>();
  for (const argument of skill.arguments) {
    const value = Object.hasOwn(args, argument.name) ? args[argument.name] : undefined;
    if (value === undefined || value === null) {
      if (argument.required) throw new SkillArgumentError(`skill "${skill.name}" needs the argument "${argument.name}"`, argument.name);
      values.set(argument.name, '');
      continue;
    }
    if (typeof value !== 'string')
      throw new SkillArgumentError(`the argument "${argument.name}" must be a string, not ${typeof value}`, argument.name);
    if (value.length > limits.max_argument_chars) {
      throw new SkillArgumentError(
        `the argument "${argument.name}" is ${value.length} characters, over the limit of ${limits.max_argument_chars}`,
        argument.name,
      );
    }
    values.set(argument.name, value);
  }
  return skill.body.replace(PLACEHOLDER, (whole, name: string) => values.get(name) ?? whole);
}
