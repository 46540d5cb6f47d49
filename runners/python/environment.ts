import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join, resolve } from 'node:path';
import { ENV_LINK, ENV_PYTHON, evaluateEnvironment, linked, type PythonEnvironmentState, STAMP, type Stamp, VERSIONS } from './environment-state.js';
import { findInterpreter, type Interpreter, interpreterTag } from './interpreter.js';
import { findPythonPins, HOW_TO_HASH, PIN_FILE, pinProblems } from './pins.js';

// node:child_process, not execa: each install step is a process group of its own that a cancel kills
// whole, and only the tail of its output is kept as it streams, which spawn gives as is; execa would add
// its import (0.1-0.4 s on the 2-core development machine) to every install for nothing this needs.

/**
 * The API `arium install`, `arium doctor` and the library call: where a project's pinned Python
 * environment stands (environment-state.ts says how it is kept on disk), and making it.
 */

export { ENV_LINK, type PythonEnvironmentState, type StaleReason } from './environment-state.js';
export { findPythonPins, type PythonPins } from './pins.js';

const LOCK = 'python-env.lock';
/** pip learnt `--python` (run against another interpreter) in 22.3; an older one is installed into the environment. */
const PIP_WITH_PYTHON = [22, 3];
const OUTPUT_KEEP = 16 * 1024;

export interface PythonEnvironmentStatus {
  /** The pin file, or null when the project pins nothing. */
  pinned: string | null;
  /** `<stateDir>/python-env`. */
  path: string;
  state: PythonEnvironmentState;
  /** One sentence for people; for missing and stale, why and what to run. */
  detail: string;
}

export interface PythonEnvironmentReport {
  /** `<stateDir>/python-env`. */
  path: string;
  /** The interpreter it was made from (its real executable), and that interpreter's version. */
  interpreter: string;
  python_version: string;
  packages: Array<{ name: string; version: string }>;
  /** False when the environment already matched the pins and interpreter: nothing was done. */
  changed: boolean;
  seconds: number;
}

export interface InstallPythonEnvironmentOptions {
  projectDir: string;
  /** The project's state folder (`<project>/.arium`). */
  stateDir: string;
  /** The interpreter to make it from: arium.json's `python` (relative to the project); default python3. */
  python?: string;
  /** Where pip finds the files; without these, pip's own configuration (pip.conf, PIP_* variables). */
  pip?: { findLinks?: string[]; noIndex?: boolean; indexUrl?: string };
  signal?: AbortSignal;
}

export type PythonEnvironmentErrorCode = 'UNPINNED' | 'UNHASHED' | 'INTERPRETER' | 'BUSY' | 'INSTALL_FAILED' | 'CANCELLED';

