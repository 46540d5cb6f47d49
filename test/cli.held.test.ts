import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, ProjectLockedError } from '../src/index.js';
import { parseJson, runCli, tempWorkspace } from './cli.helpers.js';

/**
 * An agent's engine holds a project and keeps changing it (fixtures/durability/holder.mjs, a child
 * process on the built engine: `npm test` builds dist/ first) while the CLI inspects it without the
 * lock. Every inspection must succeed and show a state the holder really had: /counter.txt whole, and
 * never going back.
 */
const ROOT = resolve(import.meta.dirname, '..');
const ENGINE = join(ROOT, 'dist', 'src', 'index.js');

let ws: ReturnType<typeof tempWorkspace>;
let holder: ChildProcess;
let acked = 0;
let out = '';

const P = ['--workspace', 'ws', '--project', 'p'];
const cli = (args: string[]) => runCli(ws.root, args);

/** A counter file as the holder writes it: `<n>\n` and n % 5000 x's. Returns n, or throws if it is torn or mixed. */
function counterOf(content: string): number {
  const [head, rest = ''] = content.split('\n');
  const n = Number(head);
  if (!Number.isInteger(n) || rest !== 'x'.repeat(n % 5000)) throw new Error(`not a whole counter file: ${content.slice(0, 60)}…`);
  return n;
}

beforeAll(async () => {
  if (!existsSync(ENGINE)) throw new Error('dist/ is missing: run npm run build (npm test does) before this suite');
  ws = tempWorkspace();
  writeFileSync(join(ws.workspace, 'p', 'arium.json'), JSON.stringify({ audit_log: true }));
  holder = spawn(process.execPath, [join(ROOT, 'fixtures', 'durability', 'holder.mjs'), pathToFileURL(ENGINE).href, ws.workspace, 'p'], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  holder.stdout?.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    const last = /ACK (\d+)\n(?![\s\S]*ACK)/.exec(out);
    if (last) acked = Number(last[1]);
  });
  await new Promise<void>((ready, fail) => {
    holder.on('exit', (code) => fail(new Error(`the holder exited (${code}) before it was ready`)));
    const wait = setInterval(() => {
      if (acked > 20) {
        clearInterval(wait);
        ready();
      }
    }, 20);
  });
});

afterAll(async () => {
  holder?.stdin?.end();
  await new Promise((done) => holder?.on('close', done));
  ws?.cleanup();
});

describe('a project another engine holds', () => {
  it('is still locked for a second writer', async () => {
    await expect(createEngine({ workspace: ws.workspace, project: 'p', watch: false })).rejects.toBeInstanceOf(ProjectLockedError);
  });

  it('can be inspected again and again while it changes: reads are whole, consistent and never go back', { timeout: 60_000 }, async () => {
    let last = 0;
    for (let round = 0; round < 25; round++) {
      const before = acked;
      const read = await cli(['call', 'fs.read', '{"path":"/counter.txt"}', ...P, '--json']);
      expect([read.code, read.err]).toEqual([
        0,
        expect.stringContaining(`is held by another engine (pid ${holder.pid}), which does not answer on the workspace's daemon socket`),
      ]);
      const n = counterOf(String(parseJson(read).data.content));
      // What was acknowledged before the read started is there; nothing the holder never had is.
      expect(n).toBeGreaterThanOrEqual(before);
      expect(n).toBeGreaterThanOrEqual(last);
      last = n;
      const log = await cli(['log', ...P, '--json']);
      expect(log.code).toBe(0);
      const snapshots = parseJson(log).snapshots as Array<{ label: string }>;
      expect(snapshots.length).toBeGreaterThan(0);
      if (round % 5 === 0) {
        const diff = await cli(['diff', snapshots.at(-1)?.label ?? 'latest', 'live', ...P, '--json']);
        expect(diff.code).toBe(0);
      }
    }
    // And the holder did acknowledge what was read (its ACK lines may trail its commits).
    for (let wait = 0; acked < last && wait < 200; wait++) await new Promise((r) => setTimeout(r, 10));
    expect(acked).toBeGreaterThanOrEqual(last);
  });

  it('lists its tools and shows its events (the audit log it appends to)', async () => {
    const tools = await cli(['tools', ...P, '--json']);
    expect(tools.code).toBe(0);
    expect(JSON.stringify(parseJson(tools))).toContain('fs.write');
    await new Promise((r) => setTimeout(r, 50));
    const events = await cli(['events', ...P, '--json', '--limit', '5']);
    expect(events.code).toBe(0);
    expect(events.out).toContain('"tool":"fs.write"');
  });

  it('exports what it made durable', async () => {
    const target = mkdtempSync(join(tmpdir(), 'arium-held-export-'));
    try {
      const r = await cli(['export', '/', target, ...P]);
      expect(r.code).toBe(0);
      counterOf(readFileSync(join(target, 'counter.txt'), 'utf8'));
    } finally {
      rmSync(target, { recursive: true, force: true });
    }
  });

  it.each([
    ['a call that writes', ['call', 'fs.write', '{"path":"/mine.txt","content":"x"}'], 'The call'],
    ['a snapshot', ['snapshot'], 'A snapshot'],
    ['a restore', ['restore', 'latest'], 'The restore'],
    ['gc', ['gc'], 'Garbage collection'],
    ['an import', ['import', '.'], 'The call'],
  ])('refuses %s, saying who holds it and how to proceed', async (_name, args, what) => {
    const r = await cli([...args, ...P, '--json']);
    expect(r.code).toBe(1);
    const error = parseJson(r).ok === false ? parseJson(r).error : null;
    expect(error).toMatchObject({ code: 'UNAVAILABLE' });
    expect(String(error?.message)).toContain(`${what} needs to change the project, which another engine (pid ${holder.pid}) holds`);
    expect(String(error?.message)).toContain('Make the change through that engine, or stop it and try again');
  });
});
