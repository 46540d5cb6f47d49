import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '../src/index.js';
import { createGateway, type Gateway } from '../src/surfaces/http/gateway.js';
import { INSPECTOR_CSP } from '../src/surfaces/http/inspector.js';
import { definition, type TempProject, tempProject } from './support/project.js';

/**
 * The API the inspector page reads (tools with load problems, the project, folders and files of the
 * live tree or a snapshot, what each call changed, logs on events) and how the page itself is served.
 * The page's own behaviour is tested in a browser (test/inspector.browser.test.ts).
 */

let project: TempProject;
let gateway: Gateway;
let page: string;

const LOGGING_JS = "export default async function run(input) { console.log('hello', input.name); console.warn('careful'); return { ok: true }; }\n";
const FAILING_JS = "export default async function run() { console.log('about to fail'); throw new Error('it broke'); }\n";

beforeAll(async () => {
  project = tempProject({
    'log.js': LOGGING_JS,
    'log.json': definition({ id: 't.log', entry: 'log.js' }),
    'fail.js': FAILING_JS,
    'fail.json': definition({ id: 't.fail', entry: 'fail.js' }),
    // A definition with an error at a known place: shown with its file and pointer.
    'broken.json': JSON.stringify({
      id: 't.broken',
      description: 'x',
      runner: 'js-runner',
      entry: 'log.js',
      schema: { type: 'object' },
      permissions: ['no.such'],
    }),
  });
  mkdirSync(join(project.workspace, 'second', 'tools'), { recursive: true });
  mkdirSync(join(project.workspace, 'not-a-project'), { recursive: true });
  // A stand-in for the built page: what matters here is how it is served.
  page = mkdtempSync(join(tmpdir(), 'arium-inspector-page-'));
  mkdirSync(join(page, 'assets'));
  writeFileSync(join(page, 'index.html'), '<!doctype html><title>Arium inspector</title><script type="module" src="/assets/app-1.js"></script>');
  writeFileSync(join(page, 'assets', 'app-1.js'), 'console.log(1);\n');
  gateway = await createGateway({
    workspace: project.workspace,
    project: project.project,
    inspectorDir: page,
    engineOptions: { persist: false, watch: false },
  });
});

afterAll(async () => {
  await gateway?.close();
  project?.remove();
  rmSync(page, { recursive: true, force: true });
});

const get = (url: string) => gateway.app.inject({ method: 'GET', url });
const run = (id: string, input: object) => gateway.app.inject({ method: 'POST', url: `/v1/tools/${id}:run`, payload: { input } });
const engine = () => gateway.engines().get('p') as Engine;

describe('tools, problems and the project', () => {
  it('lists the tools and every definition that did not load, with its file and pointer', async () => {
    const answer = (await get('/v1/tools')).json() as {
      tools: Array<{ id: string }>;
      problems: Array<{ file: string; message: string; at?: string }>;
    };
    expect(answer.tools.map((t) => t.id)).toEqual(expect.arrayContaining(['t.log', 't.fail', 'fs.write']));
    expect(answer.tools.map((t) => t.id)).not.toContain('t.broken');
    const problem = answer.problems.find((p) => p.file.endsWith('broken.json'));
    expect(problem?.message).toContain('/permissions/0');
    expect(problem?.at).toBe('/permissions/0');
  });

  it('names the project and the projects of the workspace', async () => {
    expect((await get('/v1/project')).json()).toEqual({
      project: 'p',
      projects: ['p', 'second'],
      read_only: false,
      persist: false,
      change_log: true,
    });
    expect((await get('/p/second/v1/project')).json()).toMatchObject({ project: 'second' });
  });
});

