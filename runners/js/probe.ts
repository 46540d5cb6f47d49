import { dirname, join } from 'node:path';
import { type Check, firstLine, run } from '../../src/probe.js';
import { installAdvice, isolatedVmDir } from './locate.js';

/** The package.json of the isolated-vm the JS runner would load; throws when there is none. */
function installedIsolatedVm(): string {
  const dir = isolatedVmDir();
  if (dir === null) throw new Error('Cannot find module isolated-vm');
  return join(dir, 'package.json');
}

/** `locate` finds isolated-vm's package.json (tests give one that fails). */
export async function checkIsolatedVm(locate = installedIsolatedVm): Promise<Check> {
  let path: string;
  try {
    path = dirname(locate());
  } catch {
    // The same advice a JS call gives: optional dependencies were left out, or the one for this Node failed.
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
    fix: `rebuild it for this Node (npm rebuild), or reinstall it: ${installAdvice()}`,
  };
}
