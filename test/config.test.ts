import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createEngine, EngineConfigError, PROJECT_CONFIG_SCHEMA } from '../src/index.js';

let workspace: string;

beforeEach(() => {
  workspace = mkdtempSync(join(tmpdir(), 'arium-config-'));
  mkdirSync(join(workspace, 'p', 'tools'), { recursive: true });
});

afterEach(() => rmSync(workspace, { recursive: true, force: true }));

function config(value: unknown): void {
  writeFileSync(join(workspace, 'p', 'arium.json'), typeof value === 'string' ? value : JSON.stringify(value));
}

describe('arium.json', () => {
  it('sets grants, policy and quotas for the project', async () => {
    config({ grants: ['vfs.read'], policy: { timeout_ms: 1234 }, vfs: { max_files: 3 }, persist: false });
    const engine = await createEngine({ workspace, project: 'p', watch: false });
    try {
      expect(engine.grants).toEqual(['vfs.read']);
      expect(engine.policy.timeout_ms).toBe(1234);
      const denied = await engine.call('fs.write', { path: '/a', content: 'x' });
      expect(denied.ok ? null : denied.error.code).toBe('DENIED');
      expect(engine.config.persist).toBe(false);
    } finally {
      await engine.close();
    }
  });

  it('is overridden field by field by engine options', async () => {
    config({ grants: ['vfs.read'], policy: { timeout_ms: 1234, queue_length: 5 }, persist: false });
    const engine = await createEngine({ workspace, project: 'p', watch: false, grants: ['vfs.read', 'vfs.write'], policy: { timeout_ms: 99 } });
    try {
      expect(engine.grants).toEqual(['vfs.read', 'vfs.write']);
      expect(engine.policy.timeout_ms).toBe(99);
      expect(engine.policy.queue_length).toBe(5);
    } finally {
      await engine.close();
    }
  });

  it.each([
    ['malformed JSON', '{ "grants": [', 'is not valid JSON', 'arium.json'],
    ['an unknown field', { grantz: [] }, 'is not an allowed property', 'arium.json grantz'],
    ['a wrong type', { policy: { timeout_ms: 'fast' } }, 'must be integer', 'arium.json policy.timeout_ms'],
    ['an unknown policy field', { policy: { speed: 3 } }, 'is not an allowed property', 'arium.json policy.speed'],
    ['a malformed grant', { grants: ['vfs.teleport'] }, 'Unknown permission "vfs.teleport"', 'grants'],
    ['a malformed grant of a surface', { surfaces: { mcp: { grants: ['vfs.teleport'] } } }, 'Unknown permission', 'arium.json surfaces.mcp.grants'],
    ['an unknown surface', { surfaces: { grpc: {} } }, 'is not an allowed property', 'arium.json surfaces.grpc'],
    [
      'an unknown discovery mode',
      { surfaces: { http: { discovery: 'lazy' } } },
      '/surfaces/http/discovery: must be one of "all", "search"',
      'arium.json surfaces.http.discovery',
    ],
    [
      'a key given twice',
      '{\n  "grants": ["vfs.read"],\n  "persist": false,\n  "grants": ["vfs.read", "vfs.write", "sys.exec"]\n}',
      'arium.json:4:3: the key "grants" appears twice in the top-level object (first at 2:3)',
      'arium.json grants',
    ],
    [
      'a nested key given twice',
      '{ "policy": { "timeout_ms": 1000, "timeout_ms": 600000 } }',
      'the key "timeout_ms" appears twice in the object at /policy',
      'arium.json policy.timeout_ms',
    ],
  ])('refuses %s with an error naming the field', async (_name, value, message, field) => {
    config(value);
    const error = await createEngine({ workspace, project: 'p', watch: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).message).toContain(message);
    expect((error as EngineConfigError).field).toBe(field);
  });

  it('publishes its schema as schema/project.schema.json', () => {
    const published = JSON.parse(readFileSync(new URL('../schema/project.schema.json', import.meta.url), 'utf8'));
    // Regenerate with: node -e "import('./dist/src/index.js').then(m => console.log(JSON.stringify(m.PROJECT_CONFIG_SCHEMA, null, 2)))"
    expect(published).toEqual(JSON.parse(JSON.stringify(PROJECT_CONFIG_SCHEMA)));
  });
});
