import { ToolFailure } from '../errors.js';
import type { VfsQuota } from '../limits.js';

/**
 * VFS paths are POSIX, rooted at `/`, and normalized before anything else sees them. A path that could
 * mean something outside the VFS, or mean different things to different readers, is refused rather
 * than "repaired": the caller learns what was wrong instead of touching a file it did not name.
 */

/** `escape` marks paths that try to leave the VFS (traversal, host paths, NUL): a SecurityEvent follows. */
function invalid(path: string, reason: string, hint: string, escapes = false): ToolFailure {
  return new ToolFailure('execution', 'INVALID_PATH', `Invalid VFS path ${JSON.stringify(clip(path))}: ${reason}`, {
    details: { path: clip(path), reason, hint, escape: escapes },
  });
}

function clip(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}…` : path;
}

/** `%2e`, `%2E` and friends: a segment that decodes to `.` or `..` is a traversal attempt, not a name. */
const ENCODED_DOT = /^(?:\.|%2e)+$/i;
/** `C:\`, `C:/`, `\\server\share`, `file:` — host path syntaxes that have no meaning in the VFS. */
const HOST_PATH = /^(?:[a-zA-Z]:[\\/]|\\\\|file:)/;
// C0, DEL and C1 (U+0080–U+009F: NEL is a line break to some readers, CSI starts terminal escapes).
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what is refused
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** Already-normal paths of plain names (no dot segments, no doubled or trailing slash) skip the full parse. */
const PLAIN = /^(?:\/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$/;

export function normalizePath(input: unknown, quota: Pick<VfsQuota, 'max_path_length' | 'max_name_length'>): string {
  // A path no longer than one segment may be cannot hold an over-long segment or pass the path limit.
  if (typeof input === 'string' && input.length <= quota.max_name_length && input.length <= quota.max_path_length && PLAIN.test(input)) {
    return input;
  }
  if (typeof input !== 'string') throw invalid(String(input), 'a path must be a string', 'pass a string such as "/docs/a.txt"');
  if (input.length === 0) throw invalid(input, 'the path is empty', 'use "/" for the root');
  if (input.includes('\u0000')) throw invalid(input, 'the path contains a NUL byte', 'remove the NUL byte', true);
  if (CONTROL.test(input)) throw invalid(input, 'the path contains a control character', 'remove control characters');
  if (HOST_PATH.test(input)) {
    throw invalid(input, 'host path syntax has no meaning in the VFS', 'use a POSIX path rooted at "/", e.g. "/data/a.txt"', true);
  }
  if (input.includes('\\')) {
    // "..\\..\\etc" means nothing here, but it is a traversal attempt on the hosts where it would mean something.
    const climbs = input.split(/[\\/]/).some((segment) => segment === '..' || (segment.includes('%') && ENCODED_DOT.test(segment)));
    throw invalid(input, 'backslashes are not path separators here', 'use "/" between segments', climbs);
  }
  const segments: string[] = [];
  for (const segment of input.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') {
      if (segments.length === 0) throw invalid(input, '".." climbs above the VFS root', 'remove the ".." segments', true);
      segments.pop();
      continue;
    }
    if (segment.includes('%') && ENCODED_DOT.test(segment)) {
      // Nothing here decodes it, so it cannot leave the VFS; but the only reason to send it is to get a
      // decoder somewhere to climb, so it is reported like a traversal.
      throw invalid(
        input,
        `the segment ${JSON.stringify(segment)} is an encoded dot segment`,
        'use plain names; "." and ".." are not allowed encoded',
        true,
      );
    }
    if (Buffer.byteLength(segment) > quota.max_name_length) {
      throw new ToolFailure('execution', 'QUOTA_EXCEEDED', `A path segment is longer than ${quota.max_name_length} bytes`, {
        details: { path: clip(input), limit: 'max_name_length', max: quota.max_name_length },
      });
    }
    segments.push(segment);
  }
  const normalized = `/${segments.join('/')}`;
  if (Buffer.byteLength(normalized) > quota.max_path_length) {
    throw new ToolFailure('execution', 'QUOTA_EXCEEDED', `The path is longer than ${quota.max_path_length} bytes`, {
      details: { path: clip(input), limit: 'max_path_length', max: quota.max_path_length },
    });
  }
  return normalized;
}

export function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

export function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** True when `path` is `dir` itself or lies below it. Both must be normalized. */
export function isWithin(path: string, dir: string): boolean {
  if (dir === '/') return true;
  return path === dir || path.startsWith(`${dir}/`);
}
