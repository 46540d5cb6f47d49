import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installPythonEnvironment, PythonEnvironmentError, pythonEnvironmentStatus } from '../runners/python/environment.js';
import { PythonRunner } from '../runners/python/index.js';
import { findInterpreter } from '../runners/python/interpreter.js';
import { bwrapProblem, unshareProblem } from '../runners/python/isolation.js';
import { pinProblems } from '../runners/python/pins.js';
import type { Engine, ErrorInfo, ToolResult } from '../src/index.js';
import { copyFixtureProject, openEngine, type TempProject } from './support/project.js';

// A project's pinned Python environment (runners/python/environment.ts), for real: no package index is
// reachable here, so the test writes two wheels of a small package itself (fixtures/python-env/wheel),
// pins them by the hash `pip hash` gives, installs them with pip from that folder alone, and calls
// tools (fixtures/python-env/tools) that import the package, in every isolation the machine offers.

const bwrap = await bwrapProblem();
const unshare = await unshareProblem();
const modes = [...(bwrap === null ? (['bubblewrap'] as const) : []), ...(unshare === null ? (['unshare'] as const) : []), 'rlimits'] as const;
const python = (await findInterpreter(undefined, process.cwd())).executable;
const PACKAGE = 'arium_pin_demo';

let wheels: string;
const hashes = new Map<string, string>();
let project: TempProject;
let stateDir: string;

function ok<T>(result: ToolResult): T {
  if (!result.ok) throw new Error(`expected success, got ${JSON.stringify(result.error)}`);
  return result.data as T;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function failed(result: ToolResult): ErrorInfo {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)}`);
  return result.error;
}

function pin(version: string, hash = hashes.get(version)): void {
  writeFileSync(join(project.dir, 'requirements.txt'), `# pinned by the test\n${PACKAGE}==${version} \\\n    --hash=${hash}\n`);
}

const install = () => installPythonEnvironment({ projectDir: project.dir, stateDir, pip: { noIndex: true, findLinks: [wheels] } });
const envDir = () => realpathSync(join(stateDir, 'python-env'));

async function withEngine(mode: (typeof modes)[number], body: (engine: Engine) => Promise<void>): Promise<void> {
  const engine = await openEngine(project, { runners: [new PythonRunner({ isolation: mode, servers: 1 })] });
  try {
    await body(engine);
  } finally {
    await engine.close();
  }
}

beforeAll(() => {
  wheels = mkdtempSync(join(tmpdir(), 'arium-wheels-'));
  for (const version of ['1.0', '2.0']) {
    const wheel = execFileSync(python, [new URL('../fixtures/python-env/wheel/make_wheel.py', import.meta.url).pathname, PACKAGE, version, wheels], {
      encoding: 'utf8',
    }).trim();
    const said = execFileSync(python, ['-m', 'pip', 'hash', '--algorithm', 'sha256', wheel], { encoding: 'utf8' });
    hashes.set(version, /--hash=(sha256:[0-9a-f]{64})/.exec(said)?.[1] as string);
  }
  project = copyFixtureProject('python-env');
  // Searchable by others, as a workspace usually is: without namespaces (rlimits, as root) each call
  // then runs as a uid of its own, which cannot write what root installed.
  chmodSync(project.workspace, 0o755);
  stateDir = join(project.dir, '.arium');
});

afterAll(() => {
  project?.remove();
  rmSync(wheels, { recursive: true, force: true });
});

describe('pinning', () => {
  it.each([
    ['a requirement without a hash', `${PACKAGE}==1.0\n`, 'has no --hash'],
    ['another file included', '-r more.txt\n', 'includes another file'],
    ['an editable folder', '-e ./src\n', 'cannot be hashed'],
  ])('refuses %s, saying how to make hashes', async (_, text, problem) => {
    writeFileSync(join(project.dir, 'requirements.txt'), text);
    const error = await install().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PythonEnvironmentError);
    expect((error as PythonEnvironmentError).code).toBe('UNHASHED');
    expect((error as Error).message).toContain(problem);
    expect((error as Error).message).toContain('pip hash');
    expect((error as Error).message).toContain('pip-compile --generate-hashes');
    expect(existsSync(join(stateDir, 'python-env'))).toBe(false);
  });

  it('accepts hashes on continued lines, options and comments', () => {
    expect(pinProblems(`--no-binary :none:\n# a comment\nx==1 \\\n  --hash=sha256:${'a'.repeat(64)}  # why\n`)).toEqual([]);
    expect(pinProblems(`x==1 --hash=sha256:${'a'.repeat(63)}\n`)).toEqual(['line 1: x==1 has no --hash=sha256:…']);
  });

  it('a pinned project without its environment fails each Python call, not retryable, naming arium install', async () => {
    pin('1.0');
    expect(await pythonEnvironmentStatus(project.dir, stateDir)).toMatchObject({ state: 'missing', pinned: join(project.dir, 'requirements.txt') });
    await withEngine('rlimits', async (engine) => {
      const error = failed(await engine.call('env.pinned', { x: 1 }));
      expect(error).toMatchObject({ code: 'MISCONFIGURED', retryable: false, details: { environment: 'missing', reason: 'missing' } });
      expect(error.message).toContain('`arium install`');
    });
  });
});

