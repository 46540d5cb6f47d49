import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * Finds isolated-vm, which the sandbox processes (sandbox-process.ts) load, without loading any of it
 * here: the engine process never loads isolated-vm (it would need `--no-node-snapshot`, and a V8 abort
 * in an isolate would take it down).
 */

/**
 * The folder of an installed package, or null. Walks up from its main file (6.x may not export package.json).
 * `published` is the name in its package.json, which differs from `name` for an npm alias; `from` is
 * where the search starts (this file's node_modules and those above it).
 */
export function packageDir(name: string, published = name, from: string | URL = import.meta.url): string | null {
  let main: string;
  try {
    main = createRequire(from).resolve(name);
  } catch {
    return null;
  }
  for (let dir = dirname(main); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (!existsSync(manifest)) continue;
    try {
      if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === published) return dir;
    } catch {}
  }
  return null;
}

/**
 * Where isolated-vm may be installed, first choice first. No one isolated-vm line runs on every supported
 * Node: 5.x builds on Node 20 and 22 but not on 24, 6.x needs Node 22. package.json therefore lists both
 * as optional npm aliases, and npm leaves out the one that cannot work here (6.x by its `engines`, 5.x
 * when its build fails). A plain `isolated-vm` the user installed comes first.
 */
const ISOLATED_VM_NAMES = ['isolated-vm', 'isolated-vm-6', 'isolated-vm-5'];

/** The Node majors each isolated-vm major is taken for: [lowest, highest] (6.x is the line kept up for Node 22). */
const ISOLATED_VM_NODES: Record<number, [number, number]> = { 5: [18, 21], 6: [22, Number.POSITIVE_INFINITY], 7: [24, Number.POSITIVE_INFINITY] };

/**
 * The isolated-vm folder the sandbox process should load, or null when none is installed. It prefers a
 * line made for this Node; when only others are present it returns one anyway, so that loading it fails
 * with isolated-vm's own error rather than "not installed".
 */
export function isolatedVmDir(node = process.versions.node, from: string | URL = import.meta.url): string | null {
  const major = Number(node.split('.')[0]);
  const found = ISOLATED_VM_NAMES.map((name) => packageDir(name, 'isolated-vm', from)).filter((dir) => dir !== null);
  const fits = (dir: string) => {
    const range = ISOLATED_VM_NODES[Number(installedVersion(dir).split('.')[0])];
    return range !== undefined && major >= range[0] && major <= range[1];
  };
  return found.find(fits) ?? found[0] ?? null;
}

function installedVersion(dir: string): string {
  try {
    return String((JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: unknown }).version ?? '');
  } catch {
    return '';
  }
}

/** What to run to make isolated-vm loadable here, for UNAVAILABLE messages and `status()`; `tools` names whose tools need it. */
export function installAdvice(node = process.versions.node, tools = 'JavaScript tools'): string {
  const major = Number(node.split('.')[0]);
  const version = major >= 22 ? 'isolated-vm@6' : 'isolated-vm@5';
  return (
    `${tools} need the native package isolated-vm. On Node ${node}, install it with ` +
    `\`npm install ${version}\` (isolated-vm 5.x builds on Node 20, 6.x on Node 22 and 24); building it needs ` +
    'python3, make and a C++ compiler when no prebuilt binary matches.'
  );
}

/** Node's permission flag: `--permission` from Node 22.13/23.5, `--experimental-permission` before. */
export function permissionFlag(): string | null {
  const flags = process.allowedNodeEnvironmentFlags;
  if (flags.has('--permission')) return '--permission';
  if (flags.has('--experimental-permission') && flags.has('--allow-addons')) return '--experimental-permission';
  return null;
}
