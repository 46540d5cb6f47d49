import * as zlib from 'node:zlib';

/**
 * CRC-32 (IEEE 802.3, the polynomial zlib and PNG use), to tell a torn or corrupted record from a
 * whole one. `zlib.crc32` (Node 20.15 on) is thirty times faster than the table below, which stays for
 * the older Node versions the package supports.
 */
const TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

const native = (zlib as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;

/** CRC-32 of `data[start, end)`; pass the CRC of what came before as `previous` to go on from it. */
export function crc32(data: Uint8Array, start = 0, end = data.length, previous = 0): number {
  // Nothing to add: zlib's answer for some empty views (an empty file's buffer) was 0, not `previous`.
  if (end <= start) return previous >>> 0;
  if (native) return native(start === 0 && end === data.length ? data : data.subarray(start, end), previous) >>> 0;
  let c = (previous ^ 0xffffffff) >>> 0;
  for (let i = start; i < end; i++) c = (TABLE[(c ^ (data[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
