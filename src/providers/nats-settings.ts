// A `nats` provider's part of arium.json, checked, and the NATS settings it connects with: its own
// servers and credentials, or those of the project's `remote` section (runners/remote/settings.ts).
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { checkSettings, engineSettings, type NatsSettings, resolveAuth } from '../../runners/remote/settings.js';
import { SATELLITE_LIMITS } from '../limits.js';
import { type CredentialRefs, DEPLOYMENT, type RemoteConfig } from '../remote-config.js';
import type { ProviderDeps } from './provider.js';

/** A `nats` provider's settings in arium.json: `{ "nats": { … } }`. */
export interface NatsProviderSettings {
  /** NATS server URL(s); null: those of arium.json's `remote` (with its credentials and TLS). */
  servers: string[] | null;
  /** The namespace of the satellites' subjects; null: `remote.deployment`, else "default". */
  deployment: string | null;
  /** A satellite is forgotten after this long without a heartbeat; null: three of its own intervals. */
  heartbeat_timeout_ms: number | null;
  /** How long the satellite that took a call has to say so. */
  accept_ms: number;
  credentials: CredentialRefs | null;
  tls: { ca_file?: string; cert_file?: string; key_file?: string } | null;
}

const KEYS = ['servers', 'deployment', 'heartbeat_timeout_ms', 'accept_ms', 'credentials', 'tls'];
const CREDENTIAL_KEYS = ['user', 'password_env', 'password_file', 'token_env', 'token_file', 'nkey_seed_file'];
const TLS_KEYS = ['ca_file', 'cert_file', 'key_file'];

function stringsOf(value: unknown, where: string, keys: readonly string[]): Record<string, string> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${where} must be an object`);
  for (const [key, inner] of Object.entries(value)) {
    if (!keys.includes(key)) throw new Error(`${where}: unknown key "${key}"; known: ${keys.join(', ')}`);
    if (typeof inner !== 'string' || inner === '') throw new Error(`${where}/${key} must be a non-empty string`);
  }
  return { ...(value as Record<string, string>) };
}

function msOf(value: unknown, where: string, min: number, max: number): number {
  if (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max)
    throw new Error(`${where} must be a whole number of ms from ${min} to ${max} (got ${JSON.stringify(value)})`);
  return value as number;
}

export function parseNatsSettings(raw: unknown, at: string): NatsProviderSettings {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new Error(`${at} must be an object, e.g. { "servers": "nats://127.0.0.1:4222", "deployment": "default" }`);
  const given = raw as Record<string, unknown>;
  for (const key of Object.keys(given)) {
    if (!KEYS.includes(key)) throw new Error(`${at}: unknown key "${key}"; known: ${KEYS.join(', ')}`);
  }
  let servers: string[] | null = null;
  if (given.servers !== undefined) {
    const list = typeof given.servers === 'string' ? [given.servers] : given.servers;
    if (!Array.isArray(list) || list.length === 0 || list.some((s) => typeof s !== 'string' || s === ''))
      throw new Error(`${at}/servers must be a NATS URL or a non-empty list of them, e.g. "nats://127.0.0.1:4222"`);
    servers = list as string[];
  }
  if (given.deployment !== undefined && (typeof given.deployment !== 'string' || !DEPLOYMENT.test(given.deployment)))
    throw new Error(`${at}/deployment must be 1 to 64 letters, digits, "_" or "-" (got ${JSON.stringify(given.deployment)})`);
  if (servers === null && (given.credentials !== undefined || given.tls !== undefined))
    throw new Error(`${at}: credentials and tls go with servers; without servers the provider uses arium.json's remote, with its own`);
  return {
    servers,
    deployment: (given.deployment as string | undefined) ?? null,
    heartbeat_timeout_ms:
      given.heartbeat_timeout_ms === undefined ? null : msOf(given.heartbeat_timeout_ms, `${at}/heartbeat_timeout_ms`, 50, 600_000),
    accept_ms: given.accept_ms === undefined ? SATELLITE_LIMITS.accept_ms : msOf(given.accept_ms, `${at}/accept_ms`, 50, 60_000),
    credentials: given.credentials === undefined ? null : stringsOf(given.credentials, `${at}/credentials`, CREDENTIAL_KEYS),
    tls: given.tls === undefined ? null : stringsOf(given.tls, `${at}/tls`, TLS_KEYS),
  };
}

/** The NATS settings: the provider's own servers, or arium.json's `remote` (read when it starts). */
export function connectionOf(settings: NatsProviderSettings, deps: ProviderDeps, name: string): NatsSettings {
  const where = `arium.json providers.${name}.nats`;
  if (settings.servers) {
    const tls = settings.tls ? Object.fromEntries(Object.entries(settings.tls).map(([k, v]) => [k, resolve(deps.projectDir, v)])) : null;
    return checkSettings(
      {
        servers: settings.servers,
        deployment: settings.deployment ?? 'default',
        auth: resolveAuth(settings.credentials ?? undefined, process.env, deps.projectDir, `${where}.credentials`),
        tls,
      },
      where,
    );
  }
  let remote: RemoteConfig | undefined;
  try {
    remote = (JSON.parse(readFileSync(join(deps.projectDir, 'arium.json'), 'utf8')) as { remote?: RemoteConfig }).remote;
  } catch (error) {
    throw new Error(`${where}: no servers given, and arium.json cannot be read for its remote section: ${(error as Error).message}`);
  }
  if (!remote) throw new Error(`${where}: give servers (e.g. "nats://127.0.0.1:4222"), or a remote section whose NATS server it shares`);
  const shared = engineSettings(remote, process.env, deps.projectDir);
  return settings.deployment ? { ...shared, deployment: settings.deployment } : shared;
}
