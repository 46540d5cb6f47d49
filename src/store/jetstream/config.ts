// arium.json's `store`: where the project's state is kept when not in `<project>/.arium`. Checked by
// config.ts with the rest of arium.json; the engine opens the store it names (openConfiguredStore).
import { resolve } from 'node:path';
import { checkSettings, type NatsSettings, resolveAuth } from '../../../runners/remote/settings.js';
import { DEFAULT_GATEWAY_FORWARD, DEFAULT_JETSTREAM_STORE } from '../../limits.js';
import { type CredentialRefs, REMOTE_CONFIG_SCHEMA } from '../../remote-config.js';
import { JetStreamStore, STORE_NAME } from '../jetstream-store.js';

/** The JSON Schema of arium.json's `store` (also the docs of each field). */
export const STORE_CONFIG_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['nats'],
  description: 'keep the project state in NATS JetStream instead of <project>/.arium (README "State in NATS JetStream")',
  properties: {
    nats: {
      type: 'object',
      additionalProperties: false,
      required: ['servers'],
      properties: {
        servers: REMOTE_CONFIG_SCHEMA.properties.nats,
        credentials: REMOTE_CONFIG_SCHEMA.properties.credentials,
        tls: REMOTE_CONFIG_SCHEMA.properties.tls,
      },
    },
    name: {
      type: 'string',
      pattern: STORE_NAME.source,
      description: "the project's name in JetStream (stream ARIUM_<name>); default the project's folder name",
    },
    replicas: { enum: [1, 3], description: 'JetStream replicas: an append is acknowledged once a majority holds it (default 1)' },
    lease_ms: {
      type: 'integer',
      minimum: DEFAULT_JETSTREAM_STORE.min_lease_ms,
      maximum: DEFAULT_JETSTREAM_STORE.max_lease_ms,
      description: `another engine takes the project over this long after its holder stopped renewing its lease (default ${DEFAULT_JETSTREAM_STORE.lease_ms})`,
    },
    forward: {
      type: 'object',
      additionalProperties: false,
      required: ['secret_env'],
      description:
        'gateways that share this project forward requests to the one holding it, over NATS, signed with a shared secret (README "Gateways in front of one project")',
      properties: {
        secret_env: {
          type: 'string',
          pattern: '^[A-Za-z_][A-Za-z0-9_]*$',
          description: `the environment variable holding the secret every gateway of the project shares (at least ${DEFAULT_GATEWAY_FORWARD.min_secret_chars} characters)`,
        },
      },
    },
  },
} as const;

/** arium.json's `store`, as the schema above admits it. */
export interface StoreConfig {
  nats: { servers: string | string[]; credentials?: CredentialRefs; tls?: { ca_file?: string; cert_file?: string; key_file?: string } };
  name?: string;
  replicas?: 1 | 3;
  lease_ms?: number;
  forward?: { secret_env: string };
}

/** A setting of `store` that cannot be used: what is wrong, and the field. */
export class StoreConfigError extends Error {
  override readonly name = 'StoreConfigError';
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
  }
}

/** Where and as whom the store of arium.json's `store` is reached: the servers, credentials and TLS, and the project's name there. */
export interface StoreSettings {
  name: string;
  servers: string[];
  auth: NatsSettings['auth'];
  tls: NatsSettings['tls'];
  replicas: 1 | 3;
  leaseMs: number;
}

/** arium.json's `store` with its secrets read from `env` and files under `projectDir`. */
export function storeSettings(
  config: StoreConfig,
  project: string,
  env: Readonly<Record<string, string | undefined>>,
  projectDir: string,
): StoreSettings {
  const name = config.name ?? project;
  if (!STORE_NAME.test(name)) {
    throw new StoreConfigError(
      `The project's folder name "${project}" cannot name it in JetStream (1 to 64 letters, digits, "_" or "-"): set store.name`,
      'store.name',
    );
  }
  let settings: NatsSettings;
  try {
    settings = checkSettings(
      {
        servers: typeof config.nats.servers === 'string' ? [config.nats.servers] : [...config.nats.servers],
        deployment: 'default',
        auth: resolveAuth(config.nats.credentials, env, projectDir, 'arium.json store.nats.credentials'),
        tls: config.nats.tls ? Object.fromEntries(Object.entries(config.nats.tls).map(([k, v]) => [k, resolve(projectDir, v)])) : null,
      },
      'arium.json store.nats',
    );
  } catch (error) {
    throw new StoreConfigError((error as Error).message, 'store.nats');
  }
  return {
    name,
    servers: settings.servers,
    auth: settings.auth,
    tls: settings.tls,
    replicas: config.replicas ?? 1,
    leaseMs: config.lease_ms ?? DEFAULT_JETSTREAM_STORE.lease_ms,
  };
}

/** Opens the store arium.json's `store` names, with its secrets read from `env` and files under `projectDir`. */
export function openConfiguredStore(
  config: StoreConfig,
  project: string,
  env: Readonly<Record<string, string | undefined>>,
  projectDir: string,
): JetStreamStore {
  return new JetStreamStore(storeSettings(config, project, env, projectDir));
}
