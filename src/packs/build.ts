import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { PackError } from './errors.js';
import { listPack } from './hash.js';
import { PACK_NAME_PATTERN, type PackManifest } from './manifest.js';

/** The file of a built pack that lists its other files' sha256, checked again by `arium add`. */
export const SUMS_FILE = 'SHA256SUMS';

/** What `arium pack` takes from a project besides its tools. */
const PROJECT_FILES = ['package.json', 'package-lock.json'];

export interface BuiltPack {
  path: string;
  manifest: PackManifest;
  files: number;
  bytes: number;
  /** sha256 of the tarball itself. */
  sha256: string;
}

/**
 * `arium pack`: a tarball (`package/…`, as `npm pack` makes) of the project's tools/, skills/ and npm
 * pins, with a generated `arium-pack.yaml` whose permissions are the union of the tools' and a
 * SHA256SUMS of every file. Each definition's id is put in the pack's namespace (`<name>.<id>`).
 */
export async function buildPack(projectDir: string, options: { name: string; version: string; out: string }): Promise<BuiltPack> {
  if (!new RegExp(PACK_NAME_PATTERN).test(options.name)) {
    throw new PackError('MANIFEST', `"${options.name}" is not a pack name: lower-case letters, digits, _ and -, at most 64 (give one with --name)`);
  }
  const files = new Map<string, Buffer>();
  const permissions = new Set<string>();
  for (const folder of ['tools', 'skills']) {
    if (!existsSync(join(projectDir, folder))) continue;
    const { files: listed } = await listPack(join(projectDir, folder));
    for (const path of listed.keys()) {
      const bytes = await readFile(join(projectDir, folder, ...path.split('/')));
      const shown = `${folder}/${path}`;
      files.set(shown, folder === 'tools' && /^[^/]+\.json$/.test(path) ? namespaced(bytes, shown, options.name, permissions) : bytes);
    }
  }
  for (const name of PROJECT_FILES) if (existsSync(join(projectDir, name))) files.set(name, await readFile(join(projectDir, name)));
  const secrets = [...permissions].filter((p) => p.startsWith('secret.read:')).map((p) => p.slice('secret.read:'.length));
  const manifest: PackManifest = {
    name: options.name,
    version: options.version,
    permissions: [...permissions].filter((p) => !p.startsWith('secret.read:')).sort(),
    secrets: secrets.sort(),
  };
  const { stringify } = await import('yaml');
  files.set('arium-pack.yaml', Buffer.from(stringify(manifest)));
  const sums = [...files.keys()]
    .sort()
    .map(
      (path) =>
        `${createHash('sha256')
          .update(files.get(path) as Buffer)
          .digest('hex')}  ${path}\n`,
    )
    .join('');
  files.set(SUMS_FILE, Buffer.from(sums));
  const { packTar } = await import('modern-tar');
  // A fixed mtime: the same project packs to the same bytes.
  const mtime = new Date(0);
  const tar = await packTar(
    [...files.keys()].sort().map((path) => {
      const body = files.get(path) as Buffer;
      return { header: { name: `package/${path}`, size: body.length, mode: 0o644, mtime, type: 'file' as const }, body: new Uint8Array(body) };
    }),
  );
  const gz = gzipSync(tar, { level: 9 });
  await writeFile(options.out, gz);
  return { path: options.out, manifest, files: files.size, bytes: gz.length, sha256: createHash('sha256').update(gz).digest('hex') };
}

/** A definition with its id put in the pack's namespace; its permissions are added to `permissions`. */
function namespaced(bytes: Buffer, shown: string, name: string, permissions: Set<string>): Buffer {
  let spec: Record<string, unknown>;
  try {
    spec = JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    throw new PackError('MANIFEST', `${shown} is not valid JSON (${(error as Error).message}); fix it before packing`);
  }
  if (typeof spec.id !== 'string') throw new PackError('MANIFEST', `${shown} has no "id"; fix it before packing`);
  if (!spec.id.startsWith(`${name}.`)) spec.id = `${name}.${spec.id}`;
  for (const p of Array.isArray(spec.permissions) ? spec.permissions : []) permissions.add(String(p));
  return Buffer.from(`${JSON.stringify(spec, null, 2)}\n`);
}

/**
 * Checks a staged pack against its SHA256SUMS, when it has one: a built pack changed after it was
 * built (in transit, or by hand) is refused before anything is granted.
 */
export async function checkSums(stage: string): Promise<void> {
  const path = join(stage, SUMS_FILE);
  if (!existsSync(path)) return;
  const { files } = await listPack(stage);
  files.delete(SUMS_FILE);
  const listed = new Map<string, string>();
  for (const line of (await readFile(path, 'utf8')).split('\n').filter(Boolean)) {
    const match = /^([0-9a-f]{64}) {2}(.+)$/.exec(line);
    if (!match)
      throw new PackError('ARCHIVE', `${SUMS_FILE}: the line "${line.slice(0, 80)}" is not "<sha256>  <path>"; rebuild the pack with arium pack`);
    listed.set(match[2] as string, match[1] as string);
  }
  const differ = [...new Set([...files.keys(), ...listed.keys()])].filter((p) => files.get(p) !== listed.get(p));
  if (differ.length > 0) {
    throw new PackError(
      'ARCHIVE',
      `the pack's files differ from its ${SUMS_FILE} (${differ.slice(0, 5).join(', ')}): it was changed after it was built; get it again from its author`,
    );
  }
}
