import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { TempProject } from './project.js';

/** A skill using a project tool (demo.echo) and a builtin, with a required and an optional argument. */
export const REVIEW = `---
name: review
description: Review a change with the project's tools
tools: [demo.echo, fs.read]
arguments:
  - name: path
    description: The file to review
    required: true
  - name: focus
    description: What to look at
---
Read {{path}} with fs.read, then echo what you found.
Focus on: {{ focus }}.
`;

/** Writes `skills/<name>/SKILL.md` in a temp project. */
export function writeSkill(p: TempProject, name: string, text: string | Buffer): string {
  const file = join(p.dir, 'skills', name, 'SKILL.md');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, text);
  return file;
}
