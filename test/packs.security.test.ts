/**
 * Packs from someone else: a pack changed on disk after it was installed is not loaded (and a running
 * engine drops it), tarballs that try to write outside the pack or hold links are refused, oversized
 * and bomb tarballs stop at PACK_LIMITS, a changed built pack fails its SHA256SUMS, a pack tool is gated
 * like any tool, and concurrent `arium add` processes all land in the lock file and arium.json.
 */
import { execFile } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { packTar } from 'modern-tar';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createEngine } from '../src/index.js';
import { PACK_LIMITS } from '../src/limits.js';
import { type Json, parseJson, runCli, tempWorkspace } from './cli.helpers.js';

const FIXTURES = fileURLToPath(new URL('../examples/packs/', import.meta.url));
const BIN = fileURLToPath(new URL('../bin/arium.js', import.meta.url));
const P = ['--workspace', 'ws', '--project', 'p'];

let ws: ReturnType<typeof tempWorkspace>;
let project: string;
beforeEach(() => {
  ws = tempWorkspace();
  project = join(ws.workspace, 'p');
});
afterEach(() => ws.cleanup());

const cli = (args: string[]) => runCli(ws.root, args);
const textkit = () => {
  const dir = join(ws.root, 'src', `textkit-${Math.random().toString(36).slice(2)}`);
  cpSync(join(FIXTURES, 'textkit'), dir, { recursive: true });
  return dir;
};

describe('a pack whose files differ from its lock entry', () => {
  it('is not loaded, the problem naming the pack and the file; a running engine loads it on add and drops it', async () => {
    const engine = await createEngine({ workspace: ws.workspace, project: 'p', watch: true, persist: false, warmUp: false });
    try {
      expect((await cli(['add', textkit(), ...P, '--yes'])).code).toBe(0);
      await vi.waitFor(() => expect(engine.tool('textkit.upper')).toBeDefined(), { timeout: 20_000, interval: 50 });
      appendFileSync(join(project, 'packs', 'textkit', 'tools', 'upper.js'), '\nexport const leak = 1;\n');
      await vi.waitFor(() => expect(engine.tool('textkit.upper')).toBeUndefined(), { timeout: 20_000, interval: 50 });
      expect(engine.problems()).toContainEqual(
        expect.objectContaining({
          file: 'packs/textkit/',
          message: expect.stringContaining(
            'pack "textkit" 1.0.0 does not match its hash in arium-lock.json (tools/upper.js changed), so it is not loaded',
          ),
        }),
      );
      expect(await engine.call('textkit.upper', { text: 'x' })).toMatchObject({ ok: false, error: { code: 'UNKNOWN_TOOL' } });
    } finally {
      await engine.close();
    }
  });

  it('is not loaded when a file is added to it, or when it has no lock entry at all', async () => {
    expect((await cli(['add', textkit(), ...P, '--yes'])).code).toBe(0);
    writeFileSync(join(project, 'packs', 'textkit', 'tools', 'extra.json'), '{}');
    const tools = parseJson(await cli(['tools', ...P, '--json']));
    expect(tools.tools.map((t: Json) => t.id)).not.toContain('textkit.upper');
    expect(tools.problems[0].message).toContain('(tools/extra.json added)');
    cpSync(join(FIXTURES, 'textkit'), join(project, 'packs', 'copied'), { recursive: true });
    const again = parseJson(await cli(['tools', ...P, '--json']));
    expect(again.problems.map((p: Json) => p.message)).toContainEqual(
      expect.stringContaining('pack "copied" is not in arium-lock.json, so it is not loaded'),
    );
  });
});

describe('a pack tool', () => {
  it('is gated like a local tool: the caller needs what it declares', async () => {
    expect((await cli(['add', textkit(), ...P, '--yes'])).code).toBe(0);
    const denied = parseJson(await cli(['call', 'textkit.upper', '{"text":"x"}', ...P, '--grant', 'vfs.read', '--json']));
    expect(denied.error).toMatchObject({ code: 'DENIED', stage: 'permission' });
  });
});

/** A gzipped tar of `package/…` entries: a good manifest and tool, plus `extra`. */
async function tarball(name: string, extra: { header: Json; body?: string }[]): Promise<string> {
  const dir = join(FIXTURES, 'textkit');
  const file = (path: string) => ({
    header: { name: `package/${path}`, size: readFileSync(join(dir, path)).length, type: 'file' as const },
    body: readFileSync(join(dir, path)),
  });
  const tar = await packTar([file('arium-pack.yaml'), file('tools/upper.json'), file('tools/upper.js'), ...extra]);
  const path = join(ws.root, name);
  writeFileSync(path, gzipSync(tar));
  return path;
}

