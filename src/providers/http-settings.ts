/**
 * The settings of an `http` provider in arium.json (`providers.<name>.http`), checked with the JSON
 * pointer of each field in the error.
 */
import { HTTP_PROVIDER_LIMITS } from '../limits.js';
import { BundleError, checkHttpUrl } from './http-bundle.js';

/** A header's value: literal text, or a secret's value (read at start) after an optional literal prefix. */
export type HeaderValue = { text: string } | { secret: string; prefix: string };

export interface HttpSettings {
  /** The worker's base URL; when set it replaces every tool's `transport.base_url` of the manifest. */
  url?: string;
  /** `manifest.yaml`, relative to the project folder. */
  manifest: string;
  /** `policies.yaml`, relative to the project folder; without it no limits beyond the engine's own. */
  policies?: string;
  headers: ReadonlyMap<string, HeaderValue>;
  maxResponseBytes: number;
}

const KEYS = ['url', 'manifest', 'policies', 'headers', 'max_response_bytes'];
/** RFC 9110 §5.6.2 token: what a header name may be. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the provider sets itself, or that would change how the request is framed. */
const RESERVED = new Set([
  'host',
  'content-length',
  'content-type',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'expect',
  'te',
  'trailer',
]);
const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,127}$/;

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function path(raw: unknown, at: string, key: string, required: boolean): string | undefined {
  if (raw === undefined) {
    if (required) throw new Error(`${at}/${key} is required: the path of the domain's ${key}.yaml, relative to the project folder`);
    return undefined;
  }
  if (typeof raw !== 'string' || raw === '') throw new Error(`${at}/${key} must be a file path relative to the project folder`);
  return raw;
}

function headerValue(raw: unknown, at: string): HeaderValue {
  if (typeof raw === 'string') {
    if (/[\r\n\0]/.test(raw)) throw new Error(`${at} must not contain line breaks or NUL`);
    return { text: raw };
  }
  if (isObject(raw) && typeof raw.$secret === 'string') {
    for (const key of Object.keys(raw)) {
      if (key !== '$secret' && key !== 'prefix')
        throw new Error(`${at}/${key} is not a field of a secret reference ({ "$secret": NAME, "prefix"?: "Bearer " })`);
    }
    if (!SECRET_NAME.test(raw.$secret)) throw new Error(`${at}/$secret must name a secret of the project, not ${JSON.stringify(raw.$secret)}`);
    const prefix = raw.prefix ?? '';
    if (typeof prefix !== 'string' || /[\r\n\0]/.test(prefix)) throw new Error(`${at}/prefix must be text without line breaks, e.g. "Bearer "`);
    return { secret: raw.$secret, prefix };
  }
  throw new Error(`${at} must be a string or a secret reference { "$secret": NAME } (with an optional "prefix", e.g. "Bearer ")`);
}

export function parseHttpSettings(raw: unknown, at: string): HttpSettings {
  if (!isObject(raw)) throw new Error(`${at} must be an object { "url", "manifest", "policies", "headers" }`);
  for (const key of Object.keys(raw)) {
    if (!KEYS.includes(key)) throw new Error(`${at}/${key} is not a setting of an http provider (known: ${KEYS.join(', ')})`);
  }
  if (raw.url !== undefined) {
    if (typeof raw.url !== 'string') throw new Error(`${at}/url must be the worker's base URL, e.g. "http://127.0.0.1:8080"`);
    try {
      checkHttpUrl(`${at}/url`, raw.url);
    } catch (error) {
      if (error instanceof BundleError) throw new Error(error.message);
      throw error;
    }
  }
  const headers = new Map<string, HeaderValue>();
  if (raw.headers !== undefined) {
    if (!isObject(raw.headers)) throw new Error(`${at}/headers must map header names to values or secret references`);
    for (const [name, value] of Object.entries(raw.headers)) {
      if (!TOKEN.test(name)) throw new Error(`${at}/headers/${name} is not a valid header name`);
      if (RESERVED.has(name.toLowerCase())) throw new Error(`${at}/headers/${name} is set by the provider itself and cannot be configured`);
      if ([...headers.keys()].some((n) => n.toLowerCase() === name.toLowerCase()))
        throw new Error(`${at}/headers/${name} is given twice (header names ignore case)`);
      headers.set(name, headerValue(value, `${at}/headers/${name}`));
    }
  }
  let maxResponseBytes: number = HTTP_PROVIDER_LIMITS.response_bytes;
  if (raw.max_response_bytes !== undefined) {
    const n = raw.max_response_bytes;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1024 || n > HTTP_PROVIDER_LIMITS.response_bytes) {
      throw new Error(`${at}/max_response_bytes must be an integer from 1024 to ${HTTP_PROVIDER_LIMITS.response_bytes}`);
    }
    maxResponseBytes = n;
  }
  const policies = path(raw.policies, at, 'policies', false);
  return {
    ...(raw.url === undefined ? {} : { url: raw.url as string }),
    manifest: path(raw.manifest, at, 'manifest', true) as string,
    ...(policies === undefined ? {} : { policies }),
    headers,
    maxResponseBytes,
  };
}