export class PythonEnvironmentError extends Error {
  override readonly name = 'PythonEnvironmentError';
  readonly code: PythonEnvironmentErrorCode;
  readonly details: Record<string, unknown> | undefined;
  constructor(code: PythonEnvironmentErrorCode, message: string, options: { details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options.details;
  }
}

/** The install running in this process for each state folder. */
const installing = new Map<string, Promise<PythonEnvironmentReport>>();

/** For `arium doctor`: whether the project pins packages and whether its environment matches them. */
export async function pythonEnvironmentStatus(
  projectDir: string,
  stateDir: string,
  options: { python?: string } = {},
): Promise<PythonEnvironmentStatus> {
  const path = join(stateDir, ENV_LINK);
  if (findPythonPins(projectDir) === null)
    return { pinned: null, path, state: 'unpinned', detail: `no ${PIN_FILE}: tools import what the interpreter has` };
  const base = await findInterpreter(options.python, projectDir).catch((error: Error) => error);
  const found = evaluateEnvironment(projectDir, stateDir, base);
  if (found.state === 'unpinned') return { pinned: null, path, state: 'unpinned', detail: `no ${PIN_FILE}` };
  const detail =
    found.state === 'ready'
      ? `${found.stamp.packages.length} package(s) for Python ${found.stamp.python_version}, installed ${found.stamp.installed_at}`
      : found.detail;
  return { pinned: found.pins.path, path, state: found.state, detail };
}

/**
 * Makes the project's environment from its pins, unless the one in place already matches them and the
 * interpreter (`changed: false`). pip runs with `--require-hashes --no-deps --only-binary=:all:`: every
 * file is checked against a pinned hash, nothing is installed that the file does not name, and no
 * package's own build code runs on the host (a source distribution would run its setup.py here,
 * outside any sandbox).
 */
export async function installPythonEnvironment(options: InstallPythonEnvironmentOptions): Promise<PythonEnvironmentReport> {
  // Installs of one project from one process (two callers of installProject, a demo and an install)
  // queue, so the second finds the first's environment ready instead of failing BUSY; other
  // processes are kept out by the lock file.
  const key = resolve(options.stateDir);
  const mine = (installing.get(key) ?? Promise.resolve()).catch(() => undefined).then(() => installOnce(options));
  installing.set(key, mine);
  try {
    return await mine;
  } finally {
    if (installing.get(key) === mine) installing.delete(key);
  }
}

async function installOnce(options: InstallPythonEnvironmentOptions): Promise<PythonEnvironmentReport> {
  const started = performance.now();
  const { projectDir, stateDir, signal } = options;
  const pins = findPythonPins(projectDir);
  if (pins === null)
    throw new PythonEnvironmentError('UNPINNED', `${join(projectDir, PIN_FILE)} does not exist: the project pins no Python packages`);
  const problems = pinProblems(pins.text);
  if (problems.length > 0) {
    throw new PythonEnvironmentError(
      'UNHASHED',
      `${pins.path} must pin every package by hash (pip's --require-hashes mode): ${problems.join('; ')}. To fix it, ${HOW_TO_HASH}`,
      {
        details: { problems },
      },
    );
  }
  let base: Interpreter;
  try {
    base = await findInterpreter(options.python, projectDir);
  } catch (error) {
    throw new PythonEnvironmentError('INTERPRETER', (error as Error).message, { cause: error });
  }
  const report = (stamp: Stamp, changed: boolean): PythonEnvironmentReport => ({
    path: join(stateDir, ENV_LINK),
    interpreter: stamp.interpreter,
    python_version: stamp.python_version,
    packages: stamp.packages,
    changed,
    seconds: Math.round(performance.now() - started) / 1000,
  });
  const before = evaluateEnvironment(projectDir, stateDir, base);
  if (before.state === 'ready') return report(before.stamp, false);
  const link = join(stateDir, ENV_LINK);
  if (lstatSync(link, { throwIfNoEntry: false })?.isSymbolicLink() === false) {
    throw new PythonEnvironmentError('INSTALL_FAILED', `${link} exists and is not the link Arium keeps there; move it away and install again`);
  }
  const versions = join(stateDir, VERSIONS);
  mkdirSync(versions, { recursive: true });
  const release = lock(join(stateDir, LOCK));
  const id = `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const dir = join(versions, id);
  try {
    const pipWithPython = await pipTakesPython(base.executable, signal);
    await run(base.executable, ['-I', '-m', 'venv', ...(pipWithPython ? ['--without-pip'] : []), dir], 'venv', signal);
    const python = join(dir, ENV_PYTHON);
    const pip = pipWithPython ? [base.executable, ['-I', '-m', 'pip', '--python', python]] : [python, ['-I', '-m', 'pip']];
    const where = [
      ...(options.pip?.noIndex ? ['--no-index'] : []),
      ...(options.pip?.indexUrl ? ['--index-url', options.pip.indexUrl] : []),
      ...(options.pip?.findLinks ?? []).flatMap((f) => ['--find-links', f]),
    ];
    const flags = ['--disable-pip-version-check', '--no-input', '--require-hashes', '--no-deps', '--only-binary=:all:'];
    await run(pip[0] as string, [...(pip[1] as string[]), 'install', ...flags, ...where, '-r', pins.path], 'pip', signal).catch((error) => {
      throw error instanceof PythonEnvironmentError && error.code === 'INSTALL_FAILED' ? withWhereItLooked(error, options.pip) : error;
    });
    const stamp: Stamp = {
      format: 1,
      pins: { file: PIN_FILE, sha256: pins.sha256 },
      interpreter: base.executable,
      python_version: base.version,
      python_tag: await interpreterTag(base.executable).catch(() => undefined),
      packages: await installedPackages(python, signal),
      installed_at: new Date().toISOString(),
    };
    writeFileSync(join(dir, `${STAMP}.tmp`), `${JSON.stringify(stamp, null, 2)}\n`);
    renameSync(join(dir, `${STAMP}.tmp`), join(dir, STAMP));
    const previous = linked(stateDir);
    const next = join(stateDir, `${ENV_LINK}.${id}.tmp`);
    symlinkSync(join(VERSIONS, id), next);
    renameSync(next, link);
    // The environment before stays for an engine still running calls in it (it moves to the new one at
    // its next call); older ones and what interrupted installs left go.
    const versionsReal = realpathSync(versions);
    for (const name of readdirSync(versionsReal)) {
      const path = join(versionsReal, name);
      if (name !== id && path !== previous) rmSync(path, { recursive: true, force: true });
    }
    return report(stamp, true);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  } finally {
    release();
  }
}

/** pip's own words say what it could not find, not where it looked nor how to point it elsewhere. */
function withWhereItLooked(error: PythonEnvironmentError, pip: InstallPythonEnvironmentOptions['pip']): PythonEnvironmentError {
  const places = [
    ...(pip?.findLinks ?? []).map((link) => `find-links ${link}`),
    pip?.noIndex ? 'no index' : `index ${pip?.indexUrl ?? "pip's configured index (pip.conf, PIP_INDEX_URL; default PyPI)"}`,
  ];
  const message =
    `${error.message}\npip looked in: ${places.join(', ')}. Put the pinned wheels in a folder and name it in arium.json ` +
    `("pip": {"find_links": ["wheels"], "no_index": true}) or with \`arium install --find-links <dir>\`, or give an index with --index-url.`;
  return new PythonEnvironmentError('INSTALL_FAILED', message, { cause: error, details: { ...error.details, looked_in: places } });
}

/** One install at a time per project; a lock left by a process that is gone is taken over. */
function lock(path: string): () => void {
  for (let attempt = 0; ; attempt++) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => rmSync(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw error;
      const holder = Number(readFileSync(path, 'utf8'));
      if (Number.isSafeInteger(holder) && holder > 0 && alive(holder)) {
        throw new PythonEnvironmentError(
          'BUSY',
          `another install of this project's Python environment is running (pid ${holder}); run \`arium install\` again when it has finished`,
          {
            details: { pid: holder },
          },
        );
      }
      unlinkSync(path);
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function pipTakesPython(python: string, signal: AbortSignal | undefined): Promise<boolean> {
  try {
    const out = await run(python, ['-I', '-m', 'pip', '--version'], 'pip', signal);
    const [major = 0, minor = 0] = (/^pip (\d+)\.(\d+)/.exec(out)?.slice(1) ?? []).map(Number);
    return major > (PIP_WITH_PYTHON[0] as number) || (major === PIP_WITH_PYTHON[0] && minor >= (PIP_WITH_PYTHON[1] as number));
  } catch (error) {
    if (error instanceof PythonEnvironmentError && error.code === 'CANCELLED') throw error;
    return false;
  }
}

async function installedPackages(python: string, signal: AbortSignal | undefined): Promise<Array<{ name: string; version: string }>> {
  const script =
    'import importlib.metadata as m, json; print(json.dumps(sorted([{"name": d.metadata["Name"], "version": d.version} for d in m.distributions()], key=lambda p: p["name"].lower())))';
  return JSON.parse(await run(python, ['-I', '-c', script], 'inspect', signal)) as Array<{ name: string; version: string }>;
}

/**
 * Runs one step of an install and returns its stdout. Each step runs in a process group of its own, so
 * cancelling kills pip and the interpreter it starts for `--python` together. The user's environment is
 * kept: pip reads its index and certificates from it (PIP_INDEX_URL, pip.conf); -I keeps PYTHON* out.
 */
function run(command: string, args: string[], step: 'venv' | 'pip' | 'inspect', signal: AbortSignal | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new PythonEnvironmentError('CANCELLED', 'the install was cancelled'));
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, PIP_NO_INPUT: '1' } });
    let stdout = '';
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      output = (output + chunk).slice(-OUTPUT_KEEP);
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      output = (output + chunk).slice(-OUTPUT_KEEP);
    });
    const abort = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    signal?.addEventListener('abort', abort, { once: true });
    child.on('error', (error) => {
      signal?.removeEventListener('abort', abort);
      reject(
        new PythonEnvironmentError('INSTALL_FAILED', `${step}: could not run ${command}: ${error.message}`, { cause: error, details: { step } }),
      );
    });
    child.on('close', (code, killed) => {
      signal?.removeEventListener('abort', abort);
      if (signal?.aborted) return reject(new PythonEnvironmentError('CANCELLED', 'the install was cancelled'));
      if (code === 0) return resolve(stdout);
      const said = output.trim();
      // pip says what went wrong from its first ERROR line on (a hash mismatch: the file, expected, got).
      const at = said.indexOf('ERROR:');
      const gist = (at >= 0 ? said.slice(at) : said.split('\n').slice(-5).join('\n')).slice(0, 2000);
      reject(
        new PythonEnvironmentError('INSTALL_FAILED', `${step} failed (${killed ?? `exit code ${code}`}): ${gist}`, {
          details: { step, exit: code, output: said },
        }),
      );
    });
  });
}