describe('hostile tarballs', () => {
  it.each([
    [
      'a ../ entry',
      { header: { name: 'package/../../../../escaped.txt', size: 4, type: 'file' }, body: 'evil' },
      /entry "package\/\.\.\/\.\.\/\.\.\/\.\.\/escaped\.txt" climbs out of the pack/,
    ],
    [
      'an absolute entry',
      { header: { name: '/tmp/escaped.txt', size: 4, type: 'file' }, body: 'evil' },
      /entry "\/tmp\/escaped\.txt" has an absolute path/,
    ],
    [
      'a symbolic link',
      { header: { name: 'package/tools/link.js', size: 0, type: 'symlink', linkname: '/etc/passwd' } },
      /entry "package\/tools\/link\.js" is a symbolic link \(to "\/etc\/passwd"\)/,
    ],
    [
      'a hard link',
      { header: { name: 'package/tools/hard.js', size: 0, type: 'link', linkname: '/etc/passwd' } },
      /entry "package\/tools\/hard\.js" is a hard link/,
    ],
    ['a device', { header: { name: 'package/dev', size: 0, type: 'character-device' } }, /entry "package\/dev" is a character-device/],
    [
      'a path given twice',
      { header: { name: 'package/tools/upper.js', size: 4, type: 'file' }, body: 'evil' },
      /entry "package\/tools\/upper\.js" is given twice/,
    ],
  ])('refuses %s and writes nothing', async (_, entry, message) => {
    const path = await tarball('hostile.tgz', [entry]);
    const run = await cli(['add', path, ...P, '--yes', '--json']);
    expect(run.code).toBe(3);
    expect(parseJson(run).error.reason).toBe('ARCHIVE');
    expect(run.err).toMatch(message);
    expect(readdirSync(ws.root).sort()).toEqual(['hostile.tgz', 'ws']);
    expect(existsSync('/tmp/escaped.txt')).toBe(false);
    expect(existsSync(join(project, 'packs'))).toBe(false);
    expect(readdirSync(join(project, '.arium', 'packs-staging'))).toEqual([]);
  });

  it('refuses a tarball over max_archive_bytes without reading it', async () => {
    const path = join(ws.root, 'huge.tgz');
    writeFileSync(path, '');
    truncateSync(path, PACK_LIMITS.max_archive_bytes + 1);
    const run = await cli(['add', path, ...P, '--yes']);
    expect(run.code).toBe(3);
    expect(run.err).toContain(`over the limit of ${PACK_LIMITS.max_archive_bytes} bytes for a pack tarball (PACK_LIMITS.max_archive_bytes)`);
  });

  it('refuses a gzip bomb that unpacks past max_unpacked_bytes', async () => {
    const zeros = Buffer.alloc(PACK_LIMITS.max_unpacked_bytes + 1);
    const path = await tarball('bomb.tgz', [
      { header: { name: 'package/zeros.bin', size: zeros.length, type: 'file' }, body: zeros as unknown as string },
    ]);
    const run = await cli(['add', path, ...P, '--yes']);
    expect(run.code).toBe(3);
    expect(run.err).toContain(`unpacks to more than ${PACK_LIMITS.max_unpacked_bytes} bytes (PACK_LIMITS.max_unpacked_bytes)`);
    expect(existsSync(join(project, 'packs'))).toBe(false);
  });

  it('refuses a built pack changed after it was built (SHA256SUMS)', async () => {
    const dir = textkit();
    writeFileSync(join(dir, 'SHA256SUMS'), `${'0'.repeat(64)}  tools/upper.js\n`);
    const run = await cli(['add', dir, ...P, '--yes']);
    expect(run.code).toBe(3);
    expect(run.err).toContain("the pack's files differ from its SHA256SUMS (");
    expect(run.err).toContain('tools/upper.js');
  });
});

/** A copy of textkit named `name`, asking for vfs.read:/<name>/** (and without its skill, which all would share). */
function namedPack(name: string): string {
  const dir = textkit();
  writeFileSync(join(dir, 'arium-pack.yaml'), `name: ${name}\nversion: 1.0.0\npermissions: [exec.js, "vfs.read:/${name}/**"]\n`);
  const def = JSON.parse(readFileSync(join(dir, 'tools', 'upper.json'), 'utf8'));
  writeFileSync(join(dir, 'tools', 'upper.json'), JSON.stringify({ ...def, id: `${name}.upper` }));
  rmSync(join(dir, 'skills'), { recursive: true });
  return dir;
}

describe('concurrent arium add', () => {
  it('of several packs in one process (a host or daemon adding at once) records every pack and every grant', async () => {
    const names = ['one', 'two', 'three', 'four', 'five', 'six'];
    const runs = await Promise.all(names.map((name) => cli(['add', namedPack(name), ...P, '--yes'])));
    expect(runs.flatMap((r) => r.err.split('\n').filter((l) => l.startsWith('arium')))).toEqual([]);
    await expectAll(names);
  });

  it('of several packs in separate processes records every pack and every grant', async () => {
    const names = ['alpha', 'beta', 'gamma', 'delta'];
    const sources = names.map(namedPack);
    const env = { ...process.env, ARIUM_NO_DAEMON: '1', NO_COLOR: '1' };
    const runs = await Promise.allSettled(
      sources.map((dir) => promisify(execFile)(process.execPath, [BIN, 'add', dir, ...P, '--yes'], { cwd: ws.root, env })),
    );
    // A refused add shows what it printed, not only that it was refused.
    expect(runs.map((r) => (r.status === 'fulfilled' ? r.status : String((r.reason as { stderr?: string }).stderr || r.reason)))).toEqual(
      names.map(() => 'fulfilled'),
    );
    await expectAll(names);
  });
});

async function expectAll(names: string[]): Promise<void> {
  const lock = JSON.parse(readFileSync(join(project, 'arium-lock.json'), 'utf8'));
  expect(Object.keys(lock.packs).sort()).toEqual([...names].sort());
  const grants: string[] = JSON.parse(readFileSync(join(project, 'arium.json'), 'utf8')).grants;
  for (const name of names) expect(grants).toContain(`vfs.read:/${name}/**`);
  const tools = parseJson(await cli(['tools', ...P, '--json']));
  expect(tools.problems).toEqual([]);
  expect(tools.tools.map((t: Json) => t.id)).toEqual(expect.arrayContaining(names.map((n) => `${n}.upper`)));
}
