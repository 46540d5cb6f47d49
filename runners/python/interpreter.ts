import { execFile } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// node:child_process, not execa: short probes of an interpreter, on the engine's start path. Importing execa takes 0.1-0.4 s on the
// 2-core development machine, which every engine start would pay (ARCHITECTURE.md, "What a start costs").

/**
 * Finds the Python interpreter once. `python3` on PATH is often a shim (pyenv, asdf) that starts a shell
 * and re-executes the real interpreter — over 100 ms a start on some machines — so the engine asks it
 * once for `sys.executable` and starts that from then on. The prefixes it reports are what a sandbox
 * must make readable for the interpreter (and a virtualenv's packages) to work.
 */

export interface Interpreter {
  /** What was asked for (`python3`, or the project's setting). */
  requested: string;
  /** The real executable (symlinks resolved only for the prefixes: a virtualenv's python must keep its path). */
  executable: string;
  version: string;
  /** Real paths of sys.prefix, base_prefix, exec_prefix and base_exec_prefix, without duplicates. */
  roots: string[];
  /** The standard library folder (to check an unprivileged uid can read it). */
  stdlib: string;
  /**
   * What the interpreter reads besides its executable, for a sandbox that shows only what it needs:
   * the folders of `sys.path` and of sysconfig's library paths, and the time zone data (`zoneinfo`).
   */
  needs: string[];
}

export class InterpreterError extends Error {
  override readonly name = 'InterpreterError';
}

const PROBE_TIMEOUT_MS = 15_000;
const PROBE = `
import json, os, sys, sysconfig
paths = sysconfig.get_paths()
dynload = os.path.join(paths["platstdlib"], "lib-dynload")
try:
    import zoneinfo
    tz = list(zoneinfo.TZPATH)
except Exception:
    tz = []
needs = [p for p in sys.path + [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")] + [dynload] + tz if p and os.path.exists(p)]
print(json.dumps({"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
 "roots": [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix], "stdlib": paths["stdlib"],
 "needs": list(dict.fromkeys(needs))}))
`;
/** The oldest Python 3 the harness runs on: it passes descriptors with socket.send_fds and watches processes through os.pidfd_open (3.9). */
export const MIN_PYTHON_MINOR = 9;

const found = new Map<string, Promise<Interpreter>>();

/** The interpreter for `requested` (default `python3`), asked once per engine process. A relative path is resolved against `baseDir`. */
export function findInterpreter(requested: string | undefined, baseDir: string): Promise<Interpreter> {
  const bin = requested ?? 'python3';
  const path = bin.includes('/') && !isAbsolute(bin) ? resolve(baseDir, bin) : bin;
  let promise = found.get(path);
  if (!promise) {
    promise = probe(bin, path);
    found.set(path, promise);
    // A failure is not cached: the operator may install Python and retry without restarting.
    promise.catch(() => found.delete(path));
  }
  return promise;
}

function probe(requested: string, path: string): Promise<Interpreter> {
  return new Promise((resolvePromise, reject) => {
    // The engine's own environment: a shim (pyenv) needs it to find the interpreter it stands for.
    execFile(path, ['-I', '-c', PROBE], { timeout: PROBE_TIMEOUT_MS, encoding: 'utf8' }, (error, stdout, stderr) => {
      if (error) {
        const code = (error as NodeJS.ErrnoException).code;
        const why =
          code === 'ENOENT'
            ? `${requested} was not found${requested.includes('/') ? '' : ' on PATH'}`
            : code === 'EACCES'
              ? `${requested} is not executable`
              : `${requested} failed: ${(stderr || error.message).trim().split('\n').pop()}`;
        reject(new InterpreterError(`${why}. Install Python 3.${MIN_PYTHON_MINOR} or later, or set "python" in the project's arium.json`));
        return;
      }
      try {
        const facts = JSON.parse(stdout) as Omit<Interpreter, 'requested'>;
        const [major = 0, minor = 0] = facts.version.split('.').map(Number);
        if (major !== 3 || minor < MIN_PYTHON_MINOR) {
          reject(new InterpreterError(`${requested} is Python ${facts.version}; Python tools need 3.${MIN_PYTHON_MINOR} or later`));
          return;
        }
        if (!facts.executable || !isAbsolute(facts.executable)) {
          reject(
            new InterpreterError(
              `${requested} cannot tell where its executable is (sys.executable is empty); give its full path in arium.json "python"`,
            ),
          );
          return;
        }
        const roots = [...new Set(facts.roots.filter((r) => existsSync(r)).map((r) => realpathSync(r)))];
        resolvePromise({
          requested,
          executable: facts.executable,
          version: facts.version,
          roots,
          stdlib: facts.stdlib,
          needs: Array.isArray(facts.needs) ? facts.needs : [],
        });
      } catch {
        reject(new InterpreterError(`${requested} did not answer like a Python interpreter`));
      }
    });
  });
}

/** The harness folder (python/): next to the sources, or three levels up from dist/runners/python/. */
export function harnessDir(): string {
  // Next to this module in the source tree; from dist/runners/python/, the package's runners/python/sandbox/.
  const candidates = [new URL('./sandbox/', import.meta.url), new URL('../../../runners/python/sandbox/', import.meta.url)];
  for (const url of candidates) {
    const dir = fileURLToPath(url);
    if (existsSync(`${dir}arium_server.py`)) return dirname(`${dir}arium_server.py`);
  }
  throw new Error('the Python harness (runners/python/sandbox/arium_server.py) is missing from the installation');
}

const TAG_PROBE = `
import platform, sys, sysconfig
libc = platform.libc_ver()[0] if sys.platform.startswith("linux") else ""
print("%s-%d.%d%s-%s%s" % (sys.implementation.name, sys.version_info[0], sys.version_info[1], getattr(sys, "abiflags", ""),
 sysconfig.get_platform(), "-" + libc if libc else ""))
`;
const tags = new Map<string, Promise<string>>();

/**
 * What packages installed for an interpreter need of another one to import them: implementation,
 * major.minor with ABI flags, platform and C library (`cpython-3.11-linux-x86_64-glibc`). Asked once per
 * executable.
 */
export function interpreterTag(executable: string): Promise<string> {
  let promise = tags.get(executable);
  if (!promise) {
    promise = new Promise((resolvePromise, reject) => {
      execFile(executable, ['-I', '-c', TAG_PROBE], { timeout: PROBE_TIMEOUT_MS, encoding: 'utf8' }, (error, stdout, stderr) => {
        if (error) reject(new InterpreterError(`${executable} did not say what it is: ${(stderr || error.message).trim().split('\n').pop()}`));
        else resolvePromise(stdout.trim());
      });
    });
    tags.set(executable, promise);
    promise.catch(() => tags.delete(executable));
  }
  return promise;
}
