import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

/**
 * `system.exec`'s part of arium.json (`"exec"`), checked by the engine against EXEC_CONFIG_SCHEMA, and
 * every limit of a system.exec call in one place. Which programs may run is decided here, once, when
 * the engine starts: each allowlisted name is resolved to an absolute path on the host.
 */

export interface ExecLimits {
  /** Bytes of stdout, and again of stderr, kept in the result; the rest is counted and dropped. */
  output_bytes: number;
  /** Address space of each process of the call (RLIMIT_AS). */
  memory_mb: number;
  /** Processes the call's uid may have at once (RLIMIT_NPROC): a fork bomb stops here. */
  processes: number;
  /** Bytes of files the call may bring back into the VFS in all; past it the call fails OUTPUT_LIMIT. */
  copy_back_bytes: number;
  /** Largest file the program may write (RLIMIT_FSIZE); one over it is not brought back. */
  file_bytes: number;
  /** Open files per process (RLIMIT_NOFILE). */
  open_files: number;
  /** Size of the call's /tmp (a tmpfs, in memory). */
  tmp_bytes: number;
  /** Entries (files, folders, deletions) the program may leave below cwd; past it the call fails OUTPUT_LIMIT. */
  copy_back_entries: number;
}

export const DEFAULT_EXEC_LIMITS: Readonly<ExecLimits> = Object.freeze({
  output_bytes: 256 * 1024,
  memory_mb: 1024,
  processes: 64,
  copy_back_bytes: 64 * 1024 * 1024,
  file_bytes: 16 * 1024 * 1024,
  open_files: 256,
  tmp_bytes: 64 * 1024 * 1024,
  copy_back_entries: 100_000,
});

export interface ExecConfig {
  allow?: string[];
  bwrap?: string;
  limits?: Partial<ExecLimits>;
}

const limitProperties = Object.fromEntries(
  Object.entries(DEFAULT_EXEC_LIMITS).map(([key, value]) => [key, { type: 'integer', minimum: 1, description: `default ${value}` }]),
);

export const EXEC_CONFIG_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  description: 'system.exec: the programs it may run (names looked up on PATH at start, or absolute paths), and its limits',
  properties: {
    allow: {
      type: 'array',
      items: { type: 'string', minLength: 1, maxLength: 4096, pattern: '^[^\\u0000]+$' },
      uniqueItems: true,
      description: 'programs system.exec may run, e.g. ["python3", "git", "/usr/bin/cc"]',
    },
    bwrap: { type: 'string', minLength: 1, description: 'the bubblewrap program (default bwrap on PATH)' },
    limits: { type: 'object', additionalProperties: false, properties: limitProperties },
  },
} as const;

/** One allowlisted program as the engine found it at start. */
export interface AllowedProgram {
  /** As written in arium.json. */
  listed: string;
  /** The absolute path it runs, or null when it was not found (calls naming it fail MISCONFIGURED). */
  path: string | null;
  /** Why it was not found. */
  problem?: string;
}

export interface ExecSettings {
  programs: AllowedProgram[];
  bwrap: string;
  limits: ExecLimits;
}

/** The search path of names: the engine's PATH, or the usual folders when it has none. */
function searchPath(): string[] {
  const path = process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin';
  return path.split(delimiter).filter((dir) => isAbsolute(dir));
}

function executable(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * A name without "/" is looked up in the engine's PATH, as a shell would, and the first executable
 * file found is it (the path as found, links not followed: /usr/bin/cc stays cc). A path is taken as
 * is, relative to the project folder. Note that a shim (pyenv's `python3`) is itself a script that
 * needs its manager's files: list the real interpreter's path instead.
 */
export function resolveProgram(listed: string, projectDir: string): AllowedProgram {
  if (listed.includes('/')) {
    const path = resolve(projectDir, listed);
    return executable(path) ? { listed, path } : { listed, path: null, problem: `${path} is not an executable file` };
  }
  for (const dir of searchPath()) {
    const path = join(dir, listed);
    if (executable(path)) return { listed, path };
  }
  return { listed, path: null, problem: `${listed} was not found on PATH (${searchPath().join(delimiter)})` };
}

export function execSettings(config: ExecConfig | undefined, projectDir: string): ExecSettings {
  return {
    programs: (config?.allow ?? []).map((listed) => resolveProgram(listed, projectDir)),
    bwrap: config?.bwrap ?? 'bwrap',
    limits: { ...DEFAULT_EXEC_LIMITS, ...config?.limits },
  };
}

/**
 * The program `argv0` names, when the allowlist has it: by the name it was listed under, or by its
 * absolute path (as listed or as a name resolved). Undefined: not allowed.
 */
export function allowedProgram(settings: ExecSettings, argv0: string): AllowedProgram | undefined {
  return settings.programs.find((p) => p.listed === argv0 || (p.path !== null && p.path === argv0));
}
