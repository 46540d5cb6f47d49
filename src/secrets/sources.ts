import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { MIN_SECRET_LENGTH } from './scrub.js';

/**
 * Where a secret's value comes from. arium.json names sources, never values: an environment variable
 * of the engine's process or a file (relative to the project). Code may also hand a value to
 * `createEngine` directly.
 */
export type SecretSource = { env: string } | { file: string } | { value: string };

export const SECRET_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

export class SecretConfigError extends Error {
  override readonly name = 'SecretConfigError';
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
  }
}

/** A secret as the engine holds it: its value, or why it has none (said when a call asks for it). */
export type ResolvedSecret = { ok: true; value: string } | { ok: false; problem: string };

/** The JSON Schema of arium.json's `secrets`. */
export const SECRETS_SCHEMA = {
  type: 'object',
  propertyNames: { pattern: SECRET_NAME.source },
  additionalProperties: {
    oneOf: [
      {
        type: 'object',
        additionalProperties: false,
        required: ['env'],
        properties: { env: { type: 'string', minLength: 1, description: 'an environment variable of the engine' } },
      },
      {
        type: 'object',
        additionalProperties: false,
        required: ['file'],
        properties: { file: { type: 'string', minLength: 1, description: 'a file holding the value, relative to the project' } },
      },
    ],
  },
  description: 'secrets tools may use by reference ({"$secret": "NAME"}), by source: {"env": "VAR"} or {"file": "path"}; never values',
} as const;

/** Reads every secret's value once, at engine start. */
export function resolveSecrets(
  sources: ReadonlyMap<string, SecretSource>,
  projectDir: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Map<string, ResolvedSecret> {
  const out = new Map<string, ResolvedSecret>();
  for (const [name, source] of sources) {
    let value: string | undefined;
    let where: string;
    if ('value' in source) {
      value = source.value;
      where = 'the value given to createEngine';
    } else if ('env' in source) {
      value = env[source.env];
      where = `environment variable ${source.env}`;
      if (value === undefined) {
        out.set(name, { ok: false, problem: `secret "${name}" comes from ${where}, which is not set in the engine's environment` });
        continue;
      }
    } else {
      const path = isAbsolute(source.file) ? source.file : resolve(projectDir, source.file);
      where = `file ${path}`;
      try {
        // One trailing newline is how editors and `echo` end a file; it is not part of the value.
        value = readFileSync(path, 'utf8').replace(/\r?\n$/, '');
      } catch (error) {
        out.set(name, {
          ok: false,
          problem: `secret "${name}" comes from ${where}, which cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
        });
        continue;
      }
    }
    if (value.length < MIN_SECRET_LENGTH) {
      out.set(name, {
        ok: false,
        problem: `secret "${name}" (from ${where}) is shorter than ${MIN_SECRET_LENGTH} characters: too short to be scrubbed from outputs reliably`,
      });
      continue;
    }
    out.set(name, { ok: true, value });
  }
  return out;
}

/** arium.json's `secrets` and the `secrets` option of createEngine (which wins name by name). */
export function secretSources(fromConfig: unknown, fromOptions: unknown): Map<string, SecretSource> {
  const out = new Map<string, SecretSource>();
  const add = (record: unknown, field: string, values: boolean) => {
    if (record === undefined) return;
    if (record === null || typeof record !== 'object' || Array.isArray(record)) throw new SecretConfigError(`${field} must be an object`, field);
    for (const [name, source] of Object.entries(record)) {
      if (!SECRET_NAME.test(name)) {
        throw new SecretConfigError(
          `${field}: "${name}" is not a secret name (a letter, then letters, digits, _ or -; at most 64)`,
          `${field}.${name}`,
        );
      }
      if (values && typeof source === 'string') out.set(name, { value: source });
      else if (source && typeof source === 'object' && typeof (source as { env?: unknown }).env === 'string')
        out.set(name, { env: (source as { env: string }).env });
      else if (source && typeof source === 'object' && typeof (source as { file?: unknown }).file === 'string')
        out.set(name, { file: (source as { file: string }).file });
      else
        throw new SecretConfigError(
          `${field}.${name} must be {"env": "VAR"} or {"file": "path"}${values ? ' or the value as a string' : ''}`,
          `${field}.${name}`,
        );
    }
  };
  add(fromConfig, 'secrets', false);
  add(fromOptions, 'secrets', true);
  return out;
}
