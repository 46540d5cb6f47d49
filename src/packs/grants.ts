import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_CATALOG } from '../defaults.js';
import { defaultGrants } from '../engine-options.js';
import { writeFileAtomic } from '../store/atomic.js';
import { PackError } from './errors.js';

/** arium.json as it was read, and the grants callers get by default with it. */
export interface PackGrants {
  /** The file's text, null when the project has none (then it gets the runners' default grants). */
  text: string | null;
  grants: string[];
}

/** The project's default grants: arium.json's `grants`, or the engine's defaults when it gives none. */
export function readGrants(projectDir: string): PackGrants {
  const path = join(projectDir, 'arium.json');
  if (!existsSync(path)) return { text: null, grants: defaultGrants(DEFAULT_CATALOG) };
  const text = readFileSync(path, 'utf8');
  const config = parse(text);
  const grants = Array.isArray(config.grants) ? (config.grants as string[]) : defaultGrants(DEFAULT_CATALOG);
  return { text, grants };
}

/**
 * Writes `grants` as arium.json's `grants`, the rest of the file kept. A project that relied on the
 * default grants gets them written out, so adding a pack's grants never takes the defaults away.
 */
export function writeGrants(projectDir: string, before: PackGrants, grants: readonly string[]): void {
  const config = before.text === null ? {} : parse(before.text);
  config.grants = [...new Set(grants)];
  writeFileAtomic(join(projectDir, 'arium.json'), `${JSON.stringify(config, null, 2)}\n`);
}

/** Puts arium.json back exactly as `before` read it. */
export function restoreGrants(projectDir: string, before: PackGrants): void {
  const path = join(projectDir, 'arium.json');
  if (before.text === null) rmSync(path, { force: true });
  else writeFileAtomic(path, before.text);
}

function parse(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new PackError('MANIFEST', `arium.json is not valid JSON (${(error as Error).message}); fix it before adding or removing packs`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new PackError('MANIFEST', 'arium.json must hold a JSON object');
  return value as Record<string, unknown>;
}
