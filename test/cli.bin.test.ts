import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { tempWorkspace } from './cli.helpers.js';

/** The real `bin/arium.js` in a real process: the shim, exit codes, and that the process ends when the work does. */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'arium.js');
const MAIN = join(ROOT, 'dist', 'src', 'surfaces', 'cli', 'main.js');

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

beforeAll(() => {
  // `npm test` builds first; on its own this suite builds only when dist/ is missing or older than the sources.
  const built = existsSync(MAIN) ? statSync(MAIN).mtimeMs : 0;
  if (built < Math.max(newestSource(join(ROOT, 'src')), newestSource(join(ROOT, 'runners')))) {
    try {
      execFileSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.json')], { stdio: 'pipe' });
    } catch {
      // tsc still emits when another module has a type error; the type check is npm test's job, not this suite's.
    }
  }
  if (!existsSync(MAIN)) throw new Error(`the build did not produce ${MAIN}: run npx tsc -p tsconfig.json and read its errors`);
}, 120_000);

let ws: ReturnType<typeof tempWorkspace>;
beforeEach(() => {
  ws = tempWorkspace();
});
afterEach(() => ws.cleanup());

function arium(args: string[], input?: string) {
  return spawnSync(process.execPath, [BIN, ...args], {
    cwd: ws.root,
    encoding: 'utf8',
    input,
    timeout: 60_000,
    env: { ...process.env, NO_COLOR: '1' },
  });
}

describe('bin/arium.js', () => {
  it('runs the demo end to end on builtins alone', () => {
    mkdirSync(join(ws.workspace, 'demo', 'tools'), { recursive: true });
    const r = arium(['demo', '--workspace', 'ws']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('+- [ ] ship it');
    expect(r.stdout).toMatch(/Events: \d+ ToolInvocationEvent/);
    expect(r.stdout).not.toContain('\u001b[');
  });

  it('doctor finishes and prints one JSON document (the process does not end before the runners answer)', () => {
    const r = arium(['doctor', '--workspace', 'ws', '--project', 'p', '--json']);
    expect(r.status).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.checks.length).toBeGreaterThanOrEqual(6);
    expect(report.engine.runners.builtin.available).toBe(true);
  });

  it('returns the documented exit codes', () => {
    const P = ['--workspace', 'ws', '--project', 'p'];
    expect(arium(['call', 'fs.write', '-', ...P], '{"path":"/a","content":"a"}').status).toBe(0);
    expect(arium(['call', 'fs.read', '{"path":"/nope"}', ...P]).status).toBe(1);
    expect(arium(['tools', '--bogus', ...P]).status).toBe(2);
    const missing = arium(['tools', '--workspace', 'ws', '--project', 'nope']);
    expect(missing.status).toBe(3);
    expect(missing.stderr).toContain('Project "nope" not found');
  });

  it('a call that needs approval, without a terminal, ends at once as denied; --approve runs it as the OS user', () => {
    const P = ['--workspace', 'ws', '--project', 'p'];
    writeFileSync(join(ws.workspace, 'p', 'arium.json'), JSON.stringify({ approvals: { rules: [{ tool: 'fs.write' }] } }));
    const denied = arium(['call', 'fs.write', '{"path":"/a","content":"a"}', ...P, '--json']);
    expect(denied.status).toBe(1);
    expect(JSON.parse(denied.stdout).error).toMatchObject({ code: 'APPROVAL_DENIED' });
    expect(JSON.parse(denied.stdout).error.message).toContain('--approve');
    const approved = arium(['call', 'fs.write', '{"path":"/a","content":"a"}', ...P, '--approve', '--json']);
    expect(approved.status).toBe(0);
  });

  it('says to build when dist/ is missing', () => {
    mkdirSync(join(ws.root, 'pkg', 'bin'), { recursive: true });
    copyFileSync(BIN, join(ws.root, 'pkg', 'bin', 'arium.js'));
    const r = spawnSync(process.execPath, [join(ws.root, 'pkg', 'bin', 'arium.js'), 'tools'], { encoding: 'utf8' });
    expect(r.status).toBe(3);
    expect(r.stderr).toContain('run npm run build');
  });
});
