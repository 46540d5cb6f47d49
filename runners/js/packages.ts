import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

// node:child_process, not execa: one npm run, from a module the JS runner loads at start (bundle.ts).
// Importing execa takes 0.1-0.4 s on the 2-core development machine, which every engine start would pay
// (ARCHITECTURE.md, "What a start costs").

/**
 * A project's npm packages for its JS tools: `package.json` (and its lock file) next to `tools/`,
 * installed by `arium install` with the ordinary npm client into `<project>/.arium/js-packages/`, never
 * into the engine's own node_modules. Install scripts are not run: they would run on the host, outside
 * every sandbox, and a package that needs one (native code) cannot work in an isolate anyway.
 */

export const PACKAGES_FOLDER = 'js-packages';
const STAMP = 'arium-install.json';

export interface JsPackagesStatus {
  /** The project's package.json, or null when it has none. */
  manifest: string | null;
  /** Where the packages are installed. */
  path: string;
  state: 'unpinned' | 'missing' | 'stale' | 'ready';
  detail: string;
  /** The installation's identity (changes with every install that changed something), when ready. */
  stamp: string | null;
}

export interface JsInstallReport {
  path: string;
  /** Packages installed, counting dependencies of dependencies. */
  packages: number;
  /** False when the installation already matched package.json and its lock file. */
  changed: boolean;
  /** True when the project had no lock file and npm wrote one (copied next to package.json). */
  lock_written: boolean;
  seconds: number;
}

export class PackageInstallError extends Error {
  override readonly name = 'PackageInstallError';
}

const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');

function pins(projectDir: string): { manifest: string; lock: string | null; key: string } | null {
  const manifest = join(projectDir, 'package.json');
  if (!existsSync(manifest)) return null;
  const lockPath = join(projectDir, 'package-lock.json');
  const lock = existsSync(lockPath) ? lockPath : null;
  const key = sha256(`${sha256(readFileSync(manifest))}\n${lock ? sha256(readFileSync(lock)) : 'no lock'}`);
  return { manifest, lock, key };
}

export function jsPackagesDir(stateDir: string): string {
  return join(stateDir, PACKAGES_FOLDER);
}

export function jsPackagesStatus(projectDir: string, stateDir: string): JsPackagesStatus {
  const path = jsPackagesDir(stateDir);
  const pinned = pins(projectDir);
  if (!pinned) return { manifest: null, path, state: 'unpinned', detail: 'the project has no package.json', stamp: null };
  let stamp: { key?: string; at?: string } | null = null;
  try {
    stamp = JSON.parse(readFileSync(join(path, STAMP), 'utf8')) as { key?: string; at?: string };
  } catch {}
  if (!stamp) return { manifest: pinned.manifest, path, state: 'missing', detail: 'package.json is not installed: run `arium install`', stamp: null };
  if (stamp.key !== pinned.key) {
    return {
      manifest: pinned.manifest,
      path,
      state: 'stale',
      detail: 'package.json or package-lock.json changed since `arium install` ran: run it again',
      stamp: null,
    };
  }
  return { manifest: pinned.manifest, path, state: 'ready', detail: `installed ${stamp.at ?? ''}`.trim(), stamp: stamp.key ?? null };
}

/** Runs npm with `args` in `cwd`; rejects with its output's tail when it fails. */
function npm(args: string[], cwd: string, signal?: AbortSignal): Promise<void> {
  const cli = process.env.npm_execpath?.endsWith('.js') ? [process.execPath, process.env.npm_execpath] : ['npm'];
  return new Promise((resolve, reject) => {
    const child = spawn(cli[0] as string, [...cli.slice(1), ...args], {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' },
      ...(signal ? { signal } : {}),
    });
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-8000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', (error) => reject(new PackageInstallError(`npm could not be started: ${error.message}`)));
    child.on('close', (code) => {
      if (code === 0) resolve();
      else reject(new PackageInstallError(`npm ${args[0]} failed (exit ${code}):\n${output.trim()}`));
    });
  });
}

function countPackages(modules: string): number {
  let count = 0;
  const walk = (dir: string) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      if (name.startsWith('.')) continue;
      if (name.startsWith('@')) walk(join(dir, name));
      else if (existsSync(join(dir, name, 'package.json'))) {
        count++;
        walk(join(dir, name, 'node_modules'));
      }
    }
  };
  walk(modules);
  return count;
}

/**
 * Installs the project's package.json (with `npm ci` when it has a lock file, else `npm install`, whose
 * lock file is then copied next to package.json so the next install is pinned) into the state folder.
 * Built aside and renamed into place: a failed or interrupted install leaves the previous one working.
 */
export async function installJsPackages(options: {
  projectDir: string;
  stateDir: string;
  offline?: boolean;
  signal?: AbortSignal;
}): Promise<JsInstallReport> {
  const started = performance.now();
  const pinned = pins(options.projectDir);
  const path = jsPackagesDir(options.stateDir);
  if (!pinned) throw new PackageInstallError(`${options.projectDir} has no package.json: there is nothing to install for JS tools`);
  const status = jsPackagesStatus(options.projectDir, options.stateDir);
  if (status.state === 'ready') {
    return { path, packages: countPackages(join(path, 'node_modules')), changed: false, lock_written: false, seconds: 0 };
  }
  try {
    JSON.parse(readFileSync(pinned.manifest, 'utf8'));
  } catch (error) {
    throw new PackageInstallError(`${pinned.manifest} is not valid JSON: ${(error as Error).message}`);
  }
  mkdirSync(options.stateDir, { recursive: true });
  const aside = `${path}.tmp-${process.pid}-${Date.now()}`;
  rmSync(aside, { recursive: true, force: true });
  mkdirSync(aside);
  try {
    copyFileSync(pinned.manifest, join(aside, 'package.json'));
    if (pinned.lock) copyFileSync(pinned.lock, join(aside, 'package-lock.json'));
    const common = ['--ignore-scripts', '--no-audit', '--no-fund', '--omit=dev', ...(options.offline ? ['--prefer-offline'] : [])];
    await npm(pinned.lock ? ['ci', ...common] : ['install', ...common], aside, options.signal);
    let lockWritten = false;
    if (!pinned.lock && existsSync(join(aside, 'package-lock.json'))) {
      copyFileSync(join(aside, 'package-lock.json'), join(options.projectDir, 'package-lock.json'));
      lockWritten = true;
    }
    // The stamp names what was installed: package.json and the lock file as they are now.
    const now = pins(options.projectDir) as NonNullable<ReturnType<typeof pins>>;
    writeFileSync(join(aside, STAMP), `${JSON.stringify({ key: now.key, at: new Date().toISOString() })}\n`);
    const old = `${path}.old-${process.pid}-${Date.now()}`;
    if (existsSync(path)) renameSync(path, old);
    renameSync(aside, path);
    rmSync(old, { recursive: true, force: true });
    return {
      path,
      packages: countPackages(join(path, 'node_modules')),
      changed: true,
      lock_written: lockWritten,
      seconds: Math.round(performance.now() - started) / 1000,
    };
  } finally {
    rmSync(aside, { recursive: true, force: true });
  }
}
