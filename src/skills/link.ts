import type { RegistryProblem } from '../events.js';
import type { Skill } from './skill.js';

/**
 * The skills whose tools all exist, and a problem (at the tool's line:column) for each that names one
 * that does not: such a skill would send a model after a tool it cannot call.
 */
export function linkSkills(skills: readonly Skill[], toolExists: (id: string) => boolean): { served: Skill[]; problems: RegistryProblem[] } {
  const served: Skill[] = [];
  const problems: RegistryProblem[] = [];
  for (const skill of skills) {
    const missing = skill.tools.findIndex((id) => !toolExists(id));
    if (missing === -1) {
      served.push(skill);
      continue;
    }
    const problem: RegistryProblem = {
      file: skill.source,
      id: skill.name,
      message: `the skill uses the tool "${skill.tools[missing]}", which the project does not have (arium tools lists them)`,
    };
    const position = skill.toolPositions[missing];
    if (position !== undefined) problem.at = position;
    problems.push(problem);
  }
  return { served, problems };
}
