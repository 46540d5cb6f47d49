import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { resolve } from 'node:path';
import { type CredentialRefs, DEPLOYMENT, type RemoteConfig } from '../../src/remote-config.js';

/**
 * How an engine or a worker reaches the NATS server: the servers, the deployment its subjects are
 * namespaced by, and the credentials and TLS files. Secrets are never written in arium.json: it names
 * an environment variable or a file that holds them.
 */
export interface NatsSettings {
  servers: string[];
  deployment: string;
  auth: NatsAuth | null;
  tls: { ca_file?: string; cert_file?: string; key_file?: string } | null;
}

export type NatsAuth = { user: string; pass: string } | { token: string } | { nkeySeed: Uint8Array };

/** A setting that cannot be used, with what and where. */
export class RemoteConfigError extends Error {
  override readonly name: string = 'RemoteConfigError';
}

function secret(
  where: string,
  env: Readonly<Record<string, string | undefined>>,
  name: string | undefined,
  file: string | undefined,
  base: string,
): string | null {
  if (name !== undefined) {
    const value = env[name];
    if (!value) throw new RemoteConfigError(`${where}: the environment variable ${name} is not set; export it, or name another`);
    return value;
  }
  if (file !== undefined) {
    try {
      return readFileSync(resolve(base, file), 'utf8').trim();
    } catch (error) {
      throw new RemoteConfigError(`${where}: cannot read ${resolve(base, file)}: ${(error as Error).message}`);
    }
  }
  return null;
}

/** The secrets the references name, read now; `base` resolves relative file names. */
export function resolveAuth(
  refs: CredentialRefs | undefined,
  env: Readonly<Record<string, string | undefined>>,
  base: string,
  where: string,
): NatsAuth | null {
  if (!refs) return null;
  const kinds = [refs.user !== undefined, refs.token_env !== undefined || refs.token_file !== undefined, refs.nkey_seed_file !== undefined].filter(
    Boolean,
  );
  if (kinds.length > 1)
    throw new RemoteConfigError(`${where}: give one of user (with password_env or password_file), token_env/token_file, or nkey_seed_file`);
  if (refs.user !== undefined) {
    const pass = secret(`${where}.password_env`, env, refs.password_env, refs.password_file, base);
    if (pass === null) throw new RemoteConfigError(`${where}: user "${refs.user}" needs password_env (an environment variable) or password_file`);
    return { user: refs.user, pass };
  }
  const token = secret(`${where}.token_env`, env, refs.token_env, refs.token_file, base);
  if (token !== null) return { token };
  if (refs.nkey_seed_file !== undefined) {
    const seed = secret(`${where}.nkey_seed_file`, env, undefined, refs.nkey_seed_file, base) as string;
    if (!seed.startsWith('SU')) throw new RemoteConfigError(`${where}.nkey_seed_file: ${refs.nkey_seed_file} does not hold a user nkey seed (SU…)`);
    return { nkeySeed: new TextEncoder().encode(seed) };
  }
  if (refs.password_env !== undefined || refs.password_file !== undefined) throw new RemoteConfigError(`${where}: a password needs its user`);
  return null;
}

function hostOf(server: string): string {
  const withScheme = /^[a-z]+:\/\//i.test(server) ? server : `nats://${server}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new RemoteConfigError(`"${server}" is not a NATS server URL (e.g. nats://10.0.0.5:4222)`);
  }
  if (url.username || url.password) {
    throw new RemoteConfigError(
      `"${server.replace(/\/\/[^@]*@/, '//…@')}" holds credentials; name them in credentials (an environment variable or a file) instead`,
    );
  }
  return url.hostname.replace(/^\[|\]$/g, '');
}

/** Hosts only this machine reaches. */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}

/**
 * Checks the settings: every server a URL without credentials in it, a deployment name, and
 * credentials for any server off loopback (a NATS server other machines reach is open to them).
 */
export function checkSettings(settings: NatsSettings, where: string): NatsSettings {
  if (settings.servers.length === 0) throw new RemoteConfigError(`${where}: name the NATS server, e.g. nats://127.0.0.1:4222`);
  const remoteHosts = settings.servers.map((s) => hostOf(s)).filter((h) => !isLoopbackHost(h));
  if (!DEPLOYMENT.test(settings.deployment)) {
    throw new RemoteConfigError(`${where}: deployment "${settings.deployment}" must be 1 to 64 letters, digits, "_" or "-"`);
  }
  if (remoteHosts.length > 0 && settings.auth === null) {
    throw new RemoteConfigError(
      `${where}: refusing to use the NATS server at ${remoteHosts[0]}, which other machines reach, without credentials: give user and password_env, token_env or nkey_seed_file (or use a server on 127.0.0.1)`,
    );
  }
  return settings;
}

/** The settings arium.json's `remote` gives, with its secrets read from `env` and files under `projectDir`. */
export function engineSettings(config: RemoteConfig, env: Readonly<Record<string, string | undefined>>, projectDir: string): NatsSettings {
  const settings: NatsSettings = {
    servers: typeof config.nats === 'string' ? [config.nats] : [...config.nats],
    deployment: config.deployment ?? 'default',
    auth: resolveAuth(config.credentials, env, projectDir, 'arium.json remote.credentials'),
    tls: config.tls ? Object.fromEntries(Object.entries(config.tls).map(([k, v]) => [k, resolve(projectDir, v)])) : null,
  };
  return checkSettings(settings, 'arium.json remote');
}
