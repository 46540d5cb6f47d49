import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { BUNDLES_FOLDER } from '../runners/js/bundle.js';
import { installJsPackages, type JsInstallReport, type JsPackagesStatus, jsPackagesStatus } from '../runners/js/packages.js';
import { type EngineOptions, projectLocation } from './engine.js';
import type { Check } from './runner.js';

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

/** Bytes and count of the JS tool bundles kept in a project's state folder. */
function bundleCache(stateDir: string): { bundles: number; bytes: number } {
  const dir = join(stateDir, BUNDLES_FOLDER);
  let bundles = 0;
  let bytes = 0;
  let folders: string[] = [];
  try {
    folders = readdirSync(dir).filter((name) => !name.endsWith('.json'));
  } catch {}
  for (const folder of folders) {
    try {
      for (const file of readdirSync(join(dir, folder))) {
        if (!file.endsWith('.mjs')) continue;
        bundles++;
        bytes += statSync(join(dir, folder, file)).size;
      }
    } catch {}
  }
  return { bundles, bytes };
}

/** `arium doctor`'s lines for a project's dependencies: what it pins, whether the installation matches, the bundle cache. */
export function dependencyChecks(options: Pick<EngineOptions, 'workspace' | 'project'>): Check[] {
  const status = dependencyStatus(options);
  const { projectDir } = projectLocation(options);
  const cache = bundleCache(join(projectDir, '.arium'));
  const js = status.js;
  const detail =
    js.state === 'unpinned'
      ? 'no package.json: JS tools import only their own files'
      : `${js.state === 'ready' ? 'installed' : js.state}: ${js.detail}; ${cache.bundles} tool bundle(s) cached, ${cache.bytes} bytes`;
  return [
    {
      name: 'js packages',
      ok: js.state === 'unpinned' || js.state === 'ready',
      detail,
      ...(js.state === 'missing' || js.state === 'stale' ? { fix: `arium install --project ${status.project}` } : {}),
    },
  ];
}

/** What the project pins and whether its installation matches (for `arium doctor`). */
export function dependencyStatus(options: Pick<EngineOptions, 'workspace' | 'project'> = {}): DependencyStatus {
  const { project, projectDir } = projectLocation(options);
  return { project, js: jsPackagesStatus(projectDir, join(projectDir, '.arium')) };
}