describe('the live tree and snapshots, folder by folder', () => {
  it('lists one folder (folders first, then by name) and reads text and binary files, live and in a snapshot', async () => {
    const vfs = engine().vfs;
    vfs.write('/src/b.ts', 'export const b = 1;\n');
    vfs.write('/src/a.ts', 'export const a = 1;\n');
    vfs.mkdir('/src/zdir');
    vfs.write('/src/zdir/deep.txt', 'deep\n');
    vfs.write('/bin.dat', Buffer.from([0, 159, 146, 150, 255]));
    const snap = engine().snapshot({ label: 'one' });
    vfs.write('/src/a.ts', 'export const a = 2;\n');

    const listed = (await get('/v1/fs/list?path=/src')).json() as { entries: Array<{ name: string; type: string; size: number }> };
    expect(listed.entries.map((e) => [e.name, e.type, e.size])).toEqual([
      ['zdir', 'directory', 0],
      ['a.ts', 'file', 20],
      ['b.ts', 'file', 20],
    ]);
    const root = (await get(`/v1/fs/list?path=/&at=${snap.id}`)).json() as { at: string; entries: Array<{ path: string }> };
    expect(root.at).toBe(snap.id);
    expect(root.entries.map((e) => e.path)).toEqual(['/src', '/bin.dat']);

    expect((await get('/v1/fs/read?path=/src/a.ts')).json()).toMatchObject({
      text: 'export const a = 2;\n',
      binary: false,
      truncated: false,
      size: 20,
    });
    expect((await get('/v1/fs/read?path=/src/a.ts&at=one')).json()).toMatchObject({ at: 'one', text: 'export const a = 1;\n' });
    const binary = (await get('/v1/fs/read?path=/bin.dat&at=latest')).json();
    expect(binary).toEqual({
      at: 'latest',
      path: '/bin.dat',
      size: 5,
      sha256: createHash('sha256')
        .update(Buffer.from([0, 159, 146, 150, 255]))
        .digest('hex'),
      binary: true,
      text: null,
      truncated: false,
    });
  });

  it('cuts text over 1 MiB at a whole character and says so', async () => {
    // 'é' is two bytes: 1 MiB + 1 byte of them puts the cut inside one.
    engine().vfs.write('/big.txt', 'é'.repeat(512 * 1024 + 1));
    const read = (await get('/v1/fs/read?path=/big.txt')).json() as { text: string; truncated: boolean; size: number };
    expect(read.size).toBe(1024 * 1024 + 2);
    expect(read.truncated).toBe(true);
    expect(read.text).toBe('é'.repeat(512 * 1024));
  });

  it('says what is wrong with a path, a type or a snapshot', async () => {
    const missing = await get('/v1/fs/read?path=/nope.txt');
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error).toMatchObject({ code: 'NOT_FOUND', message: expect.stringContaining('/nope.txt') });
    const inSnapshot = await get('/v1/fs/list?path=/src/a.ts/x&at=one');
    expect(inSnapshot.json().error).toMatchObject({ code: 'NOT_A_DIRECTORY', message: expect.stringContaining('in snapshot') });
    expect((await get('/v1/fs/list?path=/src/a.ts')).json().error.code).toBe('NOT_A_DIRECTORY');
    expect((await get('/v1/fs/read?path=/src&at=one')).json().error.code).toBe('IS_A_DIRECTORY');
    const unknown = await get('/v1/fs/list?path=/&at=no-such-snapshot');
    expect(unknown.statusCode).toBeGreaterThanOrEqual(400);
    expect(unknown.json().error.message).toContain('no-such-snapshot');
    const noPath = await get('/v1/fs/list');
    expect(noPath.statusCode).toBe(400);
    expect(noPath.json().error.message).toContain('path');
    expect((await get('/v1/fs/read?path=../../etc/passwd')).json().error.code).toBe('INVALID_PATH');
  });
});

