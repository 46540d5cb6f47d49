import { posix } from 'node:path';
import type { Tool } from '../../src/tool.js';

/**
 * What a module starts with, and the limits of what its definition may add. A wasm tool's definition
 * may give `args` (argv after the entry's file name) and `env` (a map of environment variables); the
 * module sees those and nothing else of any process's environment: the sandbox process itself starts
 * with an empty one, and WASI's `environ_get` answers from this list only.
 */
export const WASM_DEFINITION_LIMITS = Object.freeze({
  /** Arguments at most in `args`, after argv[0] (the entry's file name). */
  max_args: 64,
  /** Characters at most in one argument. */
  max_arg_chars: 4096,
  /** Variables at most in `env`. */
  max_env: 64,
  /** Characters at most in a variable's name. */
  max_env_name_chars: 128,
  /** Characters at most in a variable's value. */
  max_env_value_chars: 4096,
});

/** Names of environment variables the engine sets itself (`ARIUM_TOOL`): a definition's `env` may not use the prefix. */
export const RESERVED_ENV_PREFIX = 'ARIUM_';

/** What a module is started with (the `setup` of its calls): its argv, its environment, and the VFS folders it may open. */
export interface WasmSetup {
  args: string[];
  env: string[];
  preopens: string[];
}

/** A wasm tool's definition, with the fields of its own. */
interface WasmToolSpec {
  id: string;
  entry?: string;
  args?: readonly string[];
  env?: Readonly<Record<string, string>>;
}

/** No NUL: a C string ends there, so the module would see less than the definition says. */
const NO_NUL = '^[^\\u0000]*$';

/** The tool definition fields of the wasm runner, with the schemas the registry checks them against. */
export const WASM_TOOL_FIELDS = Object.freeze({
  args: {
    type: 'array',
    maxItems: WASM_DEFINITION_LIMITS.max_args,
    items: { type: 'string', maxLength: WASM_DEFINITION_LIMITS.max_arg_chars, pattern: NO_NUL },
    description: `The module's arguments after argv[0] (the entry's file name): at most ${WASM_DEFINITION_LIMITS.max_args}, each at most ${WASM_DEFINITION_LIMITS.max_arg_chars} characters, no NUL`,
  },
  env: {
    type: 'object',
    maxProperties: WASM_DEFINITION_LIMITS.max_env,
    // One pattern, so that a bad name gets one message naming it (a `not` would only say "must NOT be valid").
    propertyNames: { pattern: `^(?!${RESERVED_ENV_PREFIX})[A-Za-z_][A-Za-z0-9_]*$`, maxLength: WASM_DEFINITION_LIMITS.max_env_name_chars },
    additionalProperties: { type: 'string', maxLength: WASM_DEFINITION_LIMITS.max_env_value_chars, pattern: NO_NUL },
    description: `The module's environment variables, name to value (the only ones it sees, with ARIUM_TOOL): at most ${WASM_DEFINITION_LIMITS.max_env}; names of letters, digits and "_" not starting with a digit or "${RESERVED_ENV_PREFIX}", values at most ${WASM_DEFINITION_LIMITS.max_env_value_chars} characters, no NUL. Callers see the definition: no secrets here`,
  },
});

/**
 * What a module starts with, from its definition only: argv is the entry's file name and then the
 * definition's `args`, the environment names the tool (ARIUM_TOOL) and holds the definition's `env`,
 * and the preopened folders are those its `vfs.read` / `vfs.write` permissions reach (the literal part
 * of each scope; every operation is still checked against the scopes themselves).
 */
export function wasmSetup(tool: Tool): WasmSetup {
  const spec = tool.spec as Readonly<WasmToolSpec>;
  const preopens = new Set<string>();
  for (const permission of tool.declared) {
    if (permission.name !== 'vfs.read' && permission.name !== 'vfs.write') continue;
    if (permission.scope === null) {
      preopens.add('/');
      continue;
    }
    const literal = permission.prefix === permission.scope ? posix.dirname(permission.prefix) : permission.prefix.replace(/\/[^/]*$/, '');
    preopens.add(literal === '' ? '/' : posix.normalize(literal));
  }
  return {
    args: [posix.basename(spec.entry ?? 'tool.wasm'), ...(spec.args ?? [])],
    env: [`ARIUM_TOOL=${spec.id}`, ...Object.entries(spec.env ?? {}).map(([name, value]) => `${name}=${value}`)],
    preopens: [...preopens].sort(),
  };
}
