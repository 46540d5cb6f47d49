import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A project's pinned Python packages: `requirements.txt` beside its `tools/` folder, every requirement
 * with its hash, as pip's `--require-hashes` mode wants them. The hash of the file is what an installed
 * environment is stamped with, so an edited file makes the environment stale.
 */

export const PIN_FILE = 'requirements.txt';

export interface PythonPins {
  /** Absolute path of the pin file. */
  path: string;
  kind: 'requirements';
  /** sha256 of its bytes, hex. */
  sha256: string;
  text: string;
}

/** The project's pin file, or null when it pins nothing. */
export function findPythonPins(projectDir: string): PythonPins | null {
  const path = join(projectDir, PIN_FILE);
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
  return { path, kind: 'requirements', sha256: createHash('sha256').update(bytes).digest('hex'), text: bytes.toString('utf8') };
}

// pip's strong hashes (pip/_internal/utils/hashes.py STRONG_HASHES), each with its length in hex digits.
const HASH = /(?:^|\s)--hash[=\s]+(?:sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})(?=\s|$)/i;
/** Options that bring in requirements from elsewhere, which the file's own hash would not cover. */
const INCLUDES = /^(?:-r|--requirement|-c|--constraint)(?:[=\s]|$)/;
const EDITABLE = /^(?:-e|--editable)(?:[=\s]|$)/;

/**
 * What keeps the pin file from pinning every byte installed, one line each: a requirement without a
 * hash, another file included, an editable (a folder, which has no hash). Empty when it is sound; pip
 * itself checks the rest (versions pinned with ==, the hashes matching what it downloads).
 */
export function pinProblems(text: string): string[] {
  const problems: string[] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const first = i + 1;
    let line = lines[i] ?? '';
    // A backslash at the end joins the next line, as pip reads it (comments are cut after joining).
    while (line.endsWith('\\') && i + 1 < lines.length) line = `${line.slice(0, -1)} ${lines[++i] ?? ''}`;
    const logical = line.replace(/(?:^|\s+)#.*$/, '').trim();
    if (logical === '') continue;
    if (INCLUDES.test(logical)) {
      problems.push(`line ${first}: "${logical}" includes another file; put its requirements (with hashes) in ${PIN_FILE} itself`);
    } else if (EDITABLE.test(logical)) {
      problems.push(`line ${first}: "${logical}" is editable, which cannot be hashed; build a wheel of it and pin that`);
    } else if (!logical.startsWith('-') && !HASH.test(logical)) {
      problems.push(`line ${first}: ${logical.split(/\s/)[0]} has no --hash=sha256:…`);
    }
  }
  return problems;
}

/** How to make the hashes, for the error that refuses a file without them. */
export const HOW_TO_HASH =
  'give every requirement its hash: `pip-compile --generate-hashes requirements.in` (pip-tools) or `uv pip compile --generate-hashes` writes the whole file, `pip hash <file.whl>` prints the --hash of one file you have';
