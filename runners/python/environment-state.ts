import { existsSync, lstatSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Interpreter } from './interpreter.js';
import { findPythonPins, PIN_FILE, type PythonPins } from './pins.js';

/**
 * A pinned project's Python environment: a virtual environment made from the project's interpreter
 * with exactly the packages its requirements.txt pins, by hash. On disk, in the project's state folder:
 *
 *   python-env          a symbolic link to the environment in use, replaced in one rename(2)
 *   python-env.d/<id>/  each environment, made where it stays: a venv is not relocatable (its scripts
 *                       and pyvenv.cfg name its folder), so it is built in place and then linked
 *   python-env.lock     held while an install runs
 *
 * A failed or interrupted install leaves the link on the environment before it; the one being built is
 * never linked, and the next install removes it. An environment carries its stamp (arium-env.json: the
 * pin file's sha256, the interpreter and its version); one whose stamp does not match the project is
 * stale, and Python calls of the project fail until `arium install` makes a new one.
 */
export const ENV_LINK = 'python-env';
export const VERSIONS = 'python-env.d';
export const STAMP = 'arium-env.json';
/** Where an environment's python is inside it (a venv on POSIX). */
export const ENV_PYTHON = join('bin', 'python3');

export type PythonEnvironmentState = 'unpinned' | 'missing' | 'stale' | 'ready';
export type StaleReason = 'missing' | 'pins-changed' | 'interpreter-changed';

export interface Stamp {
  format: 1;
  pins: { file: string; sha256: string };
  interpreter: string;
  python_version: string;
  /** What the packages need of an interpreter (interpreterTag); absent in environments made before it was kept. */
  python_tag?: string;
  packages: Array<{ name: string; version: string }>;
  installed_at: string;
}

export type Evaluated =
  | { state: 'unpinned' }
  | { state: 'missing'; pins: PythonPins; reason: 'missing'; detail: string }
  | { state: 'stale'; pins: PythonPins; reason: Exclude<StaleReason, 'missing'>; detail: string }
  | { state: 'ready'; pins: PythonPins; dir: string; stamp: Stamp };

const RUN_INSTALL = 'run `arium install`';
function readStamp(dir: string): Stamp | null {
  try {
    const stamp = JSON.parse(readFileSync(join(dir, STAMP), 'utf8')) as Stamp;
    return stamp?.format === 1 && typeof stamp.pins?.sha256 === 'string' && typeof stamp.interpreter === 'string' ? stamp : null;
  } catch {
    return null;
  }
}

/** The environment's real folder (the link followed), or null when there is none. */
export function linked(stateDir: string): string | null {
  try {
    const dir = realpathSync(join(stateDir, ENV_LINK));
    return existsSync(join(dir, ENV_PYTHON)) ? dir : null;
  } catch {
    return null;
  }
}

/** Where the project's environment stands against its pins and the interpreter `base` (the project's python). */
export function evaluateEnvironment(projectDir: string, stateDir: string, base: Pick<Interpreter, 'executable' | 'version'> | Error): Evaluated {
  const pins = findPythonPins(projectDir);
  if (pins === null) return { state: 'unpinned' };
  const dir = linked(stateDir);
  const stamp = dir === null ? null : readStamp(dir);
  if (dir === null || stamp === null) {
    return {
      state: 'missing',
      pins,
      reason: 'missing',
      detail: `the project pins Python packages (${PIN_FILE}) but has no environment: ${RUN_INSTALL}`,
    };
  }
  if (stamp.pins.sha256 !== pins.sha256) {
    return { state: 'stale', pins, reason: 'pins-changed', detail: `${PIN_FILE} changed since the environment was installed: ${RUN_INSTALL}` };
  }
  if (base instanceof Error || stamp.interpreter !== base.executable || stamp.python_version !== base.version) {
    const now =
      base instanceof Error
        ? `the project's interpreter is not usable (${base.message})`
        : `the project now uses ${base.executable} (${base.version})`;
    return {
      state: 'stale',
      pins,
      reason: 'interpreter-changed',
      detail: `the environment was made with ${stamp.interpreter} (${stamp.python_version}) and ${now}: ${RUN_INSTALL}`,
    };
  }
  return { state: 'ready', pins, dir, stamp };
}

/**
 * The runner's view of one project's environment, evaluated again only when a file that decides it
 * changed: the pin file, the link, the stamp it leads to (three stat calls a Python call).
 */
export class EnvironmentWatch {
  readonly #projectDir: string;
  readonly #stateDir: string;
  #signature = '';
  #last: Evaluated | null = null;

  constructor(projectDir: string, stateDir: string) {
    this.#projectDir = projectDir;
    this.#stateDir = stateDir;
  }

  /** Where the environment stands; `base` (the project's interpreter) is asked for only when the project pins packages. */
  async current(base: () => Promise<Pick<Interpreter, 'executable' | 'version'>>): Promise<Evaluated> {
    const pins = join(this.#projectDir, PIN_FILE);
    const pinStat = statSync(pins, { bigint: true, throwIfNoEntry: false });
    if (pinStat === undefined) return { state: 'unpinned' };
    const link = lstatSync(join(this.#stateDir, ENV_LINK), { bigint: true, throwIfNoEntry: false });
    const stamp = statSync(join(this.#stateDir, ENV_LINK, STAMP), { bigint: true, throwIfNoEntry: false });
    const interpreter = await base();
    const signature = [pinStat, link, stamp]
      .map((st) => (st ? `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}` : '-'))
      .concat(interpreter.executable, interpreter.version)
      .join('|');
    if (signature !== this.#signature || this.#last === null) {
      this.#last = evaluateEnvironment(this.#projectDir, this.#stateDir, interpreter);
      this.#signature = signature;
    }
    return this.#last;
  }
}