describe("each call's changes", () => {
  it('keeps what a write, a move and a delete did, as a diff per call', async () => {
    const write = (await run('fs.write', { path: '/notes/a.md', content: 'one\ntwo\nthree\n' })).json() as { tool_run_id: string };
    const again = (await run('fs.write', { path: '/notes/a.md', content: 'one\n2\nthree\n' })).json() as { tool_run_id: string };
    const diff = (await get(`/v1/runs/${again.tool_run_id}/diff`)).json() as { run_id: string; files: Array<Record<string, unknown>> };
    expect(diff.run_id).toBe(again.tool_run_id);
    expect(diff.files).toEqual([expect.objectContaining({ path: '/notes/a.md', status: 'modified', lines_added: 1, lines_removed: 1 })]);
    expect(diff.files[0]?.patch).toContain('-two\n+2\n');
    expect((await get(`/v1/runs/${write.tool_run_id}/diff?stat=true`)).json().files[0]).toMatchObject({
      status: 'added',
      lines_added: 3,
      patch: null,
    });

    const moved = (await run('fs.move', { from: '/notes/a.md', to: '/archive/a.md' })).json() as { tool_run_id: string };
    expect((await get(`/v1/runs/${moved.tool_run_id}/diff`)).json().files).toEqual([
      expect.objectContaining({ path: '/archive/a.md', status: 'renamed', from: '/notes/a.md' }),
    ]);
    engine().vfs.write('/tree/x/1.txt', '1\n');
    engine().vfs.write('/tree/x/2.txt', '2\n');
    const deleted = (await run('fs.delete', { path: '/tree', recursive: true })).json() as { tool_run_id: string };
    const gone = (await get(`/v1/runs/${deleted.tool_run_id}/diff?path=/tree/**`)).json() as { files: Array<{ path: string; status: string }> };
    // One file by its exact path, glob characters and all.
    engine().vfs.write('/odd/a*b?.txt', 'one\n');
    engine().vfs.write('/odd/aXbY.txt', 'two\n');
    const odd = (await run('fs.write', { path: '/odd/a*b?.txt', content: 'uno\n' })).json() as { tool_run_id: string };
    const exact = (await get(`/v1/runs/${odd.tool_run_id}/diff?file=${encodeURIComponent('/odd/a*b?.txt')}`)).json();
    expect(exact.files.map((f: { path: string }) => f.path)).toEqual(['/odd/a*b?.txt']);
    engine().snapshot({ label: 'odd' });
    engine().vfs.write('/odd/aXbY.txt', 'dos\n');
    engine().vfs.write('/odd/a*b?.txt', 'eins\n');
    const both = (await get(`/v1/diff?from=odd&path=${encodeURIComponent('/odd/a*b?.txt')}`)).json();
    expect(both.files.map((f: { path: string }) => f.path)).toEqual(['/odd/a*b?.txt', '/odd/aXbY.txt']);
    const one = (await get(`/v1/diff?from=odd&file=${encodeURIComponent('/odd/a*b?.txt')}`)).json();
    expect(one.files.map((f: { path: string }) => f.path)).toEqual(['/odd/a*b?.txt']);
    const clash = await get(`/v1/diff?from=odd&file=/x&path=/y`);
    expect(clash.json().error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining('not both') });
    expect(gone.files.map((f) => [f.path, f.status])).toEqual([
      ['/tree/x/1.txt', 'deleted'],
      ['/tree/x/2.txt', 'deleted'],
    ]);
  });

  it('answers 404, saying why, for a call that changed nothing, failed or is unknown', async () => {
    const read = (await run('fs.read', { path: '/archive/a.md' })).json() as { tool_run_id: string };
    const failed = (await run('fs.read', { path: '/none' })).json() as { tool_run_id: string };
    for (const id of [read.tool_run_id, failed.tool_run_id, 'no-such-run']) {
      const answer = await get(`/v1/runs/${id}/diff`);
      expect(answer.statusCode).toBe(404);
      expect(answer.json().error).toMatchObject({ code: 'NOT_FOUND', message: expect.stringContaining(id) });
    }
  });

  it('gives each of many concurrent calls exactly its own change', async () => {
    const calls = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        run('fs.write', { path: `/many/f${i % 6}.txt`, content: `writer ${i}\n` }).then((r) => ({ i, ...r.json() })),
      ),
    );
    const byFile = new Map<number, Array<{ i: number; tool_run_id: string }>>();
    for (const call of calls) byFile.set(call.i % 6, [...(byFile.get(call.i % 6) ?? []), call]);
    for (const call of calls) {
      expect(call.ok).toBe(true);
      const diff = (await get(`/v1/runs/${call.tool_run_id}/diff`)).json() as { files: Array<{ path: string; patch: string }> };
      expect(diff.files).toHaveLength(1);
      expect(diff.files[0]?.path).toBe(`/many/f${call.i % 6}.txt`);
      expect(diff.files[0]?.patch).toContain(`+writer ${call.i}\n`);
    }
    // The calls on one file form one chain: each replaced the content the one before it wrote.
    for (const chain of byFile.values()) {
      const replaced = new Set<string>();
      for (const call of chain) {
        const patch = (await get(`/v1/runs/${call.tool_run_id}/diff`)).json().files[0].patch as string;
        const old = /^-writer (\d+)$/m.exec(patch)?.[1];
        if (old !== undefined) replaced.add(old);
      }
      expect(replaced.size).toBe(chain.length - 1);
    }
  });

  it('forgets the oldest calls past its byte bound, and lists a file too large to keep without its contents', async () => {
    const small = tempProject();
    const e = await createEngine({
      workspace: small.workspace,
      project: 'p',
      persist: false,
      watch: false,
      changeLog: { bytes: 4000, file_bytes: 1000 },
    });
    try {
      const ids: string[] = [];
      // 500 bytes kept a call: the ninth pushes the first out of 4,000.
      for (let i = 0; i < 9; i++) {
        const r = await e.call('fs.write', { path: `/f${i}.txt`, content: `${i}`.repeat(500) });
        ids.push(r.meta.run_id);
      }
      expect(e.changes(ids[0] as string)).toBeNull();
      expect(e.changes(ids[1] as string)).not.toBeNull();
      expect(e.changes(ids[8] as string)?.files[0]).toMatchObject({ path: '/f8.txt', status: 'added', lines_added: 1 });
      const big = await e.call('fs.write', { path: '/big.txt', content: 'x'.repeat(1500) });
      expect(e.changes(big.meta.run_id)?.files[0]).toMatchObject({
        path: '/big.txt',
        size_after: 1500,
        patch: null,
        note: expect.stringContaining('larger than 1000'),
      });
      await expect(createEngine({ workspace: small.workspace, project: 'p', persist: false, changeLog: { bytes: -1 } })).rejects.toThrow(
        /changeLog\.bytes must be a positive integer/,
      );
      await expect(createEngine({ workspace: small.workspace, project: 'p', persist: false, changeLog: 'yes' as never })).rejects.toThrow(
        /changeLog must be/,
      );
    } finally {
      await e.close();
      small.remove();
    }
  });

  it('is off unless asked for', async () => {
    const other = tempProject();
    const e = await createEngine({ workspace: other.workspace, project: 'p', persist: false, watch: false });
    try {
      const r = await e.call('fs.write', { path: '/a.txt', content: 'a' });
      expect(r.ok).toBe(true);
      expect(e.changes(r.meta.run_id)).toBeNull();
    } finally {
      await e.close();
      other.remove();
    }
  });
});

