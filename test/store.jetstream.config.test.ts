// arium.json's `store`: a project kept in NATS JetStream, and a clear error for each setting that cannot be used.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freePort } from '../bench/nats-server.js';
import { createEngine, EngineConfigError, ProjectLockedError } from '../src/index.js';
import { type JetStreamCluster, startJetStream } from './support/jetstream.js';

let workspace: string;
let cluster: JetStreamCluster;
beforeAll(async () => {
  cluster = await startJetStream(1);
});
afterAll(() => cluster?.remove());
beforeEach(() => {
  workspace = mkdtempSync(join(tmpdir(), 'arium-store-config-'));
  mkdirSync(join(workspace, 'p'), { recursive: true });
});
afterEach(() => rmSync(workspace, { recursive: true, force: true }));

const config = (value: unknown, project = 'p') => {
  mkdirSync(join(workspace, project), { recursive: true });
  writeFileSync(join(workspace, project, 'arium.json'), JSON.stringify(value));
};

describe('arium.json store', () => {
  it('keeps the project in JetStream: a second engine with the same store finds what the first wrote', async () => {
    config({ store: { nats: { servers: cluster.urls }, name: `cfg-${process.pid}`, lease_ms: 500 } });
    const first = await createEngine({ workspace, project: 'p', watch: false });
    try {
      expect((await first.call('fs.write', { path: '/a.txt', content: 'kept' })).ok).toBe(true);
      first.snapshot({ label: 'one' });
      await expect(createEngine({ workspace, project: 'p', watch: false })).rejects.toThrow(ProjectLockedError);
    } finally {
      await first.close();
    }
    // The file store was not used.
    const second = await createEngine({ workspace, project: 'p', watch: false });
    try {
      expect(second.vfs.read('/a.txt').toString()).toBe('kept');
      expect(second.snapshots().map((s) => s.label)).toEqual(['one']);
    } finally {
      await second.close();
    }
  });

  it.each([
    ['no server', { store: {} }, '/store/nats: is required', 'arium.json store.nats'],
    [
      'two replicas',
      { store: { nats: { servers: 'nats://127.0.0.1:4222' }, replicas: 2 } },
      '/store/replicas: must be one of 1, 3',
      'arium.json store.replicas',
    ],
    ['a lease too short', { store: { nats: { servers: 'nats://127.0.0.1:4222' }, lease_ms: 10 } }, 'must be >= 300', 'arium.json store.lease_ms'],
    ['a name with a dot', { store: { nats: { servers: 'nats://127.0.0.1:4222' }, name: 'a.b' } }, 'must match pattern', 'arium.json store.name'],
    [
      'a server off loopback without credentials',
      { store: { nats: { servers: 'nats://10.1.2.3:4222' } } },
      'refusing to use the NATS server at 10.1.2.3',
      'arium.json store.nats',
    ],
    [
      'a password variable that is not set',
      { store: { nats: { servers: 'nats://127.0.0.1:4222', credentials: { user: 'u', password_env: 'ARIUM_TEST_UNSET_PASSWORD' } } } },
      'ARIUM_TEST_UNSET_PASSWORD is not set',
      'arium.json store.nats',
    ],
  ])('refuses %s, naming the field', async (_name, value, message, field) => {
    config(value);
    const error = await createEngine({ workspace, project: 'p', watch: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as EngineConfigError).message).toContain(message);
    expect((error as EngineConfigError).field).toBe(field);
  });

  it('asks for store.name when the folder name cannot name the project in JetStream', async () => {
    config({ store: { nats: { servers: cluster.urls } } }, 'my.project');
    const error = await createEngine({ workspace, project: 'my.project', watch: false }).catch((e: unknown) => e);
    expect((error as EngineConfigError).message).toMatch(/folder name "my.project" cannot name it in JetStream .* set store.name/);
    expect((error as EngineConfigError).field).toBe('arium.json store.name');
  });

  it('says which server it could not reach', async () => {
    const port = await freePort();
    config({ store: { nats: { servers: `nats://127.0.0.1:${port}` }, name: 'nowhere' } });
    const error = await createEngine({ workspace, project: 'p', watch: false }).catch((e: unknown) => e);
    expect((error as EngineConfigError).message).toContain(`Could not open the project "nowhere" in NATS JetStream at nats://127.0.0.1:${port}`);
    expect((error as EngineConfigError).field).toBe('arium.json store');
  });
});
