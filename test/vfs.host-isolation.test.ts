import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { afterAll, afterEach, beforeAll, describe, expect, it, type MockInstance, vi } from 'vitest';
import { DEFAULT_CATALOG } from '../runners/index.js';
import { loadProjectConfig } from '../src/config.js';
import { type Engine, Vfs } from '../src/index.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * Proves that no VFS operation and no builtin call reaches the host filesystem: every function of
 * node:fs and node:fs/promises is spied on, and `syncBuiltinESMExports` makes the engine's own named
 * imports (`import { readFileSync } from 'node:fs'`) go through the spies too. A canary at the end
 * shows the spies do see the engine's host I/O when there is some, so a silent spy cannot pass this.
 *
 * The engine runs with `persist: false` (the durable state folder is host I/O by design) and no audit
 * log; everything is warmed up once before spying, so lazy module loading is not counted.
 */

type Spied = { label: string; spy: MockInstance };
let spies: Spied[] = [];

function spyOnHostFs(): void {
  const targets: Array<[string, Record<string, unknown>]> = [
    ['fs', fs as unknown as Record<string, unknown>],
    ['fs.promises', fs.promises as unknown as Record<string, unknown>],
  ];
  for (const [label, target] of targets) {
    for (const name of Object.keys(target)) {
      // Classes (Stats, Dirent, ReadStream…) are not operations; `promises` is covered as its own target.
      if (typeof target[name] !== 'function' || /^[A-Z]/.test(name)) continue;
      spies.push({ label: `${label}.${name}`, spy: vi.spyOn(target as Record<string, () => unknown>, name) });
    }
  }
  syncBuiltinESMExports();
}

function restoreHostFs(): void {
  for (const { spy } of spies) spy.mockRestore();
  spies = [];
  syncBuiltinESMExports();
}

function hostCalls(): string[] {
  return spies
    .filter(({ spy }) => spy.mock.calls.length > 0)
    .map(({ label, spy }) => `${label} ×${spy.mock.calls.length}: ${JSON.stringify(spy.mock.calls[0]).slice(0, 120)}`);
}

/** Every builtin, plus hostile paths that name real host files. */
const CALLS: Array<[string, Record<string, unknown>]> = [
  ['fs.write', { path: '/docs/a.txt', content: 'one\n' }],
  ['fs.write', { path: '/docs/a.txt', content: 'two\n' }],
  ['fs.write', { path: '/docs/a.txt', content: 'three\n', append: true }],
  ['fs.write', { path: '/bin.dat', content: 'AAEC', encoding: 'base64' }],
  ['fs.read', { path: '/docs/a.txt' }],
  ['fs.read', { path: '/bin.dat', encoding: 'base64', offset: 1, length: 1 }],
  ['fs.list', { path: '/', recursive: true }],
  ['fs.stat', { path: '/docs/a.txt' }],
  ['fs.mkdir', { path: '/made/deep' }],
  ['fs.move', { from: '/docs/a.txt', to: '/made/deep/a.txt' }],
  ['system.hash', { path: '/made/deep/a.txt', algorithm: 'sha512' }],
  ['system.hash', { text: 'abc', algorithm: 'md5' }],
  ['vfs.snapshot', { label: 'iso' }],
  ['fs.delete', { path: '/made', recursive: true }],
  ['vfs.diff', { from: 'iso' }],
  ['vfs.log', {}],
  ['vfs.restore', { snapshot: 'iso' }],
  // Paths that would mean real files on the host: each must stay a VFS path, or be refused.
  ['fs.read', { path: '/etc/passwd' }],
  ['fs.read', { path: '/../../../../etc/passwd' }],
  ['fs.read', { path: 'file:///etc/passwd' }],
  ['fs.read', { path: 'C:\\Windows\\win.ini' }],
  ['fs.stat', { path: process.cwd() }],
  ['fs.list', { path: '/proc/self' }],
  ['fs.write', { path: `${process.cwd()}/package.json`, content: 'overwritten?' }],
  ['fs.write', { path: '/tmp/../../etc/hostname', content: 'x' }],
  ['fs.delete', { path: '/', recursive: true, allow_root: true }],
];

let project: TempProject;
let engine: Engine;

async function runEverything(e: Engine): Promise<void> {
  for (const [id, input] of CALLS) await e.call(id, input);
  const vfs = new Vfs({ max_files: 100 });
  vfs.write('/x/y.txt', 'data');
  vfs.read('/x/y.txt');
  vfs.list('/', { recursive: true });
  vfs.stat('/x');
  vfs.move('/x', '/z');
  vfs.mkdir('/m/n');
  vfs.delete('/z', { recursive: true });
  for (const bad of ['/../etc/passwd', '/etc/passwd\u0000', 'C:\\x']) expect(() => vfs.read(bad)).toThrow();
  e.vfs.write('/host-api.txt', 'via engine.vfs');
  e.vfs.read('/host-api.txt');
  e.vfs.list('/');
  e.snapshot({ label: 'host' });
  e.diff('host', 'live');
  e.snapshots();
}

beforeAll(async () => {
  project = tempProject();
  engine = await openEngine(project, { persist: false });
  await runEverything(engine); // warm-up: lazy imports and schema compiles happen here, unspied
});

afterEach(() => restoreHostFs());

afterAll(async () => {
  await engine.close();
  project.remove();
});

describe('the host filesystem', () => {
  it('is never touched by a builtin call or a VFS operation', async () => {
    spyOnHostFs();
    await runEverything(engine);
    const touched = hostCalls();
    restoreHostFs();
    expect(touched).toEqual([]);
  });

  it('is where the hostile writes did not land', async () => {
    const hostPackage = fs.readFileSync(`${process.cwd()}/package.json`, 'utf8');
    expect(hostPackage).not.toContain('overwritten?');
    // In the VFS that path is an ordinary file.
    await engine.call('fs.write', { path: `${process.cwd()}/package.json`, content: 'overwritten?' });
    expect(engine.vfs.read(`${process.cwd()}/package.json`).toString()).toBe('overwritten?');
    expect(fs.readFileSync(`${process.cwd()}/package.json`, 'utf8')).toBe(hostPackage);
  });

  it('is seen by the spies when the engine does use it (the canary)', async () => {
    spyOnHostFs();
    loadProjectConfig(project.dir, DEFAULT_CATALOG); // a named import of node:fs (existsSync)
    await engine.refresh(); // named imports of node:fs/promises (readdir, stat)
    const touched = hostCalls();
    restoreHostFs();
    expect(touched.some((t) => t.startsWith('fs.existsSync'))).toBe(true);
    expect(touched.some((t) => t.startsWith('fs.promises.readdir'))).toBe(true);
  });
});
