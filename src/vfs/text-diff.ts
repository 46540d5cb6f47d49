import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { createTwoFilesPatch as CreatePatch } from 'diff';

/** The `diff` package, required by the first diff made: most engine starts make none. */
let createTwoFilesPatch: typeof CreatePatch | null = null;
const loadDiff = (): typeof CreatePatch => {
  createTwoFilesPatch ??= (createRequire(import.meta.url)('diff') as { createTwoFilesPatch: typeof CreatePatch }).createTwoFilesPatch;
  return createTwoFilesPatch;
};

/**
 * Unified diffs of file contents, bounded: binary content is summarized, not dumped, and a diff that
 * would cost too much (huge inputs, or an edit script past `maxEditLength`) is omitted with the reason.
 */

export interface FileDiff {
  /** The unified patch, or null when it was omitted (see `omitted`). */
  patch: string | null;
  added: number;
  removed: number;
  binary: boolean;
  omitted?: string;
}

export interface DiffLimits {
  /** Contents larger than this (either side) are not diffed line by line. */
  max_input_bytes: number;
  /** A patch longer than this many characters is cut. */
  max_patch_chars: number;
}

export const DEFAULT_DIFF_LIMITS: Readonly<DiffLimits> = Object.freeze({ max_input_bytes: 1024 * 1024, max_patch_chars: 256 * 1024 });

const decoder = new TextDecoder('utf-8', { fatal: true });

/** Text is valid UTF-8 without NUL bytes; anything else is treated as binary. */
export function asText(buffer: Buffer): string | null {
  if (buffer.includes(0)) return null;
  try {
    return decoder.decode(buffer);
  } catch {
    return null;
  }
}

/**
 * The last line diffs of larger files, by path, limits and contents: a viewer asks for a diff's line
 * counts, then for each file's patch, and a 1,000-line file costs the `diff` package ~130 ms each time.
 */
const recent = new Map<string, FileDiff>();
const RECENT_MAX = 32;
const RECENT_MIN_BYTES = 16 * 1024;
let recentChars = 0;
const RECENT_MAX_CHARS = 8 * 1024 * 1024;

function digest(buffer: Buffer | null): string {
  return buffer === null ? '-' : createHash('sha256').update(buffer).digest('base64');
}

/** The line a patch cut at `max_patch_chars` ends with. */
const PATCH_CUT = /\n… diff cut at \d+ characters$/;

/**
 * Scrubs the patches of `found` cut at their limit with `head`, which takes off the first characters
 * of a secret the cut went through (scrubbing the whole patch later would not recognise them).
 */
export function scrubCutPatches<D extends { files: Array<{ patch: string | null }> }>(found: D, head: (text: string) => string): D {
  for (const file of found.files) {
    const cut = file.patch ? PATCH_CUT.exec(file.patch) : null;
    if (file.patch && cut) file.patch = head(file.patch.slice(0, cut.index)) + cut[0];
  }
  return found;
}

export function diffFiles(path: string, before: Buffer | null, after: Buffer | null, limits: DiffLimits = DEFAULT_DIFF_LIMITS): FileDiff {
  if ((before?.length ?? 0) + (after?.length ?? 0) < RECENT_MIN_BYTES) return diffNow(path, before, after, limits);
  const key = `${path}\0${limits.max_input_bytes}\0${limits.max_patch_chars}\0${digest(before)}\0${digest(after)}`;
  const known = recent.get(key);
  if (known) {
    recent.delete(key);
    recent.set(key, known);
    return { ...known };
  }
  const made = diffNow(path, before, after, limits);
  recent.set(key, made);
  recentChars += made.patch?.length ?? 0;
  while (recent.size > RECENT_MAX || recentChars > RECENT_MAX_CHARS) {
    const [oldest, dropped] = recent.entries().next().value as [string, FileDiff];
    recent.delete(oldest);
    recentChars -= dropped.patch?.length ?? 0;
  }
  return { ...made };
}

function diffNow(path: string, before: Buffer | null, after: Buffer | null, limits: DiffLimits): FileDiff {
  const oldText = before === null ? '' : asText(before);
  const newText = after === null ? '' : asText(after);
  if (oldText === null || newText === null) {
    return { patch: null, added: 0, removed: 0, binary: true, omitted: `binary content (${before?.length ?? 0} → ${after?.length ?? 0} bytes)` };
  }
  if ((before?.length ?? 0) > limits.max_input_bytes || (after?.length ?? 0) > limits.max_input_bytes) {
    return { patch: null, added: 0, removed: 0, binary: false, omitted: `file larger than ${limits.max_input_bytes} bytes; not diffed line by line` };
  }
  const patch = loadDiff()(
    before === null ? '/dev/null' : `a${path}`,
    after === null ? '/dev/null' : `b${path}`,
    oldText,
    newText,
    undefined,
    undefined,
    { context: 3, maxEditLength: 20_000 },
  );
  if (patch === undefined) {
    return { patch: null, added: 0, removed: 0, binary: false, omitted: 'too many changed lines to diff (over 20000 edits)' };
  }
  let added = 0;
  let removed = 0;
  for (const line of patch.split('\n')) {
    if (line.startsWith('+') && !line.startsWith('+++')) added++;
    else if (line.startsWith('-') && !line.startsWith('---')) removed++;
  }
  const body = patch.startsWith('===') ? patch.slice(patch.indexOf('\n') + 1) : patch;
  if (body.length > limits.max_patch_chars) {
    return {
      patch: `${body.slice(0, limits.max_patch_chars)}\n… diff cut at ${limits.max_patch_chars} characters`,
      added,
      removed,
      binary: false,
      omitted: 'patch cut',
    };
  }
  return { patch: body, added, removed, binary: false };
}
