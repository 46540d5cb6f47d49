// arium.json's `remote`: which tools run on workers over NATS and how the engine reaches them. It is
// the engine's own section, not a runner's key: config.ts checks it with the rest of arium.json, and
// runners/remote reads it (settings.ts turns it into NATS settings and credentials).

/** A deployment's name: a token of every subject (arium.<deployment>.…). */
export const DEPLOYMENT = /^[A-Za-z0-9_-]{1,64}$/;

/** The `remote.credentials` of arium.json, or the worker's flags: each secret by reference. */
export interface CredentialRefs {
  user?: string;
  password_env?: string;
  password_file?: string;
  token_env?: string;
  token_file?: string;
  nkey_seed_file?: string;
}

/** The JSON Schema of arium.json's `remote` (also the docs of each field). */
export const REMOTE_CONFIG_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['nats'],
  description: 'run some tools on workers reached over NATS (README "Remote runners (NATS)")',
  properties: {
    nats: {
      oneOf: [
        { type: 'string', minLength: 1 },
        { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1 },
      ],
      description: 'the NATS server URL(s), e.g. nats://10.0.0.5:4222; no credentials in it',
    },
    deployment: { type: 'string', pattern: DEPLOYMENT.source, description: 'subjects are arium.<deployment>.…; default "default"' },
    runners: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true, description: 'every tool of these runners runs remotely' },
    tools: {
      type: 'array',
      items: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[a-z0-9_.*-]+$' },
      uniqueItems: true,
      description: 'tool ids or patterns with * that run remotely (JS and Python tools)',
    },
    credentials: {
      type: 'object',
      additionalProperties: false,
      properties: {
        user: { type: 'string', minLength: 1 },
        password_env: { type: 'string', minLength: 1, description: 'environment variable holding the password' },
        password_file: { type: 'string', minLength: 1, description: 'file holding the password' },
        token_env: { type: 'string', minLength: 1 },
        token_file: { type: 'string', minLength: 1 },
        nkey_seed_file: { type: 'string', minLength: 1, description: 'file holding the nkey seed (SU…)' },
      },
    },
    tls: {
      type: 'object',
      additionalProperties: false,
      properties: {
        ca_file: { type: 'string', minLength: 1 },
        cert_file: { type: 'string', minLength: 1 },
        key_file: { type: 'string', minLength: 1 },
      },
    },
    keepalive_ms: {
      type: 'integer',
      minimum: 20,
      maximum: 60000,
      description: 'a worker says it is alive this often during a call; 3 missed: transport error (default 1000)',
    },
    accept_ms: {
      type: 'integer',
      minimum: 50,
      maximum: 60000,
      description: 'how long the worker that took a call has to send its first message about it (default 2000)',
    },
    events: { type: 'boolean', description: 'also publish every event on arium.<deployment>.events (default false)' },
  },
} as const;

/** arium.json's `remote`, as the schema above admits it. */
export interface RemoteConfig {
  nats: string | string[];
  deployment?: string;
  runners?: string[];
  tools?: string[];
  credentials?: CredentialRefs;
  tls?: { ca_file?: string; cert_file?: string; key_file?: string };
  keepalive_ms?: number;
  accept_ms?: number;
  events?: boolean;
}
