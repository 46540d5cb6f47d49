import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * Arium used from another project, as a newcomer would: the packed package installed into a fresh
 * project (optional dependencies left out, so isolated-vm is not compiled again), imported, and its CLI
 * run through node_modules/.bin. The test command builds dist/ before the tests run; packing here skips
 * the prepare script so that dist/ is not rewritten under the other test files.
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NPM_CLI = process.env.npm_execpath;
const temp = mkdtempSync(join(tmpdir(), 'arium-install-'));

function npm(args: string[], cwd: string): string {
  // Through the npm that runs the tests when there is one (its Node is the one under test).
  const [cmd, argv] = NPM_CLI?.endsWith('.js') ? [process.execPath, [NPM_CLI, ...args]] : ['npm', args];
  return execFileSync(cmd, argv, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, npm_config_loglevel: 'error' } });
}

afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe('installing Arium into another project', () => {
  it('the packed package installs, imports, and its CLI runs with npx-style bins', { timeout: 180_000 }, () => {
    npm(['pack', '--ignore-scripts', '--pack-destination', temp], ROOT);
    const tarball = readdirSync(temp).find((f) => f.endsWith('.tgz')) as string;
    const app = join(temp, 'app');
    mkdirSync(join(app, 'workspace', 'demo', 'tools'), { recursive: true });
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', type: 'module', private: true }));
    npm(['install', '--prefer-offline', '--omit=optional', '--no-audit', '--no-fund', join(temp, tarball)], app);
    writeFileSync(
      join(app, 'try.mjs'),
      `import { createEngine } from 'arium';
const engine = await createEngine({ workspace: './workspace', project: 'demo', watch: false, persist: false });
const result = await engine.call('fs.write', { path: '/a.txt', content: 'hi' });
const js = (await engine.status()).runners['js-runner'];
console.log(JSON.stringify({ ok: result.ok, js: js.available, reason: js.reason }));
await engine.close();
`,
    );
    const run = JSON.parse(execFileSync(process.execPath, ['try.mjs'], { cwd: app, encoding: 'utf8' }));
    expect(run.ok).toBe(true);
    // Without the optional native package, JS tools say how to get it; everything else works.
    expect(run.js).toBe(false);
    expect(run.reason).toMatch(/npm install isolated-vm@[56]/);
    const tools = JSON.parse(
      execFileSync(join(app, 'node_modules', '.bin', 'arium'), ['tools', '--project', 'demo', '--json'], { cwd: app, encoding: 'utf8' }),
    );
    expect(tools.tools.map((t: { id: string }) => t.id)).toContain('fs.write');
  });

  it('from a folder that was never installed, prepare says what to do instead of failing later', () => {
    const folder = join(temp, 'checkout');
    cpSync(join(ROOT, 'package.json'), join(folder, 'package.json'));
    cpSync(join(ROOT, 'scripts'), join(folder, 'scripts'), { recursive: true });
    expect(existsSync(join(folder, 'node_modules'))).toBe(false);
    const r = spawnSync(process.execPath, [join(folder, 'scripts', 'prepare.mjs')], { cwd: folder, encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${folder} is not built (no dist/) and its dependencies are not installed`);
    expect(r.stderr).toContain(`Run \`npm install\` in ${folder} first`);
  });
});
