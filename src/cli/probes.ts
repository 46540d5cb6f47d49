import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { installAdvice } from '../../runners/js/locate.js';
import { harnessDir, MIN_PYTHON_MINOR } from '../../runners/python/interpreter.js';
import { LANDLOCK_SCOPES } from '../../runners/python/isolation.js';

/**
 * What `arium doctor` asks the machine. Each probe runs a real command in a child process with a
 * timeout, because "installed" is not "usable": a binary may exist but be refused namespaces, and a
 * native module may exist but be built for another Node. A missing binary or a hang is an answer,
 * never an exception.
 */

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  /** How to fix it, for failed checks. */
  fix?: string;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  error?: string;
}

export const PROBE_TIMEOUT_MS = 10_000;

export function run(file: string, args: string[], timeoutMs = PROBE_TIMEOUT_MS): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: timeoutMs, encoding: 'utf8', killSignal: 'SIGKILL' }, (error, stdout, stderr) => {
      const err = error as (NodeJS.ErrnoException & { code?: number | string; killed?: boolean }) | null;
      if (err && typeof err.code === 'string') resolve({ code: null, stdout, stderr, error: err.code === 'ENOENT' ? 'not found on PATH' : err.code });
      else if (err?.killed) resolve({ code: null, stdout, stderr, error: `no answer within ${timeoutMs} ms` });
      else resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

function firstLine(s: string): string {
  return s.trim().split('\n')[0] ?? '';
}

export function checkNode(version = process.versions.node): Check {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  // package.json "engines": >=20.5 (the permission model flags the JS runner uses).
  const ok = major > 20 || (major === 20 && minor >= 5);
  return {
    name: 'node',
    ok,
    detail: `v${version}${ok ? ' (≥ 20.5)' : ' (too old)'}`,
    ...(ok ? {} : { fix: 'install Node 20.5 or later (https://nodejs.org)' }),
  };
}

/** `locate` finds isolated-vm's package.json (tests give one that fails). */
export async function checkIsolatedVm(locate = () => createRequire(import.meta.url).resolve('isolated-vm/package.json')): Promise<Check> {
  let path: string;
  try {
    path = dirname(locate());
  } catch {
    // The same advice a JS call gives: on Node 22 and later a plain `npm install` leaves isolated-vm out.
    return { name: 'isolated-vm', ok: false, detail: 'not installed', fix: installAdvice() };
  }
  // Node 20+ must start without its snapshot for isolated-vm to load; the JS runner's process does the same.
  const script = `const ivm=require(${JSON.stringify(path)});const i=new ivm.Isolate({memoryLimit:16});const r=i.compileScriptSync('6*7').runSync(i.createContextSync());i.dispose();console.log(r, require(${JSON.stringify(`${path}/package.json`)}).version)`;
  const r = await run(process.execPath, ['--no-node-snapshot', '-e', script]);
  if (r.code === 0 && r.stdout.startsWith('42')) {
    return { name: 'isolated-vm', ok: true, detail: `${r.stdout.trim().split(' ')[1]} loads and runs under node --no-node-snapshot` };
  }
  return {
    name: 'isolated-vm',
    ok: false,
    detail: r.error ?? firstLine(r.stderr || r.stdout),
    fix: `rebuild it for this Node (npm rebuild isolated-vm), or reinstall it: ${installAdvice()}`,
  };
}

/** The interpreter's real path: `python3` is often a shim (pyenv, asdf) that re-executes the real one. */
export async function checkPython(configured: string | undefined): Promise<Check & { executable?: string }> {
  const bin = configured ?? 'python3';
  const r = await run(bin, ['-c', 'import sys; print(sys.executable); print("%d.%d.%d" % sys.version_info[:3])']);
  if (r.code !== 0) {
    return {
      name: 'python',
      ok: false,
      detail: `${bin}: ${r.error ?? firstLine(r.stderr)}`,
      fix: configured
        ? `fix "python" in arium.json (now ${configured})`
        : `install python3 (3.${MIN_PYTHON_MINOR} or later), or set "python" in arium.json`,
    };
  }
  const [exe = '', version = '0.0.0'] = r.stdout.trim().split('\n');
  const [major = 0, minor = 0] = version.split('.').map(Number);
  const ok = major === 3 && minor >= MIN_PYTHON_MINOR;
  const behind = exe !== bin ? ` (what ${bin} runs)` : '';
  const detail = `${version} at ${exe}${behind}`;
  if (!ok) return { name: 'python', ok, detail, fix: `Python tools need Python 3.${MIN_PYTHON_MINOR} or later` };
  return { name: 'python', ok, detail, executable: exe };
}

export async function checkBwrap(): Promise<Check> {
  const version = await run('bwrap', ['--version']);
  if (version.code !== 0) {
    return {
      name: 'bubblewrap',
      ok: false,
      detail: version.error ?? firstLine(version.stderr),
      fix: 'apt-get install bubblewrap (or dnf install bubblewrap): namespace isolation for Python tools',
    };
  }
  // Installed is not usable: a container or a kernel setting may refuse it the namespaces it needs.
  const trial = await run('bwrap', ['--ro-bind', '/', '/', '--dev', '/dev', '--unshare-all', '--die-with-parent', 'true']);
  if (trial.code !== 0) {
    return {
      name: 'bubblewrap',
      ok: false,
      detail: `${firstLine(version.stdout)} is installed but cannot sandbox: ${trial.error ?? firstLine(trial.stderr)}`,
      fix: 'allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 kernel.apparmor_restrict_unprivileged_userns=0)',
    };
  }
  return { name: 'bubblewrap', ok: true, detail: `${firstLine(version.stdout)}, a trial sandbox ran` };
}

export async function checkUserNamespaces(): Promise<Check> {
  const r = await run('unshare', ['-Ur', 'true']);
  if (r.code === 0) return { name: 'user namespaces', ok: true, detail: 'unshare -Ur true works' };
  return {
    name: 'user namespaces',
    ok: false,
    detail: r.error ?? firstLine(r.stderr),
    fix:
      r.error === 'not found on PATH'
        ? 'install util-linux (unshare)'
        : 'allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)',
  };
}

/**
 * Landlock scopes (Linux 6.12+): the Python sandbox gives each call's process abstract Unix sockets of
 * its own with them. Asked through the harness itself (arium_child.landlock_abi, the system call the
 * sandbox makes), run by the interpreter checkPython found (its real executable, not a shim).
 */
export async function checkLandlock(python: string | undefined): Promise<Check> {
  const name = 'landlock';
  const consequence = 'Python calls running at the same time in one fork server can reach each other’s abstract Unix sockets';
  if (!python) return { name, ok: false, detail: 'not checked: no usable Python (see above)', fix: 'fix the Python check first' };
  const script = [
    'import sys',
    `sys.path.insert(0, ${JSON.stringify(harnessDir())})`,
    'import arium_child',
    'print(arium_child.landlock_abi() if arium_child.KNOWN_SYSCALLS else -2)',
  ].join('\n');
  // -B: asking must not write bytecode into the harness's folder.
  const r = await run(python, ['-I', '-S', '-B', '-c', script]);
  const abi = r.code === 0 ? Number.parseInt(r.stdout.trim(), 10) : Number.NaN;
  if (abi >= LANDLOCK_SCOPES) return { name, ok: true, detail: `ABI ${abi}: each Python call has abstract Unix sockets of its own` };
  const why = Number.isNaN(abi)
    ? `could not ask (${r.error ?? firstLine(r.stderr)})`
    : abi === -2
      ? 'no Landlock system call numbers for this architecture here'
      : abi > 0
        ? `ABI ${abi}, scopes need ABI ${LANDLOCK_SCOPES}`
        : 'not enabled in this kernel';
  return { name, ok: false, detail: `${why}: ${consequence}`, fix: 'Linux 6.12 or later with Landlock among its security modules (lsm=…,landlock)' };
}
