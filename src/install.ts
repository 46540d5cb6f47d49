import { join } from 'node:path';
import { installJsPackages, type JsInstallReport, type JsPackagesStatus, jsPackagesStatus } from '../runners/js/packages.js';
import { type EngineOptions, projectLocation } from './engine.js';

/**
 * `arium install` and its library form: the project's pinned dependencies, installed into its state
 * folder (`<project>/.arium/`): npm packages for JS tools (package.json), and a virtual environment for
 * Python tools (requirements.txt with hashes). A part the project does not pin is left alone.
 */

export interface InstallOptions extends Pick<EngineOptions, 'workspace' | 'project'> {
  /** npm: take packages from its cache when it has them (`--prefer-offline`). */
  offline?: boolean;
  signal?: AbortSignal;
}

export interface InstallReport {
  project: string;
  /** null when the project has no package.json. */
  js: JsInstallReport | null;
}

export interface DependencyStatus {
  project: string;
  js: JsPackagesStatus;
}

export async function installProject(options: InstallOptions = {}): Promise<InstallReport> {
  const { project, projectDir } = projectLocation(options);
  const stateDir = join(projectDir, '.arium');
  const jsPinned = jsPackagesStatus(projectDir, stateDir).state !== 'unpinned';
  const js = jsPinned
    ? await installJsPackages({
        projectDir,
        stateDir,
        ...(options.offline ? { offline: true } : {}),
        ...(options.signal ? { signal: options.signal } : {}),
      })
    : null;
  return { project, js };
}

/** What the project pins and whether its installation matches (for `arium doctor`). */
export function dependencyStatus(options: Pick<EngineOptions, 'workspace' | 'project'> = {}): DependencyStatus {
  const { project, projectDir } = projectLocation(options);
  return { project, js: jsPackagesStatus(projectDir, join(projectDir, '.arium')) };
}
