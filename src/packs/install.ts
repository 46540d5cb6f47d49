import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cp, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { GrantSet, parsePermission } from '../permissions.js';
import { checkSums } from './build.js';
import { PackError } from './errors.js';
import { type PackGrants, readGrants, restoreGrants, writeGrants } from './grants.js';
import { listPack } from './hash.js';
import { PACKS_FOLDER } from './load.js';
import { type LockedPack, type PackSource, readLock, withPackMutex, writeLock } from './lock.js';
import { type PackManifest, packGrants, readManifest } from './manifest.js';
import { parseSource, stageSource, stagingRoot } from './source.js';

/** The namespaces of the engine's own tools: no pack may take one. */
const BUILTIN_NAMESPACES: ReadonlySet<string> = new Set(['fs', 'vfs', 'system', 'shell']);

/** What a pack asks for, shown to the person who must say yes before it is granted. */
export interface GrantRequest {
  name: string;
  version: string;
  /** The version installed now, for an update. */
  previous?: { version: string; grants: string[] };
  /** Everything the pack's tools may use once installed. */
  grants: string[];
  /** Of `grants`, those not granted to the installed version (all of them for a new pack). */
  added: string[];
  secrets: string[];
  tools: string[];
  /** What a domain bundle's manifest says that Arium does not map. */
  notes: string[];
}

export interface PackOperationOptions {
  projectDir: string;
  /** Asked before anything is granted; resolving false leaves the project as it was. */
  confirm(request: GrantRequest): Promise<boolean>;
  /** Installs a pack's pinned npm packages (package.json) into `packs/<name>/.arium/`; given by the caller so tests and the CLI share one path. */
  installDependencies?(packDir: string): Promise<void>;
}

export interface PackReport {
  name: string;
  version: string;
  previous_version?: string;
  hash: string;
  tools: string[];
  grants: string[];
  granted: string[];
  skills: string[];
  notes: string[];
}

/** `arium add`: installs the pack at `sourceText` (folder, tarball, git URL) into the project. */
export function addPack(sourceText: string, cwd: string, options: PackOperationOptions): Promise<PackReport> {
  const source = parseSource(sourceText, cwd);
  return withPackMutex(options.projectDir, () => install(source, options, null));
}

/** `arium update <name>`: reads the pack's recorded source again and installs what it holds now. */
export function updatePack(name: string, options: PackOperationOptions): Promise<PackReport> {
  return withPackMutex(options.projectDir, () => {
    const entry = readLock(options.projectDir).packs[name];
    if (!entry) throw notInstalled(name, options.projectDir);
    return install(entry.source, options, name);
  });
}

