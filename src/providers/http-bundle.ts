/**
 * An AX domain bundle (the AX Tool Framework's v0.1 format): `manifest.yaml` lists the tools (id,
 * description, the worker's transport, timeout, schema files, egress allowlist), `policies.yaml` the
 * limits the gateway enforces (concurrency, timeouts) and the egress policy. Arium plays the gateway:
 * it reads both, checks them field by field, and fails with the file and the field when one is wrong.
 */
import { readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, relative, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { HTTP_PROVIDER_LIMITS } from '../limits.js';
import { TOOL_ID_PATTERN } from '../registry/meta-schema.js';

export interface BundleTool {
  id: string;
  displayName?: string;
  description?: string;
  /** Where the manifest says the worker is (`transport.base_url`), and the path it runs tools at. */
  baseUrl: string;
  endpoint: string;
  /** The tool's own timeout, else the policies' default; undefined when neither states one. */
  timeoutMs?: number;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  egressAllowlist: string[];
  /** Calls of this tool at once (`per_tool_max_inflight`); undefined: no bound of the bundle's own. */
  maxInflight?: number;
}

export interface Bundle {
  domainId: string;
  version: string;
  tools: BundleTool[];
  /** Calls of all the bundle's tools at once (`concurrency.max_inflight`). */
  maxInflight?: number;
  /** `network.default_egress_policy`: metadata only, as in AX v0.1 (Arium does not run the worker). */
  egressPolicy: 'deny' | 'allow';
}

/** Versions of the format this reader knows. */
const VERSIONS = new Set(['0.1']);
const TOOL_KEYS = new Set([
  'tool_id',
  'display_name',
  'description',
  'transport',
  'timeout_sec',
  'input_schema_ref',
  'output_schema_ref',
  'input_schema',
  'output_schema',
  'egress_allowlist',
]);

export class BundleError extends Error {
  override readonly name = 'BundleError';
}

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function fail(file: string, field: string, message: string): never {
  throw new BundleError(`${file}: ${field} ${message}`);
}

function readBounded(path: string, what: string): string {
  let size: number;
  try {
    size = statSync(path).size;
  } catch (error) {
    throw new BundleError(`${what} ${path} cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  const max = HTTP_PROVIDER_LIMITS.bundle_file_bytes;
  if (size > max) throw new BundleError(`${what} ${path} is ${size} bytes, over the ${max} a bundle file may have`);
  return readFileSync(path, 'utf8');
}

function readYaml(path: string, what: string): unknown {
  const text = readBounded(path, what);
  try {
    // uniqueKeys: a key given twice is a mistake, not "the last one wins"; maxAliasCount bounds alias bombs.
    return parseYaml(text, { uniqueKeys: true, maxAliasCount: 1000, prettyErrors: true });
  } catch (error) {
    throw new BundleError(`${path} is not valid YAML: ${(error as Error).message}`);
  }
}

function optionalString(file: string, field: string, value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') fail(file, field, `must be a string, not ${JSON.stringify(value)}`);
  return value;
}

function positive(file: string, field: string, value: unknown, integer: boolean): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    fail(file, field, `must be a positive ${integer ? 'integer' : 'number'}, not ${JSON.stringify(value)}`);
  }
  return value;
}

/** A schema file named by the manifest, relative to the manifest's folder and inside it. */
function readSchema(file: string, field: string, ref: unknown, inline: unknown): Record<string, unknown> | undefined {
  if (ref !== undefined && inline !== undefined) fail(file, field, 'is given both as a file (…_ref) and inline: keep one');
  if (inline !== undefined) {
    if (!isObject(inline)) fail(file, field, 'must be a JSON Schema object');
    return inline;
  }
  if (ref === undefined) return undefined;
  if (typeof ref !== 'string' || ref === '') fail(file, `${field}_ref`, 'must be a path relative to the manifest');
  const base = dirname(file);
  const path = resolve(base, ref);
  const inside = relative(base, path);
  if (isAbsolute(ref) || inside.startsWith('..') || isAbsolute(inside)) {
    fail(file, `${field}_ref`, `"${ref}" leaves the manifest's folder; keep schema files beside the manifest`);
  }
  const text = readBounded(path, `schema file (${field}_ref)`);
  let schema: unknown;
  try {
    schema = JSON.parse(text);
  } catch (error) {
    throw new BundleError(`${path} (${field}_ref of ${file}) is not valid JSON: ${(error as Error).message}`);
  }
  if (!isObject(schema)) fail(file, `${field}_ref`, `"${ref}" must hold a JSON Schema object`);
  return schema;
}

function readTransport(file: string, at: string, value: unknown): { baseUrl: string; endpoint: string } {
  if (!isObject(value)) fail(file, at, 'must be an object { type: "http", base_url, endpoint }');
  for (const key of Object.keys(value)) {
    if (!['type', 'base_url', 'endpoint'].includes(key)) fail(file, `${at}.${key}`, 'is not a transport field (type, base_url, endpoint)');
  }
  if (value.type !== 'http') fail(file, `${at}.type`, `must be "http" (the only transport of AX v0.1), not ${JSON.stringify(value.type)}`);
  const baseUrl = optionalString(file, `${at}.base_url`, value.base_url);
  if (baseUrl === undefined) fail(file, `${at}.base_url`, 'is required (the worker\'s URL, e.g. "http://tool-firecrawl:8080")');
  checkHttpUrl(`${file}: ${at}.base_url`, baseUrl);
  const endpoint = optionalString(file, `${at}.endpoint`, value.endpoint) ?? '/run';
  if (!endpoint.startsWith('/') || /[?#\s]/.test(endpoint)) fail(file, `${at}.endpoint`, `must be a path beginning with "/", not "${endpoint}"`);
  return { baseUrl, endpoint };
}

export function checkHttpUrl(where: string, value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new BundleError(`${where} is not a URL: "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new BundleError(`${where} must be an http:// or https:// URL, not "${value}"`);
  if (url.username || url.password) throw new BundleError(`${where} must not carry credentials; put them in the provider's "headers" as secrets`);
  if (url.search || url.hash) throw new BundleError(`${where} must not have a query or fragment: "${value}"`);
  return url;
}

function readTool(file: string, at: string, raw: unknown, defaultTimeoutMs: number | undefined): BundleTool {
  if (!isObject(raw)) fail(file, at, 'must be an object with tool_id, transport and input_schema_ref');
  for (const key of Object.keys(raw)) {
    if (!TOOL_KEYS.has(key)) fail(file, `${at}.${key}`, `is not a tool field (known: ${[...TOOL_KEYS].join(', ')})`);
  }
  const id = optionalString(file, `${at}.tool_id`, raw.tool_id);
  if (id === undefined) fail(file, `${at}.tool_id`, 'is required');
  if (id.length > 96 || !new RegExp(TOOL_ID_PATTERN).test(id)) {
    fail(file, `${at}.tool_id`, `"${id}" must be lower case letters, digits, "_" and "-" in dot-separated parts (at most 96 characters)`);
  }
  const where = `${at} (${id})`;
  const timeoutSec = positive(file, `${where}.timeout_sec`, raw.timeout_sec, false);
  const inputSchema = readSchema(file, `${where}.input_schema`, raw.input_schema_ref, raw.input_schema);
  if (inputSchema === undefined)
    fail(file, `${where}.input_schema_ref`, 'is required: the engine validates every input against it before the worker sees it');
  const egress = raw.egress_allowlist ?? [];
  if (!Array.isArray(egress) || egress.some((e) => typeof e !== 'string' || !/^[^\s:/]+:\d{1,5}$/.test(e))) {
    fail(file, `${where}.egress_allowlist`, 'must be a list of "host:port" strings, e.g. "api.firecrawl.dev:443"');
  }
  const outputSchema = readSchema(file, `${where}.output_schema`, raw.output_schema_ref, raw.output_schema);
  const displayName = optionalString(file, `${where}.display_name`, raw.display_name);
  const description = optionalString(file, `${where}.description`, raw.description);
  return {
    id,
    ...readTransport(file, `${where}.transport`, raw.transport),
    ...(displayName === undefined ? {} : { displayName }),
    ...(description === undefined ? {} : { description }),
    ...(timeoutSec !== undefined
      ? { timeoutMs: Math.round(timeoutSec * 1000) }
      : defaultTimeoutMs !== undefined
        ? { timeoutMs: defaultTimeoutMs }
        : {}),
    inputSchema,
    ...(outputSchema === undefined ? {} : { outputSchema }),
    egressAllowlist: egress as string[],
  };
}

interface Policies {
  maxInflight?: number;
  perTool: Map<string, number>;
  defaultTimeoutMs?: number;
  egressPolicy: 'deny' | 'allow';
}

function section(file: string, raw: Obj, key: string, keys: string[]): Obj {
  const value = raw[key];
  if (value === undefined || value === null) return {};
  if (!isObject(value)) fail(file, key, 'must be a mapping');
  for (const k of Object.keys(value)) if (!keys.includes(k)) fail(file, `${key}.${k}`, `is not a ${key} field (known: ${keys.join(', ')})`);
  return value;
}

function readPolicies(file: string | undefined): Policies {
  if (file === undefined) return { perTool: new Map(), egressPolicy: 'deny' };
  const raw = readYaml(file, 'policies file') ?? {};
  if (!isObject(raw)) fail(file, 'the document', 'must be a mapping (concurrency, timeouts, network, logging)');
  for (const key of Object.keys(raw)) {
    if (!['concurrency', 'timeouts', 'network', 'logging'].includes(key))
      fail(file, key, 'is not a policies section (concurrency, timeouts, network, logging)');
  }
  const concurrency = section(file, raw, 'concurrency', ['max_inflight', 'per_tool_max_inflight']);
  const timeouts = section(file, raw, 'timeouts', ['default_tool_timeout_sec']);
  const network = section(file, raw, 'network', ['default_egress_policy']);
  // logging says what the AX gateway writes to its own log; Arium's events and audit log take its place.
  section(file, raw, 'logging', ['level', 'include_request_body']);
  const perTool = new Map<string, number>();
  const per = concurrency.per_tool_max_inflight ?? {};
  if (!isObject(per)) fail(file, 'concurrency.per_tool_max_inflight', 'must map tool ids to positive integers');
  for (const [id, n] of Object.entries(per)) {
    perTool.set(id, positive(file, `concurrency.per_tool_max_inflight.${id}`, n, true) as number);
  }
  const policy = network.default_egress_policy ?? 'deny';
  if (policy !== 'deny' && policy !== 'allow')
    fail(file, 'network.default_egress_policy', `must be "deny" or "allow", not ${JSON.stringify(policy)}`);
  const maxInflight = positive(file, 'concurrency.max_inflight', concurrency.max_inflight, true);
  const defaultSec = positive(file, 'timeouts.default_tool_timeout_sec', timeouts.default_tool_timeout_sec, false);
  return {
    ...(maxInflight === undefined ? {} : { maxInflight }),
    perTool,
    ...(defaultSec === undefined ? {} : { defaultTimeoutMs: Math.round(defaultSec * 1000) }),
    egressPolicy: policy,
  };
}

/** Reads and checks a bundle; throws a `BundleError` naming the file and field at the first problem. */
export function readBundle(manifestPath: string, policiesPath: string | undefined): Bundle {
  const policies = readPolicies(policiesPath);
  const raw = readYaml(manifestPath, 'manifest');
  const file = manifestPath;
  if (!isObject(raw)) fail(file, 'the document', 'must be a mapping with domain_id, version and tools');
  for (const key of Object.keys(raw))
    if (!['domain_id', 'version', 'tools'].includes(key)) fail(file, key, 'is not a manifest field (domain_id, version, tools)');
  const domainId = optionalString(file, 'domain_id', raw.domain_id);
  if (!domainId) fail(file, 'domain_id', 'is required (a non-empty string)');
  // YAML reads an unquoted 0.1 as a number.
  const version = typeof raw.version === 'number' ? String(raw.version) : raw.version;
  if (typeof version !== 'string' || !VERSIONS.has(version)) {
    fail(file, 'version', `${JSON.stringify(raw.version)} is not a version this engine reads (${[...VERSIONS].join(', ')})`);
  }
  if (!Array.isArray(raw.tools) || raw.tools.length === 0) fail(file, 'tools', 'must be a non-empty list');
  const tools: BundleTool[] = [];
  const seen = new Set<string>();
  raw.tools.forEach((entry, i) => {
    const tool = readTool(file, `tools[${i}]`, entry, policies.defaultTimeoutMs);
    if (seen.has(tool.id)) fail(file, `tools[${i}].tool_id`, `"${tool.id}" is listed twice`);
    seen.add(tool.id);
    const max = policies.perTool.get(tool.id);
    tools.push(max === undefined ? tool : { ...tool, maxInflight: max });
  });
  for (const id of policies.perTool.keys()) {
    if (!seen.has(id))
      fail(policiesPath as string, `concurrency.per_tool_max_inflight.${id}`, `names no tool of the manifest (${[...seen].join(', ')})`);
  }
  return {
    domainId,
    version,
    tools,
    ...(policies.maxInflight === undefined ? {} : { maxInflight: policies.maxInflight }),
    egressPolicy: policies.egressPolicy,
  };
}
