/**
 * A message larger than the NATS server's max_payload (1 MB by default) travels in parts: a file of
 * the VFS read or written by a remote tool, a large output or input. The sender keeps the encoded
 * message and sends `parts` (or `large`) naming it; the receiver asks for, or is sent, each part as
 * base64 in a message of its own.
 */

/** Room left in a message for everything but a part's base64. */
const ENVELOPE = 1024;

/** Raw bytes in one part: its base64 and envelope stay well under the `tooLarge` line, so a part is never split again. */
export function partBytes(maxPayload: number): number {
  return Math.max(4096, Math.floor((maxPayload - 2 * ENVELOPE) / 4) * 3);
}

/** Whether `bytes` must travel in parts. */
export function tooLarge(bytes: Uint8Array, maxPayload: number): boolean {
  return bytes.length > maxPayload - ENVELOPE;
}

export function split(bytes: Uint8Array, maxPayload: number): string[] {
  const size = partBytes(maxPayload);
  const parts: string[] = [];
  for (let at = 0; at < bytes.length; at += size)
    parts.push(Buffer.from(bytes.buffer, bytes.byteOffset + at, Math.min(size, bytes.length - at)).toString('base64'));
  return parts;
}

export function joinParts(parts: readonly string[]): Uint8Array {
  return Buffer.concat(parts.map((p) => Buffer.from(p, 'base64')));
}
