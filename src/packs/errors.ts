/** Why a pack operation stopped. Each message says what was wrong, where, and how to fix it. */
export type PackErrorCode =
  /** The manifest is missing, malformed, or narrower than its tools. */
  | 'MANIFEST'
  /** The source could not be read: no such folder or file, a failed git clone. */
  | 'SOURCE'
  /** A tarball entry that would land outside the pack, a link, or a kind of entry a pack may not hold. */
  | 'ARCHIVE'
  /** A bound of PACK_LIMITS was passed. */
  | 'LIMIT'
  /** The pack's name or a tool id is already taken in the project. */
  | 'CLASH'
  /** The person at the terminal did not grant what the pack asks for, or there was no one to ask. */
  | 'DECLINED'
  /** No such pack is installed. */
  | 'NOT_INSTALLED'
  /** Dependencies of the pack could not be installed. */
  | 'DEPENDENCIES';

export class PackError extends Error {
  override readonly name = 'PackError';
  constructor(
    readonly code: PackErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
