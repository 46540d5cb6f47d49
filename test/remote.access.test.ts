import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startWorker } from '../runners/remote/worker.js';
import { createEngine, type Engine, EngineConfigError } from '../src/index.js';
import { type NatsServer, startNats } from './support/nats.js';
import { definition, type TempProject, tempProject } from './support/project.js';
import { remoteEngine, Workers } from './support/remote.js';

const workers = new Workers();

function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A CA, a server certificate for 127.0.0.1 signed by it, and an unrelated CA. */
function makeCertificates(): { dir: string; ca: string; cert: string; key: string; other: string } {
  const dir = mkdtempSync(join(tmpdir(), 'arium-tls-'));
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=arium-test-ca');
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'other.key', '-out', 'other.pem', '-days', '1', '-subj', '/CN=other-ca');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '1',
    '-extfile',
    'ext.cnf',
  );
  return { dir, ca: join(dir, 'ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key'), other: join(dir, 'other.pem') };
}
let nats: NatsServer | null = null;
let project: TempProject;
const engines: Engine[] = [];

afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
  await workers.closeAll();
  await nats?.stop();
  nats = null;
  project?.remove();
  delete process.env.ARIUM_TEST_NATS_PASSWORD;
});

const tools = {
  'echo.json': definition({ id: 'echo', entry: 'echo.js' }),
  'echo.js': 'export default async function run(input) { return input; }',
};

async function engineOn(url: string, remote: Record<string, unknown>): Promise<Engine> {
  const engine = await remoteEngine(project, url, remote);
  engines.push(engine);
  return engine;
}

