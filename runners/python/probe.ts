import { type Check, firstLine, run } from '../../src/probe.js';
import { harnessDir, MIN_PYTHON_MINOR } from './interpreter.js';
import { LANDLOCK_SCOPES } from './isolation.js';

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
