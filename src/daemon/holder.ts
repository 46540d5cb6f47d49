import { readFileSync } from 'node:fs';
import { ProjectLockedError } from '../store/lock.js';
import { daemonPaths } from './paths.js';

type Env = Readonly<Record<string, string | undefined>>;

/**
 * The error for a project the workspace's daemon holds: the lock's holder is the pid its record names.
 * Another engine cannot open the project then, but everything it would do goes through the daemon.
 * Any other lock error is returned as it is.
 */
export function heldByDaemon(error: unknown, workspace: string, project: string, envs: readonly Env[]): unknown {
  if (!(error instanceof ProjectLockedError) || error.holder === null) return error;
  for (const record of new Set(envs.map((env) => daemonPaths(workspace, env).record))) {
    let pid: unknown;
    try {
      pid = (JSON.parse(readFileSync(record, 'utf8')) as { pid?: unknown }).pid;
    } catch {
      continue;
    }
    if (pid !== error.holder) continue;
    return new ProjectLockedError(
      `The workspace's Arium daemon (pid ${pid}) holds project "${project}"; use connect({ workspace, project }) to share it from this process, or the CLI and MCP, which go through the daemon`,
      error.holder,
    );
  }
  return error;
}
