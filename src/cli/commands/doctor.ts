import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import type { Context } from '../context.js';
import { table } from '../format.js';
import { EXIT } from '../io.js';

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

/** Runs a probe; a missing binary or a hang is an answer, never an exception. */
function run(file: string, args: string[], timeoutMs = 10_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: timeoutMs, encoding: 'utf8' }, (error, stdout, stderr) => {
      const err = error as (NodeJS.ErrnoException & { code?: number | string; killed?: boolean }) | null;
      if (err && typeof err.code === 'string') resolve({ code: null, stdout, stderr, error: err.code === 'ENOENT' ? 'not installed' : err.code });
      else if (err?.killed) resolve({ code: null, stdout, stderr, error: `no answer within ${timeoutMs} ms` });
      else resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

function firstLine(s: string): string {
  return s.trim().split('\n')[0] ?? '';
}

async function checkIsolatedVm(): Promise<Check> {
  let path: string;
  try {
    path = dirname(createRequire(import.meta.url).resolve('isolated-vm/package.json'));
  } catch {
    return {
      name: 'isolated-vm',
      ok: false,
      detail: 'not installed',
      fix: 'npm install (it compiles isolated-vm from source; needs python3, make and g++)',
    };
  }
  const script = `const ivm=require(${JSON.stringify(path)});const i=new ivm.Isolate({memoryLimit:16});const r=i.compileScriptSync('6*7').runSync(i.createContextSync());i.dispose();console.log(r, require(${JSON.stringify(`${path}/package.json`)}).version)`;
  const r = await run(process.execPath, ['--no-node-snapshot', '-e', script]);
  if (r.code === 0 && r.stdout.startsWith('42'))
    return { name: 'isolated-vm', ok: true, detail: `${r.stdout.trim().split(' ')[1]} loads under node --no-node-snapshot` };
  return {
    name: 'isolated-vm',
    ok: false,
    detail: r.error ?? firstLine(r.stderr || r.stdout),
    fix: 'rebuild it for this Node: npm rebuild isolated-vm (5.x for Node 20, 6.x+ for Node 22/24)',
  };
}

async function checkPython(configured: string | undefined): Promise<Check> {
  const bin = configured ?? 'python3';
  const r = await run(bin, ['-c', 'import sys; print(sys.executable); print(sys.version.split()[0])']);
  if (r.code !== 0)
    return {
      name: 'python',
      ok: false,
      detail: `${bin}: ${r.error ?? firstLine(r.stderr)}`,
      fix: 'install python3 (3.8 or later), or set "python" in arium.json',
    };
  const [exe, version] = r.stdout.trim().split('\n');
  return { name: 'python', ok: true, detail: `${version} at ${exe}${exe !== bin ? ` (real interpreter behind ${bin})` : ''}` };
}

async function checkBwrap(): Promise<Check> {
  const version = await run('bwrap', ['--version']);
  if (version.code !== 0)
    return {
      name: 'bubblewrap',
      ok: false,
      detail: version.error ?? firstLine(version.stderr),
      fix: 'apt-get install bubblewrap (namespace isolation for Python tools)',
    };
  const trial = await run('bwrap', ['--ro-bind', '/', '/', '--dev', '/dev', '--unshare-all', '--die-with-parent', 'true']);
  if (trial.code !== 0)
    return {
      name: 'bubblewrap',
      ok: false,
      detail: `${firstLine(version.stdout)} installed but cannot create namespaces: ${firstLine(trial.stderr)}`,
      fix: 'allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run where they are allowed',
    };
  return { name: 'bubblewrap', ok: true, detail: `${firstLine(version.stdout)}, namespaces usable` };
}

async function checkUserns(): Promise<Check> {
  const r = await run('unshare', ['-Ur', 'true']);
  if (r.code === 0) return { name: 'user namespaces', ok: true, detail: 'unshare -Ur works' };
  return {
    name: 'user namespaces',
    ok: false,
    detail: r.error ?? firstLine(r.stderr),
    fix: 'install util-linux and allow unprivileged user namespaces',
  };
}

export async function diagnose(ctx: Context): Promise<{ checks: Check[]; engine: unknown }> {
  const major = Number(process.versions.node.split('.')[0]);
  const checks: Check[] = [{ name: 'node', ok: major >= 20, detail: process.version, ...(major >= 20 ? {} : { fix: 'install Node 20 or later' }) }];
  let engine: unknown = null;
  let python: string | undefined;
  try {
    const e = await ctx.open();
    try {
      python = e.config.python;
      engine = await e.status();
      checks.push({ name: `project ${ctx.project}`, ok: true, detail: `${e.tools().length} tools, ${e.problems().length} definition problems` });
    } finally {
      await e.close();
    }
  } catch (error) {
    checks.push({
      name: `project ${ctx.project}`,
      ok: false,
      detail: (error as Error).message,
      fix: `arium init ${ctx.project}, or pass --workspace/--project`,
    });
  }
  checks.push(...(await Promise.all([checkIsolatedVm(), checkPython(python), checkBwrap(), checkUserns()])));
  return { checks, engine };
}

export async function doctorCommand(ctx: Context): Promise<number> {
  const report = await diagnose(ctx);
  if (ctx.json) {
    ctx.emit(report);
    return EXIT.ok;
  }
  const { c } = ctx;
  ctx.out(table(report.checks.map((k) => [k.ok ? c.green('✓') : c.red('✗'), c.bold(k.name), k.detail])));
  for (const k of report.checks) if (!k.ok && k.fix) ctx.out(c.yellow(`fix ${k.name}: ${k.fix}`));
  if (report.engine) {
    const runners = (report.engine as { runners: Record<string, Record<string, unknown>> }).runners;
    ctx.out('');
    ctx.out(c.bold('runners'));
    for (const [name, status] of Object.entries(runners)) {
      const { available, reason, ...rest } = status;
      const facts = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : String(v)}`);
      ctx.out(`  ${available ? c.green('✓') : c.red('✗')} ${name}${reason ? `: ${reason}` : ''}${facts.length ? c.dim(` ${facts.join(' ')}`) : ''}`);
    }
  }
  return EXIT.ok;
}