async function install(source: PackSource, options: PackOperationOptions, updating: string | null): Promise<PackReport> {
  const { projectDir } = options;
  const stage = await stageSource(source, projectDir);
  try {
    await checkSums(stage);
    const { manifest, notes } = await readManifest(stage);
    const { name } = manifest;
    const lock = readLock(projectDir);
    const installed = lock.packs[name];
    if (updating !== null && name !== updating) {
      throw new PackError('MANIFEST', `the source of pack "${updating}" now holds a pack named "${name}"; remove "${updating}" and add the new one`);
    }
    if (updating === null) checkNameFree(name, projectDir, installed);
    const tools = await checkTools(stage, manifest);
    if (existsSync(join(stage, 'requirements.txt'))) {
      throw new PackError(
        'DEPENDENCIES',
        `pack "${name}" pins Python packages (requirements.txt), which a pack cannot install: its Python tools run with the project's interpreter and the standard library only; remove requirements.txt from the pack, or ship those tools in a project of their own`,
      );
    }
    const skills = skillNames(stage);
    checkSkillsFree(skills, projectDir, installed);
    const grants = packGrants(manifest);
    const added = installed ? widened(installed.grants, grants) : grants;
    const request: GrantRequest = {
      name,
      version: manifest.version,
      ...(installed ? { previous: { version: installed.version, grants: installed.grants } } : {}),
      grants,
      added,
      secrets: manifest.secrets,
      tools,
      notes,
    };
    if (added.length > 0 && !(await options.confirm(request))) {
      throw new PackError(
        'DECLINED',
        `pack "${name}" ${manifest.version} was not ${installed ? 'updated' : 'installed'}: it asks for ${added.join(', ')}, which was not granted (answer yes at the terminal, or pass --yes)`,
      );
    }
    if (existsSync(join(stage, 'package.json')) && options.installDependencies) {
      try {
        await options.installDependencies(stage);
      } catch (error) {
        throw new PackError('DEPENDENCIES', `pack "${name}": its npm packages could not be installed: ${(error as Error).message}`, { cause: error });
      }
    }
    const listing = await listPack(stage);
    const entry: LockedPack = {
      version: manifest.version,
      source,
      hash: listing.hash,
      files: Object.fromEntries([...listing.files].sort(([a], [b]) => (a < b ? -1 : 1))),
      grants,
      grants_added: [],
      tools,
      ...(skills.length > 0 ? { skills } : {}),
    };
    const granted = await putInPlace(projectDir, stage, entry, name, installed);
    return {
      name,
      version: manifest.version,
      ...(installed ? { previous_version: installed.version } : {}),
      hash: listing.hash,
      tools,
      grants,
      granted,
      skills,
      notes,
    };
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

/**
 * Moves the staged pack to `packs/<name>`, copies its skills, records its grants in arium.json and its
 * entry in the lock file; on any failure puts back what it changed, so a failed add leaves the project
 * as it was.
 */
async function putInPlace(projectDir: string, stage: string, entry: LockedPack, name: string, installed: LockedPack | undefined): Promise<string[]> {
  const target = join(projectDir, PACKS_FOLDER, name);
  const old = join(stagingRoot(projectDir), `old-${name}-${process.pid}-${Date.now()}`);
  const grantsBefore = readGrants(projectDir);
  const lockBefore = readLock(projectDir);
  const copiedSkills: string[] = [];
  let moved = false;
  let oldMoved = false;
  try {
    await mkdir(dirname(target), { recursive: true });
    if (existsSync(target)) {
      await rename(target, old);
      oldMoved = true;
    }
    await rename(stage, target);
    moved = true;
    for (const skill of installed?.skills ?? []) await rm(join(projectDir, 'skills', skill), { recursive: true, force: true });
    for (const skill of entry.skills ?? []) {
      await cp(join(target, 'skills', skill), join(projectDir, 'skills', skill), { recursive: true, errorOnExist: true, force: false });
      copiedSkills.push(skill);
    }
    const granted = grantsToAdd(grantsBefore, entry.grants);
    entry.grants_added = [...new Set([...(installed?.grants_added ?? []), ...granted])];
    if (granted.length > 0) writeGrants(projectDir, grantsBefore, [...grantsBefore.grants, ...granted]);
    const lock = readLock(projectDir);
    lock.packs[name] = entry;
    writeLock(projectDir, lock);
    if (oldMoved) await rm(old, { recursive: true, force: true });
    return granted;
  } catch (error) {
    for (const skill of copiedSkills) await rm(join(projectDir, 'skills', skill), { recursive: true, force: true });
    if (moved) await rm(target, { recursive: true, force: true });
    if (oldMoved) await rename(old, target);
    restoreGrants(projectDir, grantsBefore);
    writeLock(projectDir, lockBefore);
    throw error;
  }
}

/** `arium remove <name>`: the pack's folder, its skills, the grants it added that no other pack needs, its lock entry. */
export function removePack(name: string, projectDir: string): Promise<{ name: string; version: string; revoked: string[] }> {
  return withPackMutex(projectDir, async () => {
    const lock = readLock(projectDir);
    const entry = lock.packs[name];
    if (!entry) throw notInstalled(name, projectDir);
    const stillNeeded = new Set(
      Object.entries(lock.packs)
        .filter(([other]) => other !== name)
        .flatMap(([, p]) => p.grants),
    );
    const revoked = entry.grants_added.filter((g) => !stillNeeded.has(g));
    const grants = readGrants(projectDir);
    // The lock entry goes first: a pack folder without one is never loaded, whatever happens next.
    delete lock.packs[name];
    writeLock(projectDir, lock);
    if (revoked.length > 0)
      writeGrants(
        projectDir,
        grants,
        grants.grants.filter((g) => !revoked.includes(g)),
      );
    for (const skill of entry.skills ?? []) await rm(join(projectDir, 'skills', skill), { recursive: true, force: true });
    await rm(join(projectDir, PACKS_FOLDER, name), { recursive: true, force: true });
    return { name, version: entry.version, revoked };
  });
}

export interface PackListEntry {
  name: string;
  version: string;
  source: PackSource;
  tools: string[];
  grants: string[];
  /** The version the source holds now, when it differs from the installed one; null when the source could not be read. */
  available: string | null;
  available_error?: string;
}

/** `arium packs`: the installed packs; with `checkUpdates`, what version each source holds now. */
export async function listPacks(projectDir: string, checkUpdates: boolean): Promise<PackListEntry[]> {
  const lock = readLock(projectDir);
  const rows: PackListEntry[] = [];
  for (const [name, entry] of Object.entries(lock.packs).sort(([a], [b]) => (a < b ? -1 : 1))) {
    const row: PackListEntry = { name, version: entry.version, source: entry.source, tools: entry.tools, grants: entry.grants, available: null };
    if (checkUpdates) {
      try {
        const stage = await stageSource(entry.source, projectDir);
        try {
          const { manifest } = await readManifest(stage);
          if (manifest.version !== entry.version) row.available = manifest.version;
        } finally {
          await rm(stage, { recursive: true, force: true });
        }
      } catch (error) {
        row.available_error = (error as Error).message;
      }
    }
    rows.push(row);
  }
  return rows;
}

function notInstalled(name: string, projectDir: string): PackError {
  const names = Object.keys(readLock(projectDir).packs);
  return new PackError(
    'NOT_INSTALLED',
    `no pack "${name}" is installed; installed: ${names.length > 0 ? names.join(', ') : 'none'} (see arium packs)`,
  );
}

/** The pack's namespace must be free: no installed pack, provider, builtin or project tool uses it. */
function checkNameFree(name: string, projectDir: string, installed: LockedPack | undefined): void {
  if (installed) throw new PackError('CLASH', `pack "${name}" ${installed.version} is already installed; use \`arium update ${name}\` to replace it`);
  if (existsSync(join(projectDir, PACKS_FOLDER, name))) {
    throw new PackError('CLASH', `${PACKS_FOLDER}/${name} already exists but is not in arium-lock.json; remove that folder, then add the pack again`);
  }
  if (BUILTIN_NAMESPACES.has(name))
    throw new PackError('CLASH', `"${name}" is the namespace of Arium's builtin tools; a pack must be named otherwise`);
  const providers = projectProviders(projectDir);
  if (providers.includes(name))
    throw new PackError(
      'CLASH',
      `"${name}" is the name of a provider in arium.json; its tools own that namespace, so rename the pack or the provider`,
    );
  const local = localToolIds(projectDir).find((id) => id === name || id.startsWith(`${name}.`));
  if (local)
    throw new PackError('CLASH', `the project's tool "${local}" is in the namespace "${name}" the pack would take; rename that tool or the pack`);
}

function projectProviders(projectDir: string): string[] {
  try {
    const config = JSON.parse(readFileSync(join(projectDir, 'arium.json'), 'utf8')) as { providers?: Record<string, unknown> };
    return Object.keys(config.providers ?? {});
  } catch {
    return [];
  }
}

function localToolIds(projectDir: string): string[] {
  const dir = join(projectDir, 'tools');
  if (!existsSync(dir)) return [];
  const ids: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
    try {
      const id = (JSON.parse(readFileSync(join(dir, file), 'utf8')) as { id?: unknown }).id;
      if (typeof id === 'string') ids.push(id);
    } catch {
      // A broken definition is the registry's problem to report; it serves no id.
    }
  }
  return ids;
}

/**
 * Each of the pack's definitions: its id in the pack's namespace, and its permissions covered by the
 * manifest's. A manifest narrower than its tools would have a person grant less than the tools use.
 */
async function checkTools(stage: string, manifest: PackManifest): Promise<string[]> {
  const dir = join(stage, 'tools');
  if (!existsSync(dir)) return [];
  const declared = new GrantSet(packGrants(manifest));
  const ids: string[] = [];
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.json')).sort()) {
    const shown = `tools/${file}`;
    let spec: { id?: unknown; permissions?: unknown };
    try {
      spec = JSON.parse(await readFile(join(dir, file), 'utf8'));
    } catch (error) {
      throw new PackError('MANIFEST', `${shown} in pack "${manifest.name}" is not valid JSON: ${(error as Error).message}`);
    }
    if (typeof spec?.id !== 'string' || !spec.id.startsWith(`${manifest.name}.`)) {
      throw new PackError(
        'MANIFEST',
        `${shown}: a tool of pack "${manifest.name}" must have an id "${manifest.name}.<name>" (got ${JSON.stringify(spec?.id)})`,
      );
    }
    const permissions = Array.isArray(spec.permissions) ? (spec.permissions as unknown[]) : [];
    for (const [i, text] of permissions.entries()) {
      let permission: ReturnType<typeof parsePermission>;
      try {
        permission = parsePermission(text as string);
      } catch (error) {
        throw new PackError('MANIFEST', `${shown}: /permissions/${i}: ${(error as Error).message}`);
      }
      if (declared.missing([permission])) {
        throw new PackError(
          'MANIFEST',
          `${shown}: the tool ${spec.id} declares "${permission.text}", which the pack's manifest does not cover (its permissions: ${JSON.stringify(manifest.permissions)}); add it to the manifest's permissions so whoever installs the pack sees it`,
        );
      }
    }
    ids.push(spec.id);
  }
  return ids;
}

function skillNames(stage: string): string[] {
  const dir = join(stage, 'skills');
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
}

function checkSkillsFree(skills: readonly string[], projectDir: string, installed: LockedPack | undefined): void {
  for (const skill of skills) {
    if (installed?.skills?.includes(skill)) continue;
    if (existsSync(join(projectDir, 'skills', skill))) {
      throw new PackError('CLASH', `the pack's skill "${skill}" would replace the project's skills/${skill}; rename one of them`);
    }
  }
}

/** The grants of `next` that `approved` does not cover. */
function widened(approved: readonly string[], next: readonly string[]): string[] {
  const base = new GrantSet(approved);
  return next.filter((text) => base.narrow([text]).permissions.length === 0);
}

/** The pack's grants arium.json does not hold yet. */
function grantsToAdd(current: PackGrants, wanted: readonly string[]): string[] {
  const held = new Set(current.grants);
  return wanted.filter((g) => !held.has(g));
}
