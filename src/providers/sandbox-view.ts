/**
 * What of the host a sandboxed stdio server sees: its program and install folder, found from its
 * command and arguments, and the declared paths, as bubblewrap arguments after the system's view
 * (runners/shared/bwrap.ts).
 */
import { closeSync, existsSync, openSync, readSync, realpathSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, posix } from 'node:path';
import { resolveProgram } from '../../runners/builtin/exec/settings.js';
import { hostLayout, SYSTEM } from '../../runners/shared/bwrap.js';
import { SandboxRefusal } from './sandbox-settings.js';

export const BASE_PATH = '/usr/local/bin:/usr/bin:/bin';

/** The interpreter a `#!` script names (`#!/usr/bin/env node` → node on PATH), or null for a binary. */
export function shebangInterpreter(command: string, path: string | undefined): string | null {
  const head = Buffer.alloc(256);
  let fd: number | null = null;
  let read = 0;
  try {
    fd = openSync(command, 'r');
    read = readSync(fd, head, 0, head.length, 0);
  } catch {
    return null;
  } finally {
    if (fd !== null) closeSync(fd);
  }
  const text = head.subarray(0, read).toString('utf8');
  if (!text.startsWith('#!')) return null;
  const words = text.slice(2).split('\n')[0]?.trim().split(/\s+/) ?? [];
  let name = words[0] ?? '';
  if (posix.basename(name) === 'env') name = words.slice(1).find((word) => !word.startsWith('-')) ?? '';
  if (name === '') return null;
  if (name.includes('/')) return existsSync(name) ? name : null;
  for (const dir of (path ?? BASE_PATH).split(':')) {
    const candidate = join(dir, name);
    if (isAbsolute(candidate) && existsSync(candidate)) return candidate;
  }
  return resolveProgram(name, '/').path;
}

/**
 * The folders of a program outside the system folders, shown read-only: for each of the path it is
 * named by and the file that links to, its prefix when it lies in a `bin` folder (a virtualenv's
 * …/.venv for …/.venv/bin/python, with its site-packages; …/node/v20 for …/node/v20/bin/node), else its
 * own folder. None for a program of the system's.
 */
export function programRoots(program: string, where: string): string[] {
  const inSystem = (path: string) => SYSTEM.some((dir) => path === dir || path.startsWith(`${dir}/`));
  const roots: string[] = [];
  // The path it is named by with its folder's links resolved (not its own: a virtualenv's python is a
  // link into /usr/bin, and the folder of the link is the virtualenv), and the file it links to.
  for (const path of [join(realpathSync(dirname(program)), posix.basename(program)), realpathSync(program)]) {
    if (inSystem(path)) continue;
    const folder = dirname(path);
    const root = posix.basename(folder) === 'bin' ? dirname(folder) : folder;
    if (root.split('/').filter(Boolean).length < 2) {
      throw new SandboxRefusal(
        `${where}: its program ${path} lies in ${root}, which the sandbox would have to show whole`,
        'install-too-wide',
        'install the program in a folder of its own (e.g. /opt/<server>/bin/)',
      );
    }
    roots.push(root);
  }
  return roots;
}

/**
 * The server's own install folder, shown read-only: for its script (the command itself when it is a `#!`
 * script, else the first argument that names a file), the outermost `node_modules` folder it lies in, or
 * else its folder and the `node_modules` folders above it (where Node looks for its packages). Folders
 * an argument names are not shown on their own: they are data, which the provider declares in `read`
 * or `write`.
 */
export function installFolders(command: string, isScript: boolean, args: string[], cwd: string, where: string): string[] {
  const scripts: string[] = [];
  if (isScript) scripts.push(command);
  const first = args.find((arg) => !arg.startsWith('-'));
  if (first !== undefined) {
    const path = isAbsolute(first) ? first : join(cwd, first);
    try {
      if (statSync(path).isFile()) scripts.push(path);
    } catch {
      // not a file: an argument like any other
    }
  }
  const folders: string[] = [];
  for (const script of scripts) {
    const real = realpathSync(script);
    if (SYSTEM.some((dir) => real.startsWith(`${dir}/`))) continue;
    const at = real.indexOf('/node_modules/');
    if (at !== -1) {
      folders.push(real.slice(0, at + '/node_modules'.length));
      continue;
    }
    const folder = dirname(real);
    if (folder.split('/').filter(Boolean).length < 2) {
      throw new SandboxRefusal(
        `${where}: the server's script ${script} lies in ${folder}, which the sandbox would have to show whole`,
        'install-too-wide',
        'put the server in a folder of its own (e.g. /opt/<server>/), or install it with npm into a folder of its own',
      );
    }
    folders.push(folder);
    for (let dir = folder; dir !== '/'; dir = dirname(dir)) {
      const modules = join(dir, 'node_modules');
      if (existsSync(modules)) folders.push(modules);
    }
  }
  return folders;
}

