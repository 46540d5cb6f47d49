import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';
import { createGateway } from '../src/surfaces/http/gateway.js';
import { dataOf } from './support/js-engine.js';
import { toolchain } from './support/wasm.js';

// The demo's WebAssembly tool: the module shipped in workspace/demo/tools is the one its source builds,
// byte for byte (as the demo's wheel is), and it answers its example.

const DEMO = fileURLToPath(new URL('../workspace/demo/', import.meta.url));
const SHIPPED = join(DEMO, 'tools', 'demo-checksum.wasm');
const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe('demo.checksum', () => {
  it('ships the module whose hash wasm-src/SHA256SUMS records', () => {
    const [hash, file] = readFileSync(join(DEMO, 'wasm-src', 'SHA256SUMS'), 'utf8')
      .trim()
      .split(/\s+/);
    expect(file).toBe('tools/demo-checksum.wasm');
    expect(sha256(readFileSync(SHIPPED))).toBe(hash);
  });

  it.runIf(toolchain('c'))('is rebuilt byte for byte from wasm-src/checksum.c by wasm-src/build.sh', () => {
    const dir = mkdtempSync(join(tmpdir(), 'arium-demo-wasm-'));
    try {
      execFileSync('sh', [join(DEMO, 'wasm-src', 'build.sh'), join(dir, 'rebuilt.wasm')], { cwd: dir, stdio: 'pipe' });
      expect(sha256(readFileSync(join(dir, 'rebuilt.wasm')))).toBe(sha256(readFileSync(SHIPPED)));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answers the same over the HTTP gateway and over MCP (Streamable HTTP, the SDK client)', async () => {
    const gateway = await createGateway({
      workspace: join(DEMO, '..'),
      project: 'demo',
      inspector: false,
      engineOptions: { persist: false, watch: false },
    });
    const client = new Client({ name: 'wasm-surfaces', version: '1' });
    try {
      const base = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
      const text = 'Arium runs C through WebAssembly';
      const expected = { bytes: Buffer.byteLength(text), crc32: crc32(Buffer.from(text)).toString(16).padStart(8, '0') };
      const http = await fetch(`${base}/v1/tools/demo.checksum:run`, {
        method: 'POST',
        // The engine's own result, as engine.call gives it, rather than the gateway's envelope.
        headers: { 'content-type': 'application/json', accept: 'application/vnd.arium.result+json' },
        body: JSON.stringify({ input: { text } }),
      });
      expect(http.status).toBe(200);
      expect(await http.json()).toMatchObject({ ok: true, data: expected });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('demo.checksum');
      const result = await client.callTool({ name: 'demo.checksum', arguments: { text } });
      expect(result.isError).toBeFalsy();
      expect(result.structuredContent).toMatchObject(expected);
    } finally {
      await client.close();
      await gateway.close();
    }
  }, 60_000);

  describe('called', () => {
    let engine: Engine;
    beforeAll(async () => {
      engine = await createEngine({ workspace: join(DEMO, '..'), project: 'demo', watch: false, persist: false });
    });
    afterAll(() => engine.close());

    it('hashes the UTF-8 bytes of its example as zlib and FNV-1a do', async () => {
      const text = engine.tool('demo.checksum')?.examples?.[0]?.text as string;
      const bytes = Buffer.from(text, 'utf8');
      let fnv = 0xcbf29ce484222325n;
      for (const b of bytes) fnv = ((fnv ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
      expect(engine.problems().filter((p) => p.id === 'demo.checksum')).toEqual([]);
      expect(dataOf(await engine.call('demo.checksum', { text }))).toEqual({
        bytes: bytes.length,
        crc32: crc32(bytes).toString(16).padStart(8, '0'),
        fnv1a64: fnv.toString(16).padStart(16, '0'),
      });
    });
  });
});
