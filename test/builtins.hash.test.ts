import { afterAll, beforeAll, describe, expect, it, test } from 'vitest';
import type { Engine, ErrResult, ToolResult } from '../src/index.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';

/** Published test vectors (RFC 1321, RFC 3174, FIPS 180-2 examples), not computed by the code under test. */
const FOX = 'The quick brown fox jumps over the lazy dog';
const VECTORS: Array<[string, string, string]> = [
  ['md5', '', 'd41d8cd98f00b204e9800998ecf8427e'],
  ['md5', 'abc', '900150983cd24fb0d6963f7d28e17f72'],
  ['md5', FOX, '9e107d9d372bb6826bd81d3542a419d6'],
  ['sha1', '', 'da39a3ee5e6b4b0d3255bfef95601890afd80709'],
  ['sha1', 'abc', 'a9993e364706816aba3e25717850c26c9cd0d89d'],
  ['sha1', FOX, '2fd4e1c67a2d28fced849ee1bb76e7391b93eb12'],
  ['sha256', '', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
  ['sha256', 'abc', 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'],
  ['sha256', FOX, 'd7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592'],
  ['sha512', '', 'cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e'],
  [
    'sha512',
    'abc',
    'ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f',
  ],
  ['sha512', FOX, '07e547d9586f6a73f73fbac0435ed76951218fb7d0c8d788a309d785436bbb642e93a252a954f23912547d1e8a3b5ed6e1bfd7097821233fa0538f3db854fee6'],
];

let project: TempProject;
let engine: Engine;

beforeAll(async () => {
  project = tempProject();
  engine = await openEngine(project);
  for (const [, text] of VECTORS) engine.vfs.write(`/vectors/${text.length}.txt`, text);
  engine.vfs.write('/bytes.bin', Buffer.from([0xff, 0x00, 0xfe]));
});

afterAll(async () => {
  await engine.close();
  project.remove();
});

function failed(result: ToolResult): ErrResult['error'] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.data)?.slice(0, 200)}`);
  return result.error;
}

describe('system.hash', () => {
  test.each(VECTORS)('%s of %j as text', async (algorithm, text, digest) => {
    const result = await engine.call('system.hash', { text, algorithm });
    expect(result).toMatchObject({ ok: true, data: { algorithm, format: 'hex', digest, size: Buffer.byteLength(text) } });
  });

  test.each(VECTORS)('%s of a file holding %j', async (algorithm, text, digest) => {
    const path = `/vectors/${text.length}.txt`;
    const result = await engine.call('system.hash', { path, algorithm });
    expect(result).toMatchObject({ ok: true, data: { algorithm, digest, path, size: text.length } });
  });

  it('defaults to sha256 in hex', async () => {
    expect(await engine.call('system.hash', { text: 'abc' })).toMatchObject({
      ok: true,
      data: { algorithm: 'sha256', format: 'hex', digest: 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad' },
    });
  });

  it('gives base64 on request', async () => {
    expect(await engine.call('system.hash', { text: 'abc', format: 'base64' })).toMatchObject({
      ok: true,
      data: { format: 'base64', digest: 'ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=' },
    });
  });

  it('hashes a file byte for byte, binary included, and text as UTF-8', async () => {
    const file = await engine.call('system.hash', { path: '/bytes.bin', algorithm: 'md5' });
    expect(file).toMatchObject({ ok: true, data: { size: 3, digest: '13a18f27d9e54107c1d22c7d67f55018' } }); // md5sum of ff 00 fe
    engine.vfs.write('/euro.txt', '€');
    // sha256 of the UTF-8 bytes e2 82 ac (from sha256sum), for the file and for the text alike.
    const digest = 'c4cc90ed3d26f12d4b08a75140970a7904035c31cbb4515a83f19b9003c00d1d';
    expect(await engine.call('system.hash', { path: '/euro.txt' })).toMatchObject({ ok: true, data: { size: 3, digest } });
    expect(await engine.call('system.hash', { text: '€' })).toMatchObject({ ok: true, data: { size: 3, digest } });
  });

  test.each([
    [{}, 'neither path nor text'],
    [{ path: '/a', text: 'abc' }, 'both path and text'],
    [{ text: 'abc', algorithm: 'sha3-256' }, 'an unsupported algorithm'],
    [{ text: 'abc', algorithm: 'SHA256' }, 'an algorithm in upper case'],
    [{ text: 'abc', format: 'hex64' }, 'an unknown format'],
    [{ text: 42 }, 'text that is not a string'],
  ])('%j (%s) → validation INVALID_INPUT', async (input, _why) => {
    const error = failed(await engine.call('system.hash', input));
    expect([error.stage, error.code]).toEqual(['validation', 'INVALID_INPUT']);
  });

  it('says NOT_FOUND for a missing file and IS_A_DIRECTORY for a folder', async () => {
    expect(failed(await engine.call('system.hash', { path: '/missing' })).code).toBe('NOT_FOUND');
    expect(failed(await engine.call('system.hash', { path: '/vectors' })).code).toBe('IS_A_DIRECTORY');
  });

  it('needs vfs.read on the path to hash a file', async () => {
    const error = failed(await engine.call('system.hash', { path: '/bytes.bin' }, { grants: ['vfs.read:/vectors/**'] }));
    expect([error.stage, error.code]).toEqual(['permission', 'DENIED']);
  });
});
