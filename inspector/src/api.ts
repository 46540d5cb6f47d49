/** The gateway's HTTP API as the inspector uses it: the project base, the API key, JSON errors. */

export interface ErrorInfo {
  code: string;
  stage: string;
  message: string;
  retryable?: boolean;
  details?: Record<string, unknown>;
}

export interface ToolInfo {
  id: string;
  name: string;
  description: string;
  runner: string;
  schema: JsonSchema;
  output_schema?: JsonSchema | null;
  permissions: string[];
  examples?: unknown[];
  limits?: Record<string, number> | null;
}

/** A provider as GET /v1/providers shows it. */
export interface ProviderInfo {
  name: string;
  kind: string;
  state: string;
  tools: number;
  restarts: number;
  error?: string;
  details?: Record<string, unknown>;
}

export interface Problem {
  file: string;
  message: string;
  at?: string;
  id?: string;
  stale?: boolean;
  /** Set when the tool loads but this model API cannot take its schema (openai, anthropic, gemini, mcp). */
  vendor?: string;
}

export interface Snapshot {
  id: string;
  at: string;
  label: string | null;
  message: string | null;
  root: string;
  files: number;
  dirs: number;
  bytes: number;
}

export interface DiffFile {
  path: string;
  status: 'added' | 'modified' | 'deleted' | 'renamed';
  from?: string;
  size_before: number;
  size_after: number;
  binary: boolean;
  lines_added: number;
  lines_removed: number;
  patch: string | null;
  note?: string;
}

export interface DiffResult {
  files: DiffFile[];
  stats: { files_changed: number; added: number; modified: number; deleted: number; renamed: number; lines_added: number; lines_removed: number };
  note?: string;
}

export interface FsEntry {
  name: string;
  path: string;
  type: 'file' | 'directory';
  size: number;
}

export interface FsFile {
  at: string;
  path: string;
  size: number;
  sha256: string;
  binary: boolean;
  text: string | null;
  truncated: boolean;
}

export interface ProjectInfo {
  project: string;
  projects: string[];
  read_only: boolean;
  persist: boolean;
}

/** Deliberately loose: schemas come from tool authors and the form reads only what it understands. */
export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema | JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  description?: string;
  title?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  oneOf?: JsonSchema[];
  anyOf?: JsonSchema[];
  allOf?: JsonSchema[];
  $ref?: string;
  additionalProperties?: boolean | JsonSchema;
  [key: string]: unknown;
}

/** An answer with a 4xx/5xx status: the gateway's error envelope when it sent one. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly error: ErrorInfo,
    readonly body: unknown,
  ) {
    super(error.message);
  }
}

const KEY_STORAGE = 'arium.inspector.key';

/** `/p/<project>` when the page is served under a project path, otherwise '' (the default project). */
export function apiBase(pathname: string = location.pathname): string {
  const match = /^\/p\/([^/]+)\//.exec(pathname);
  return match ? `/p/${match[1]}` : '';
}

type KeyListener = (needed: boolean) => void;
const keyListeners = new Set<KeyListener>();

/** Called with `true` when the gateway answered 401: the page asks for a key. */
export function onKeyNeeded(listener: KeyListener): () => void {
  keyListeners.add(listener);
  return () => keyListeners.delete(listener);
}

export function apiKey(): string | null {
  try {
    return sessionStorage.getItem(KEY_STORAGE);
  } catch {
    return null;
  }
}

export function setApiKey(key: string): void {
  sessionStorage.setItem(KEY_STORAGE, key);
  for (const listener of keyListeners) listener(false);
}

export function authHeaders(): Record<string, string> {
  const key = apiKey();
  return key ? { authorization: `Bearer ${key}` } : {};
}

export function keyRejected(): void {
  for (const listener of keyListeners) listener(true);
}

/** Sends a request to the project's API; returns the parsed JSON of a 2xx answer, throws ApiError otherwise. */
export async function api<T>(path: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json', ...authHeaders() };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(apiBase() + path, {
    method: init.method ?? 'GET',
    headers,
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    ...(init.signal ? { signal: init.signal } : {}),
  });
  const text = await response.text();
  let body: unknown = null;
  try {
    body = text === '' ? null : JSON.parse(text);
  } catch {
    body = text;
  }
  if (response.status === 401) keyRejected();
  if (!response.ok) throw new ApiError(response.status, errorOf(body, response.status), body);
  return body as T;
}

/** A tool run answers 200 on failure too (and 4xx for invalid input): both give back the envelope. */
export async function runTool(id: string, input: unknown): Promise<RunEnvelope> {
  try {
    return await api<RunEnvelope>(`/v1/tools/${encodeURIComponent(id)}:run`, { method: 'POST', body: { input } });
  } catch (error) {
    if (error instanceof ApiError && isEnvelope(error.body)) return error.body;
    throw error;
  }
}

export interface RunEnvelope {
  ok: boolean;
  tool_id: string | null;
  tool_run_id: string | null;
  output?: unknown;
  error?: ErrorInfo;
  meta?: { trace_id?: string | null; duration_ms?: number };
}

function isEnvelope(body: unknown): body is RunEnvelope {
  return typeof body === 'object' && body !== null && 'ok' in body && (body as { ok: unknown }).ok === false && 'error' in body;
}

function errorOf(body: unknown, status: number): ErrorInfo {
  if (typeof body === 'object' && body !== null && 'error' in body) {
    const error = (body as { error: unknown }).error;
    if (typeof error === 'object' && error !== null && 'message' in error) return error as ErrorInfo;
  }
  return { code: `HTTP_${status}`, stage: 'transport', message: typeof body === 'string' && body !== '' ? body.slice(0, 500) : `HTTP ${status}` };
}

/** A query string from the defined values. */
export function query(params: Record<string, string | number | boolean | undefined | null>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  const text = search.toString();
  return text ? `?${text}` : '';
}

export function describeError(error: unknown): string {
  if (error instanceof ApiError) return `${error.error.code}: ${error.error.message}`;
  return error instanceof Error ? error.message : String(error);
}
