import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { RegistryProblem } from '../events.js';
import { PackError } from './errors.js';
import { describeDifference, listPack } from './hash.js';
import { LOCK_FILE, readLock } from './lock.js';

/** Where installed packs live in a project: `packs/<name>/`, each with its own `tools/`. */
export const PACKS_FOLDER = 'packs';

/** One installed pack whose files match its lock entry: its definitions are loaded like the project's. */
export interface LoadablePack {
  name: string;
  /** `packs/<name>/tools`, absolute. */
  toolsDir: string;
}

/**
 * The installed packs the registry may load. A pack folder without a lock entry, or whose files differ
 * from it (tampered with, or half-copied by hand), is not loaded: it becomes a problem naming the pack
 * and what differs.
 */
export async function loadablePacks(projectDir: string): Promise<{ packs: LoadablePack[]; names: string[]; problems: RegistryProblem[] }> {
  const root = join(projectDir, PACKS_FOLDER);
  const problems: RegistryProblem[] = [];
  if (!existsSync(root)) return { packs: [], names: [], problems };
  let names: string[];
  try {
    names = (await readdir(root, { withFileTypes: true }))
      .filter((e) => e.isDirectory() && !e.name.startsWith('.'))
      .map((e) => e.name)
      .sort();
  } catch (error) {
    return {
      packs: [],
      names: [],
      problems: [{ file: `${PACKS_FOLDER}/`, message: `the packs folder could not be read: ${(error as Error).message}` }],
    };
  }
  let locked: ReturnType<typeof readLock>['packs'];
  try {
    locked = readLock(projectDir).packs;
  } catch (error) {
    return { packs: [], names, problems: [{ file: LOCK_FILE, message: `no pack is loaded: ${(error as Error).message}` }] };
  }
  const packs: LoadablePack[] = [];
  for (const name of names) {
    const file = `${PACKS_FOLDER}/${name}/`;
    const entry = locked[name];
    if (!entry) {
      problems.push({
        file,
        message: `pack "${name}" is not in ${LOCK_FILE}, so it is not loaded; install packs with \`arium add <folder | tarball | git URL>\``,
      });
      continue;
    }
    try {
      const listing = await listPack(join(root, name));
      if (listing.hash !== entry.hash) {
        problems.push({
          file,
          message: `pack "${name}" ${entry.version} does not match its hash in ${LOCK_FILE} (${describeDifference(entry.files, listing.files)}), so it is not loaded; reinstall it with \`arium update ${name}\` or \`arium remove ${name}\` then \`arium add\``,
        });
        continue;
      }
    } catch (error) {
      const why = error instanceof PackError ? error.message : `could not be read: ${(error as Error).message}`;
      problems.push({ file, message: `pack "${name}" is not loaded: ${why}` });
      continue;
    }
    packs.push({ name, toolsDir: join(root, name, 'tools') });
  }
  return { packs, names, problems };
}
