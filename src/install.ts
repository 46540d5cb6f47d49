import { readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { BUNDLES_FOLDER } from '../runners/js/bundle.js';
import { installJsPackages, type JsInstallReport, type JsPackagesStatus, jsPackagesStatus, PackageInstallError } from '../runners/js/packages.js';
import {
  findPythonPins,
  installPythonEnvironment,
  PythonEnvironmentError,
  type PythonEnvironmentReport,
  type PythonEnvironmentStatus,
  pythonEnvironmentStatus,
} from '../runners/python/environment.js';
import { loadProjectConfig } from './config.js';
import { DEFAULT_CATALOG } from './defaults.js';
import { type EngineOptions, projectLocation } from './engine.js';
import type { Check } from './runner.js';

/**
 * `arium install` and its library form: the project's pinned dependencies, installed into its state
 * folder (`<project>/.arium/`): npm packages for JS tools (package.json), and a virtual environment for
 * Python tools (requirements.txt with hashes). A part the project does not pin is left alone.
 */

/**
 * Whether `error` is an install that failed (npm's or pip's), whose message says what failed and how
 * to fix it, as opposed to a fault of the engine.
 */
export function isInstallFailure(error: unknown): error is PackageInstallError | PythonEnvironmentError {
  return error instanceof PackageInstallError || error instanceof PythonEnvironmentError;
}

export interface InstallOptions extends Pick<EngineOptions, 'workspace' | 'project'> {
  /** npm: take packages from its cache when it has them (`--prefer-offline`). */
  offline?: boolean;
  /**
   * pip: where the pinned wheels are (added to arium.json's `pip`): folders (relative to the current
   * folder) or URLs, only those (`noIndex`), or another index.
   */
  pip?: { findLinks?: string[]; noIndex?: boolean; indexUrl?: string };
  signal?: AbortSignal;
}

export interface InstallReport {
  project: string;
  /** null when the project has no package.json. */
  js: JsInstallReport | null;
  /** null when the project has no requirements.txt. */
  python: PythonEnvironmentReport | null;
}

export interface DependencyStatus {
  project: string;
  js: JsPackagesStatus;
  python: PythonEnvironmentStatus;
}

const isUrl = (link: string) => /^[a-z][a-z0-9+.-]*:\/\//i.test(link);

/** arium.json's `python` and `pip` (the py-runner's settings), with find_links made absolute against the project. */
function pythonSettings(projectDir: string): { python?: string; pip: { findLinks?: string[]; noIndex?: boolean; indexUrl?: string } } {
  const config = loadProjectConfig(projectDir, DEFAULT_CATALOG) as {
    python?: unknown;
    pip?: { find_links?: string[]; no_index?: boolean; index_url?: string };
  };
  const pip = config.pip ?? {};
  return {
    ...(typeof config.python === 'string' ? { python: config.python } : {}),
    pip: {
      ...(pip.find_links ? { findLinks: pip.find_links.map((link) => (isUrl(link) ? link : resolve(projectDir, link))) } : {}),
      ...(pip.no_index !== undefined ? { noIndex: pip.no_index } : {}),
      ...(pip.index_url ? { indexUrl: pip.index_url } : {}),
    },
  };
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
  let python: PythonEnvironmentReport | null = null;
  if (findPythonPins(projectDir)) {
    const settings = pythonSettings(projectDir);
    const given = options.pip ?? {};
    python = await installPythonEnvironment({
      projectDir,
      stateDir,
      ...(settings.python ? { python: settings.python } : {}),
      pip: {
        findLinks: [...(settings.pip.findLinks ?? []), ...(given.findLinks ?? []).map((link) => (isUrl(link) ? link : resolve(link)))],
        ...((given.noIndex ?? settings.pip.noIndex) !== undefined ? { noIndex: (given.noIndex ?? settings.pip.noIndex) as boolean } : {}),
        ...((given.indexUrl ?? settings.pip.indexUrl) ? { indexUrl: (given.indexUrl ?? settings.pip.indexUrl) as string } : {}),
      },
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }
  return { project, js, python };
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
export async function dependencyChecks(options: Pick<EngineOptions, 'workspace' | 'project'>): Promise<Check[]> {
  const status = await dependencyStatus(options);
  const { projectDir } = projectLocation(options);
  const cache = bundleCache(join(projectDir, '.arium'));
  const fix = `arium install --project ${status.project}`;
  const { js, python } = status;
  const jsDetail =
    js.state === 'unpinned'
      ? 'no package.json: JS tools import only their own files'
      : `${js.state === 'ready' ? 'installed' : js.state}: ${js.detail}; ${cache.bundles} tool bundle(s) cached, ${cache.bytes} bytes`;
  const pyDetail =
    python.state === 'unpinned' ? 'no requirements.txt: Python tools see the interpreter’s own packages' : `${python.state}: ${python.detail}`;
  return [
    {
      name: 'js packages',
      ok: js.state === 'unpinned' || js.state === 'ready',
      detail: jsDetail,
      ...(js.state === 'missing' || js.state === 'stale' ? { fix } : {}),
    },
    {
      name: 'python env',
      ok: python.state === 'unpinned' || python.state === 'ready',
      detail: pyDetail,
      ...(python.state === 'missing' || python.state === 'stale' ? { fix } : {}),
    },
  ];
}

/** What the project pins and whether its installation matches (for `arium doctor`). */
export async function dependencyStatus(options: Pick<EngineOptions, 'workspace' | 'project'> = {}): Promise<DependencyStatus> {
  const { project, projectDir } = projectLocation(options);
  const stateDir = join(projectDir, '.arium');
  const settings = pythonSettings(projectDir);
  return {
    project,
    js: jsPackagesStatus(projectDir, stateDir),
    python: await pythonEnvironmentStatus(projectDir, stateDir, settings.python ? { python: settings.python } : {}),
  };
}