/** The folders above an absolute path, outermost first, without `/`. */
export function ancestors(path: string): string[] {
  const dirs: string[] = [];
  for (let dir = posix.dirname(path); dir !== '/'; dir = posix.dirname(dir)) dirs.unshift(dir);
  return dirs;
}

export function unique<T>(items: T[]): T[] {
  return [...new Set(items)];
}

/** /etc files a server needs to resolve names and check certificates, shown only with the network. */
const NETWORK_ETC = ['/etc/resolv.conf', '/etc/hosts', '/etc/nsswitch.conf', '/etc/gai.conf', '/etc/ssl', '/etc/ca-certificates', '/etc/pki'];
const ETC_EXTRAS = ['/etc/alternatives'];

export interface ViewRequest {
  /** The program, resolved, and the interpreter its `#!` line names (if any). */
  command: string;
  programs: string[];
  installs: string[];
  cwd: string;
  reads: string[];
  writes: string[];
  network: 'none' | 'host';
  tmpBytes: number;
  where: string;
}

/**
 * bubblewrap's arguments for the server's view of the host: the system's (as system.exec shows it), a
 * /tmp of its own, its program's and install folders and the declared reads read-only, the declared
 * writes writable, each at its real path, with the symbolic links on the way to them.
 */
export function hostView(request: ViewRequest): { args: string[]; reads: string[]; writes: string[] } {
  const { command, programs, installs, cwd, reads, writes, network, where } = request;
  const shown = unique([...installs, ...(cwd === '/' ? [] : [cwd]), ...reads].map((path) => realpathSync(path)));
  const writable = unique(writes.map((path) => realpathSync(path)));
  const bwrap: string[] = [];
  const roots = programs.flatMap((program) => programRoots(program, where));
  const layout = hostLayout({ executable: command, roots: unique(roots), libraries: null });
  // /tmp first: a program or install folder below it (a temporary checkout) is bound into the tmpfs, not hidden by it.
  bwrap.push('--proc', '/proc', '--dev', '/dev', '--perms', '1777', '--size', String(request.tmpBytes), '--tmpfs', '/tmp');
  bwrap.push('--perms', '0755', '--dir', '/etc');
  for (const dir of layout.dirs) if (dir !== '/tmp') bwrap.push('--perms', '0755', '--dir', dir);
  for (const [target, path] of layout.symlinks) bwrap.push('--symlink', target, path);
  for (const file of layout.files) bwrap.push('--ro-bind', file, file);
  for (const extra of [...ETC_EXTRAS, ...(network === 'host' ? NETWORK_ETC : [])]) if (existsSync(extra)) bwrap.push('--ro-bind', extra, extra);
  for (const [from, to] of layout.binds) bwrap.push('--ro-bind', from, to);

  // Outer paths first, so that a folder shown read-only does not hide a writable one below it.
  const mounts: Array<[how: string, path: string]> = [
    ...shown.filter((path) => !writable.includes(path)).map((path): [string, string] => ['--ro-bind', path]),
    ...writable.map((path): [string, string] => ['--bind', path]),
  ].sort((a, b) => a[1].length - b[1].length);
  const mounted = [...layout.binds.map(([, to]) => to), ...SYSTEM];
  const under = (path: string, dirs: string[]) => dirs.some((dir) => path === dir || path.startsWith(`${dir}/`));
  const made = new Set<string>(['/', '/tmp', '/etc', ...layout.dirs]);
  for (const [how, path] of mounts) {
    if (under(path, mounted)) {
      // Already visible (read-only) in a system folder: only a writable bind needs a mount of its own.
      if (how === '--ro-bind') continue;
    } else {
      // The folders above it, searchable by the server's uid (bubblewrap, as root, would make them 0700).
      for (const dir of ancestors(path)) {
        if (made.has(dir) || under(dir, mounted)) continue;
        bwrap.push('--perms', '0755', '--dir', dir);
        made.add(dir);
      }
    }
    bwrap.push(how, path, path);
    mounted.push(path);
  }
  // The symbolic links on the way to each path the server was given (a project's node_modules linked
  // elsewhere): it names them by those paths, and Node resolves packages through them.
  const links = new Map<string, string>();
  for (const given of [command, ...installs, ...(cwd === '/' ? [] : [cwd]), ...reads, ...writes]) {
    for (const [target, link] of hostLayout({ executable: given, roots: [], libraries: [] }).symlinks) links.set(link, target);
  }
  for (const [link, target] of links) {
    if (under(link, mounted)) continue;
    for (const dir of ancestors(link)) {
      if (made.has(dir) || under(dir, mounted)) continue;
      bwrap.push('--perms', '0755', '--dir', dir);
      made.add(dir);
    }
    bwrap.push('--symlink', target, link);
  }
  return { args: bwrap, reads: unique([...roots, ...shown.filter((path) => !writable.includes(path))]), writes: writable };
}
