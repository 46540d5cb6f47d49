import { execFile } from 'node:child_process';
import { chmodSync, existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { bwrapProblem, unshareProblem } from '../runners/python/isolation.js';
import { copyFixtureProject } from './support/project.js';

// The Python sandbox as an engine that is not root builds it: bubblewrap with a user namespace, the
// fork server's own unshare with a user namespace, capabilities dropped instead of a uid of its own.
// Run for real as uid 65534 (nobody) through setpriv when the tests run as root and nobody can reach
// this checkout and a system Python; elsewhere the reason to skip is printed.

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const PYTHON = '/usr/bin/python3';

function reachable(path: string): boolean {
  for (let p = path; ; p = dirname(p)) {
    if (!(statSync(p).mode & 0o001)) return false;
    if (dirname(p) === p) return true;
  }
}

interface Found {
  echo: boolean;
  status: { isolation: string };
  identity: { uid: number; status: Record<string, string>; unshare_user: [number, number] };
  network: { outcomes: string[]; interfaces: string[] };
  files: { readable: string[]; processes: number };
  persistence: { left: string[]; found: string[] } | null;
  programs: Record<string, { raised?: string }>;
  stdlib: { sqlite?: number; ssl?: string; zoneinfo?: string };
  view: { programs: string[]; shells: string[] } | null;
}

const why =
  process.getuid?.() !== 0
    ? 'the tests do not run as root'
    : !existsSync('/usr/bin/setpriv')
      ? 'setpriv is missing'
      : !existsSync(PYTHON)
        ? `${PYTHON} is missing`
        : !reachable(repo)
          ? `uid 65534 cannot reach ${repo}`
          : null;
if (why) console.log(`py-runner.unprivileged: skipped, ${why}`);

describe.runIf(why === null)('Python sandbox as an unprivileged engine (uid 65534)', async () => {
  const modes = [...((await bwrapProblem()) === null ? ['bubblewrap'] : []), ...((await unshareProblem()) === null ? ['unshare'] : []), 'rlimits'];

  it(`builds the sandbox without root: ${modes.join(', ')}`, async () => {
    const project = copyFixtureProject('python');
    chmodSync(project.workspace, 0o755);
    try {
      const script = resolve(repo, 'test/support/py-unprivileged.mjs');
      const stdout = await new Promise<string>((done, fail) => {
        execFile(
          'setpriv',
          ['--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, script, project.workspace, PYTHON, ...modes],
          { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: '/tmp' }, timeout: 60_000 },
          (error, out, err) => (error ? fail(new Error(`${error.message}\n${err}`)) : done(out)),
        );
      });
      const report = JSON.parse(stdout) as Record<string, Found>;
      for (const mode of modes) {
        const found = report[mode] as Found;
        expect(found.echo, mode).toBe(true);
        expect(found.status.isolation, mode).toBe(mode);
        expect(found.identity.status.CapEff, mode).toBe('0000000000000000');
        expect(found.identity.status.NoNewPrivs, mode).toBe('1');
        expect(found.identity.status.Seccomp, mode).toBe('2');
        expect(found.identity.unshare_user[0], mode).toBe(-1);
        // No sys.exec: no program runs, whatever the route; the standard library imports (a system
        // Python here, whose prefix is /usr: only its own folders of /usr are in the view).
        expect(found.programs['subprocess.run']?.raised, mode).toBe('PermissionError');
        expect(found.programs['raw execve']?.raised, mode).toBe('PermissionError');
        expect(found.stdlib, mode).toMatchObject({ sqlite: 42, ssl: 'OpenSSL', zoneinfo: 'Europe/Paris' });
        if (mode === 'rlimits') {
          expect(found.identity.uid).toBe(65534);
          continue;
        }
        expect(found.identity.status.CapBnd, mode).toBe('0000000000000000');
        expect(found.network.outcomes, mode).not.toContain('connected');
        expect(found.network.interfaces, mode).toEqual(['lo']);
        expect(found.files.readable, mode).toEqual([]);
        expect(found.files.processes, mode).toBe(1);
        expect(found.view, mode).toEqual({ programs: [], shells: [] });
        // uid 0 of a user namespace owns the sandbox's root: nothing a call writes may stay for the next.
        expect(found.persistence?.left, mode).toContain('/tmp');
        expect(found.persistence?.found, mode).toEqual([]);
      }
    } finally {
      project.remove();
    }
  });
});