describe('logs on events', () => {
  it('carries what a tool logged on its result and error events', async () => {
    const events: Array<{ type: string; tool?: string; logs?: Array<{ level: string; message: string }> }> = [];
    const listener = (event: (typeof events)[number]) => events.push(event);
    engine().events.on('event', listener);
    try {
      expect((await run('t.log', { name: 'ada' })).json().ok).toBe(true);
      expect((await run('t.fail', {})).json().ok).toBe(false);
    } finally {
      engine().events.off('event', listener);
    }
    const result = events.find((e) => e.type === 'ToolResultEvent' && e.tool === 't.log');
    expect(result?.logs).toEqual([
      { level: 'log', message: 'hello ada' },
      { level: 'warn', message: 'careful' },
    ]);
    expect(events.find((e) => e.type === 'ToolErrorEvent' && e.tool === 't.fail')?.logs).toEqual([{ level: 'log', message: 'about to fail' }]);
  });
});

describe('the page', () => {
  it('serves the page at / and /p/<project>/ with a policy that keeps every request on this server', async () => {
    for (const url of ['/', '/p/second/']) {
      const answer = await get(url);
      expect(answer.statusCode).toBe(200);
      expect(answer.headers['content-type']).toContain('text/html');
      expect(answer.headers['content-security-policy']).toBe(INSPECTOR_CSP);
      expect(answer.body).toContain('Arium inspector');
    }
    expect(INSPECTOR_CSP).toContain("default-src 'self'");
    expect((await get('/p/second')).headers.location).toBe('/p/second/');
    const asset = await get('/assets/app-1.js');
    expect(asset.statusCode).toBe(200);
    expect(asset.headers['cache-control']).toContain('immutable');
    expect((await get('/assets/../index.html')).statusCode).toBe(404);
  });

  it('with an API key: the page loads without it, the data does not', async () => {
    const keyed = await createGateway({
      workspace: project.workspace,
      project: project.project,
      apiKey: 'k-123',
      inspectorDir: page,
      engineOptions: { persist: false, watch: false },
    });
    try {
      expect((await keyed.app.inject({ method: 'GET', url: '/' })).statusCode).toBe(200);
      expect((await keyed.app.inject({ method: 'GET', url: '/assets/app-1.js' })).statusCode).toBe(200);
      for (const url of ['/v1/tools', '/v1/fs/list?path=/', '/v1/runs/x/diff', '/v1/project', '/assets/../v1/tools']) {
        expect((await keyed.app.inject({ method: 'GET', url })).statusCode, url).toBe(401);
      }
      expect((await keyed.app.inject({ method: 'GET', url: '/v1/project', headers: { authorization: 'Bearer k-123' } })).statusCode).toBe(200);
    } finally {
      await keyed.close();
    }
  });

  it('says how to build the page when it is not built, and serves none with inspector: false', async () => {
    const missing = await createGateway({
      workspace: project.workspace,
      project: project.project,
      inspectorDir: join(page, 'nowhere'),
      engineOptions: { persist: false, watch: false },
    });
    const off = await createGateway({
      workspace: project.workspace,
      project: project.project,
      inspector: false,
      engineOptions: { persist: false, watch: false },
    });
    try {
      const answer = await missing.app.inject({ method: 'GET', url: '/' });
      expect(answer.statusCode).toBe(503);
      expect(answer.json().error.message).toContain('npm run build');
      expect((await off.app.inject({ method: 'GET', url: '/' })).statusCode).toBe(404);
    } finally {
      await missing.close();
      await off.close();
    }
  });
});
