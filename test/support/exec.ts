import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bwrapProblem } from '../../runners/shared/bwrap.js';
import { DEFAULT_GRANTS, type Engine, type EngineOptions } from '../../src/index.js';
import { openEngine, type TempProject, tempProject } from './project.js';

/** The real interpreter behind `python3` (a pyenv shim re-executes it, and needs pyenv's files), or null. */
export function realPython(): string | null {
  try {
    return execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8', timeout: 20_000 }).trim() || null;
  } catch {
    return null;
  }
}

export function which(name: string): string | null {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    try {
      execFileSync('test', ['-x', join(dir, name)]);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return null;
}

/** Why system.exec cannot be tested here, or null. Under CI bubblewrap must work: there it is a failure, not a skip. */
export async function execUnavailable(): Promise<string | null> {
  const problem = await bwrapProblem();
  if (problem !== null && process.env.CI) throw new Error(`CI must test system.exec, but ${problem}`);
  if (problem) return problem;
  if (process.getuid?.() !== 0) return 'system.exec needs the engine to run as root';
  return null;
}

export const EXEC_GRANTS = [...DEFAULT_GRANTS, 'sys.exec'];

/** A project whose arium.json allows `allow` (and sets `exec` further), with an engine granted sys.exec. */
export async function execProject(
  exec: Record<string, unknown>,
  options: EngineOptions = {},
): Promise<{ project: TempProject; engine: Engine; close(): Promise<void> }> {
  const project = tempProject({}, 'arium-exec-');
  writeFileSync(join(project.dir, 'arium.json'), JSON.stringify({ exec }));
  const engine = await openEngine(project, { grants: EXEC_GRANTS, ...options });
  return {
    project,
    engine,
    close: async () => {
      await engine.close();
      project.remove();
    },
  };
}