describe('installing', () => {
  it('makes the environment from the pinned wheel; again with nothing changed, does nothing', async () => {
    pin('1.0');
    const first = await install();
    expect(first).toMatchObject({ changed: true, python_version: expect.any(String), packages: [{ name: PACKAGE, version: '1.0' }] });
    expect(lstatSync(first.path).isSymbolicLink()).toBe(true);
    expect(await pythonEnvironmentStatus(project.dir, stateDir)).toMatchObject({ state: 'ready' });
    const dir = envDir();
    const again = await install();
    expect(again).toMatchObject({ changed: false, packages: first.packages });
    expect(again.seconds).toBeLessThan(1);
    expect(envDir()).toBe(dir);
  });

  it('refuses a file whose hash does not match, with pip saying so, and keeps the environment before', async () => {
    const before = envDir();
    pin('2.0', hashes.get('1.0'));
    const error = (await install().catch((e: unknown) => e)) as PythonEnvironmentError;
    expect(error.code).toBe('INSTALL_FAILED');
    expect(error.message).toMatch(/DO NOT MATCH THE HASHES/);
    expect(error.message).toContain(hashes.get('1.0')?.slice(7));
    expect(envDir()).toBe(before);
    // Only the environment in use is left: the one pip failed in is gone.
    expect(readdirSync(join(stateDir, 'python-env.d'))).toHaveLength(1);
    pin('1.0');
    expect(await pythonEnvironmentStatus(project.dir, stateDir)).toMatchObject({ state: 'ready' });
  });

  it('an install cancelled while pip runs leaves the environment before in use and nothing half made', async () => {
    const before = envDir();
    pin('2.0');
    const controller = new AbortController();
    const installing = installPythonEnvironment({
      projectDir: project.dir,
      stateDir,
      pip: { noIndex: true, findLinks: [wheels] },
      signal: controller.signal,
    });
    // Cancelled once the new environment's folder exists: the venv is made, pip is at work in it.
    const versions = join(stateDir, 'python-env.d');
    while (readdirSync(versions).length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
    controller.abort();
    const error = (await installing.catch((e: unknown) => e)) as PythonEnvironmentError;
    expect(error.code).toBe('CANCELLED');
    expect(envDir()).toBe(before);
    expect(readdirSync(versions)).toHaveLength(1);
    expect(existsSync(join(stateDir, 'python-env.lock'))).toBe(false);
    pin('1.0');
    expect(await pythonEnvironmentStatus(project.dir, stateDir)).toMatchObject({ state: 'ready' });
  });
});

describe.each(modes)('a pinned project (%s)', (mode) => {
  const namespaced = mode !== 'rlimits';

  it('runs its tools in the environment: they import the pinned package', async () => {
    pin('1.0');
    await install();
    await withEngine(mode, async (engine) => {
      const result = await engine.call('env.pinned', { x: 14 });
      const data = ok<{ value: number; version: string; file: string; prefix: string }>(result);
      expect(data).toMatchObject({ value: 42, version: '1.0' });
      expect(result.meta.isolation).toBe(mode);
      expect(data.prefix).toBe(namespaced ? '/venv' : envDir());
    });
  });

  it('shows the environment read-only and nothing else new of the host', async () => {
    await withEngine(mode, async (engine) => {
      const host = [stateDir, join(stateDir, 'python-env'), envDir(), project.dir];
      const seen = ok<{ root: string[]; venv: string[] | string; host: Record<string, boolean>; path: string[] }>(
        await engine.call('env.view', { host }),
      );
      if (!namespaced) return;
      expect(seen.root).toContain('venv');
      expect(seen.venv).toEqual(expect.arrayContaining(['bin', 'lib', 'pyvenv.cfg', 'arium-env.json']));
      expect(Object.values(seen.host)).toEqual([false, false, false, false]);
      expect(seen.path).toEqual([expect.stringMatching(/^\/venv\/lib\/python3\.\d+\/site-packages$/)]);
    });
  });

  it('a tool cannot change the environment: the next call imports the pristine package', async () => {
    let keptRoot = false;
    await withEngine(mode, async (engine) => {
      const tried = ok<Record<string, string | number>>(await engine.call('env.tamper', {}));
      const attempts = Object.entries(tried).filter(([name]) => name !== 'package' && name !== 'uid');
      keptRoot = !namespaced && tried.uid === 0;
      if (keptRoot) {
        // Without namespaces a call keeps uid 0 when the interpreter is not readable by others (pyenv
        // under /root, 0700, as here): no file-system boundary at all, the environment included.
        expect(tried.append).toBe('done');
        return;
      }
      // Read-only mounts with namespaces; without, a uid of its own that cannot write root's files.
      for (const [name, outcome] of attempts) expect([name, outcome]).toEqual([name, expect.stringMatching(/^(OSError|PermissionError)$/)]);
      expect(ok(await engine.call('env.pinned', { x: 2 }))).toMatchObject({ value: 6, version: '1.0' });
    });
    if (keptRoot) {
      // Repaired for the tests that follow: a new environment in place of the one the tool changed.
      rmSync(join(stateDir, 'python-env.d'), { recursive: true });
      expect(await install()).toMatchObject({ changed: true });
      return;
    }
    const site = execFileSync(
      join(envDir(), 'bin', 'python3'),
      ['-I', '-c', `import ${PACKAGE}, os; print(os.listdir(os.path.dirname(${PACKAGE}.__path__[0])))`],
      {
        encoding: 'utf8',
      },
    );
    expect(site).not.toContain('arium_evil');
  });

  it.runIf(mode === modes[0])('runs 8 calls at once in the environment', async () => {
    await withEngine(mode, async (engine) => {
      const results = await Promise.all(Array.from({ length: 8 }, (_, i) => engine.call('env.pinned', { x: i })));
      expect(results.map((r) => ok<{ value: number }>(r).value)).toEqual([0, 3, 6, 9, 12, 15, 18, 21]);
    });
  });
});

describe('pins edited while an engine runs', () => {
  it('fails calls until the environment is installed again, then runs the new pins in the same engine', async () => {
    pin('1.0');
    await install();
    await withEngine(modes[0], async (engine) => {
      expect(ok(await engine.call('env.pinned', { x: 1 }))).toMatchObject({ version: '1.0' });
      const old = ((await engine.status()).runners['py-runner']?.server_pids as number[] | undefined)?.[0];
      expect(old).toBeTypeOf('number');
      pin('2.0');
      const error = failed(await engine.call('env.pinned', { x: 1 }));
      expect(error).toMatchObject({ code: 'MISCONFIGURED', retryable: false, details: { reason: 'pins-changed' } });
      expect(error.message).toMatch(/requirements\.txt changed.*`arium install`/);
      expect(await pythonEnvironmentStatus(project.dir, stateDir)).toMatchObject({ state: 'stale' });
      expect(await install()).toMatchObject({ changed: true, packages: [{ name: PACKAGE, version: '2.0' }] });
      expect(ok(await engine.call('env.pinned', { x: 1 }))).toMatchObject({ value: 3, version: '2.0' });
      // The server of the environment before had no call in flight: it was closed, not left running.
      expect((await engine.status()).runners['py-runner']?.server_pids).not.toContain(old);
      for (let waited = 0; alive(old as number) && waited < 5000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(alive(old as number)).toBe(false);
    });
  });
});

describe('an unpinned project', () => {
  it('runs its tools with the interpreter itself, as before', async () => {
    rmSync(join(project.dir, 'requirements.txt'));
    expect(await pythonEnvironmentStatus(project.dir, stateDir)).toMatchObject({ state: 'unpinned', pinned: null });
    await withEngine(modes[0], async (engine) => {
      const error = failed(await engine.call('env.pinned', { x: 1 }));
      expect(error.code).toBe('TOOL_ERROR');
      expect(error.message).toContain(`No module named '${PACKAGE}'`);
      const seen = ok<{ root: string[]; prefix: string }>(await engine.call('env.view', {}));
      expect(seen.root).not.toContain('venv');
      expect(seen.prefix).toBe(realpathSync(join(python, '..', '..')));
    });
  });
});