describe('access to remote workers', () => {
  it('takes credentials by reference and refuses a wrong password with a clear error, engine and worker alike', async () => {
    nats = await startNats({ user: 'arium', pass: 's3cret' });
    project = tempProject(tools, 'arium-remote-');
    const url = nats.url;
    process.env.ARIUM_TEST_NATS_PASSWORD = 'wrong';
    const credentials = { user: 'arium', password_env: 'ARIUM_TEST_NATS_PASSWORD' };
    const refused = await engineOn(url, { credentials }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(EngineConfigError);
    expect((refused as Error).message).toMatch(/refused the credentials/);
    const settings = { servers: [url], deployment: 'test', tls: null };
    await expect(startWorker({ settings: { ...settings, auth: { user: 'arium', pass: 'wrong' } } })).rejects.toThrow(/refused the credentials/);
    await expect(startWorker({ settings: { ...settings, auth: null } })).rejects.toThrow(/refused the credentials/);

    process.env.ARIUM_TEST_NATS_PASSWORD = 's3cret';
    await workers.start(url, { settings: { ...settings, auth: { user: 'arium', pass: 's3cret' } } });
    const engine = await engineOn(url, { credentials });
    expect(await engine.call('echo', { a: 1 })).toMatchObject({ ok: true, data: { a: 1 } });
  });

  it('refuses a token that is wrong, and works with the right one from a file', async () => {
    nats = await startNats({ token: 't0ken' });
    project = tempProject({ ...tools, '../token.txt': 't0ken\n', '../bad.txt': 'nope' }, 'arium-remote-');
    await expect(engineOn(nats.url, { credentials: { token_file: 'bad.txt' } })).rejects.toThrow(/refused the credentials/);
    await workers.start(nats.url, { settings: { servers: [nats.url], deployment: 'test', auth: { token: 't0ken' }, tls: null } });
    const engine = await engineOn(nats.url, { credentials: { token_file: 'token.txt' } });
    expect(await engine.call('echo', { b: 2 })).toMatchObject({ ok: true, data: { b: 2 } });
  });

  it('takes an nkey seed from a file, and refuses another user’s seed', async () => {
    const { nkeys } = await import('@nats-io/transport-node');
    const user = nkeys.createUser();
    nats = await startNats({ nkey: user.getPublicKey() });
    const seed = new TextDecoder().decode(user.getSeed());
    const stranger = new TextDecoder().decode(nkeys.createUser().getSeed());
    project = tempProject({ ...tools, '../user.nk': `${seed}\n`, '../stranger.nk': stranger, '../not-a-seed.nk': 'hello' }, 'arium-remote-');
    await expect(engineOn(nats.url, { credentials: { nkey_seed_file: 'stranger.nk' } })).rejects.toThrow(/refused the credentials/);
    await expect(engineOn(nats.url, { credentials: { nkey_seed_file: 'not-a-seed.nk' } })).rejects.toThrow(/does not hold a user nkey seed/);
    await workers.start(nats.url, { settings: { servers: [nats.url], deployment: 'test', auth: { nkeySeed: user.getSeed() }, tls: null } });
    const engine = await engineOn(nats.url, { credentials: { nkey_seed_file: 'user.nk' } });
    expect(await engine.call('echo', { n: 3 })).toMatchObject({ ok: true, data: { n: 3 } });
  });

  it.runIf(hasOpenssl())('speaks TLS to a server that requires it, checking its certificate against tls.ca_file', async () => {
    const certs = makeCertificates();
    try {
      nats = await startNats({ token: 'tls-token', tls: { cert: certs.cert, key: certs.key } });
      project = tempProject(tools, 'arium-remote-');
      const tls = { ca_file: certs.ca };
      const settings = { servers: [nats.url], deployment: 'test', auth: { token: 'tls-token' } };
      // Without the CA the server's certificate is not trusted: refused, not silently accepted.
      await expect(startWorker({ settings: { ...settings, tls: { ca_file: certs.other } } })).rejects.toThrow(
        /TLS with the NATS server at .* failed \(.*\); check remote.tls/,
      );
      await workers.start(nats.url, { settings: { ...settings, tls } });
      process.env.ARIUM_TEST_NATS_PASSWORD = 'tls-token';
      // A server that is there but not trusted is a setup to fix, not an outage to wait out: the engine does not start.
      await expect(engineOn(nats.url, { credentials: { token_env: 'ARIUM_TEST_NATS_PASSWORD' }, tls: { ca_file: certs.other } })).rejects.toThrow(
        /TLS with the NATS server at .* failed/,
      );
      const engine = await engineOn(nats.url, { credentials: { token_env: 'ARIUM_TEST_NATS_PASSWORD' }, tls: { ca_file: certs.ca } });
      expect(await engine.call('echo', { tls: true })).toMatchObject({ ok: true, data: { tls: true } });
    } finally {
      rmSync(certs.dir, { recursive: true, force: true });
    }
  });

  it.each([
    [{ nats: 'nats://10.1.2.3:4222', runners: ['js-runner'] }, /without credentials/],
    [{ nats: 'nats://user:pw@127.0.0.1:4222', runners: ['js-runner'] }, /holds credentials/],
    [
      { nats: 'nats://127.0.0.1:4222', runners: ['js-runner'], credentials: { user: 'u', password_env: 'ARIUM_UNSET_VARIABLE' } },
      /ARIUM_UNSET_VARIABLE is not set/,
    ],
    [{ nats: 'nats://127.0.0.1:4222', runners: ['builtin'] }, /"builtin" cannot run remotely/],
    [{ nats: 'nats://127.0.0.1:4222', runners: [] }, /name the runners/],
  ])('refuses to start with %j', async (remote, message) => {
    project = tempProject(tools, 'arium-remote-');
    const error = await createEngine({ workspace: project.workspace, project: 'p', watch: false, persist: false, remote: remote as never }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as Error).message).toMatch(message);
    expect((error as EngineConfigError).field).toBe('arium.json remote');
  });

  it('keeps two deployments on one server apart', async () => {
    nats = await startNats();
    project = tempProject(tools, 'arium-remote-');
    const a = await workers.start(nats.url, { deployment: 'alpha' });
    const alpha = await engineOn(nats.url, { deployment: 'alpha' });
    const beta = await engineOn(nats.url, { deployment: 'beta' });
    const r = await alpha.call('echo', { x: 1 });
    expect(r).toMatchObject({ ok: true });
    expect((r.meta as unknown as { worker: { id: string } }).worker.id).toBe(a.id);
    expect(await beta.call('echo', { x: 1 })).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', details: { reason: 'no-workers' } } });
    // Each engine hears the heartbeats of its own deployment only.
    for (let i = 0; i < 200 && (await alpha.status()).remote?.workers.length === 0; i++) await new Promise((r) => setTimeout(r, 25));
    expect((await alpha.status()).remote?.workers.map((w) => w.id)).toEqual([a.id]);
    expect((await beta.status()).remote?.workers).toEqual([]);
  });
});
