import { EXEC_PERMISSION_PATTERN, PERMISSION_NAMES } from './permissions.js';
import type { RunnerDefinition } from './runner.js';

const RUNNER_NAME = /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/;
const EXTENSION = /^\.[a-z0-9]+(\.[a-z0-9]+)*$/;

/** A runner definition that cannot be used, with what is wrong and how to fix it. */
export class RunnerDefinitionError extends Error {
  override readonly name = 'RunnerDefinitionError';
}

/**
 * The runners an engine knows, by name. Built once from definitions (the defaults, then the caller's,
 * which replace a default of the same name); every part of the engine that depends on which runners
 * exist asks this catalog, so a new runner changes nothing else.
 */
export class RunnerCatalog {
  readonly #byName = new Map<string, RunnerDefinition>();
  readonly #signature: string;

  /** `reservedConfigKeys`: arium.json keys the engine itself reads, which no runner may claim. */
  constructor(definitions: readonly RunnerDefinition[], reservedConfigKeys: readonly string[] = []) {
    for (const definition of definitions) {
      checkDefinition(definition);
      this.#byName.delete(definition.name);
      this.#byName.set(definition.name, definition);
    }
    const permissions = new Map<string, string>();
    const keys = new Map<string, string>(reservedConfigKeys.map((k) => [k, 'the engine']));
    for (const definition of this.#byName.values()) {
      if (definition.permission !== null) {
        const other = permissions.get(definition.permission);
        if (other !== undefined) {
          throw new RunnerDefinitionError(
            `Runners "${other}" and "${definition.name}" both use the permission "${definition.permission}"; each runner needs its own`,
          );
        }
        permissions.set(definition.permission, definition.name);
      }
      for (const key of Object.keys(definition.config ?? {})) {
        const other = keys.get(key);
        if (other !== undefined) {
          throw new RunnerDefinitionError(
            `Runner "${definition.name}" reads the arium.json key "${key}", which ${other === 'the engine' ? other : `runner "${other}"`} reads; choose another key`,
          );
        }
        keys.set(key, definition.name);
      }
    }
    this.#signature = JSON.stringify([this.definable(), this.execPermissions(), this.composite(), [...this.toolFields()]]);
  }

  get(name: string): RunnerDefinition | undefined {
    return this.#byName.get(name);
  }

  /** Every runner, in definition order. */
  list(): RunnerDefinition[] {
    return [...this.#byName.values()];
  }

  names(): string[] {
    return [...this.#byName.keys()];
  }

  /** The runners a project's tool definitions may name. */
  definable(): string[] {
    return this.list()
      .filter((d) => d.definable !== false)
      .map((d) => d.name);
  }

  /** The runners whose tools list `steps` instead of an `entry`. */
  composite(): string[] {
    return this.list()
      .filter((d) => d.composite === true)
      .map((d) => d.name);
  }

  /** The `exec.*` permissions of the runners. */
  execPermissions(): string[] {
    return this.list().flatMap((d) => (d.permission === null ? [] : [d.permission]));
  }

  /** Every permission name a tool may declare or a caller be granted here. */
  permissionNames(): string[] {
    const plain: string[] = PERMISSION_NAMES.filter((n) => !n.startsWith('exec.'));
    return [...plain.filter((n) => n.startsWith('vfs.')), ...this.execPermissions(), ...plain.filter((n) => !n.startsWith('vfs.'))];
  }

  /** The `exec.*` permissions callers get when no grants are named. */
  defaultExecGrants(): string[] {
    return this.list().flatMap((d) => (d.permission !== null && d.grantedByDefault === true ? [d.permission] : []));
  }

  /** The tool definition fields particular runners add: field -> its schema and the runners that take it. */
  toolFields(): Map<string, { schema: Readonly<Record<string, unknown>>; runners: string[] }> {
    const fields = new Map<string, { schema: Readonly<Record<string, unknown>>; runners: string[] }>();
    for (const definition of this.list()) {
      for (const [field, schema] of Object.entries(definition.toolFields ?? {})) {
        const known = fields.get(field);
        if (known) known.runners.push(definition.name);
        else fields.set(field, { schema, runners: [definition.name] });
      }
    }
    return fields;
  }

  /** The arium.json keys the runners read, with their schemas. */
  configSchemas(): Record<string, Readonly<Record<string, unknown>>> {
    return Object.assign({}, ...this.list().map((d) => d.config ?? {}));
  }

  /** A key that tells two catalogs apart for what the registry compiles from them (meta-schema). */
  signature(): string {
    return this.#signature;
  }
}

function checkDefinition(definition: RunnerDefinition): void {
  const where = `Runner definition ${JSON.stringify(definition?.name ?? null)}`;
  if (typeof definition !== 'object' || definition === null) throw new RunnerDefinitionError('A runner definition must be an object');
  if (typeof definition.name !== 'string' || !RUNNER_NAME.test(definition.name) || definition.name.length > 64) {
    throw new RunnerDefinitionError(
      `${where}: "name" must be 1 to 64 lower-case letters, digits and single "-", starting with a letter (e.g. "sh-runner")`,
    );
  }
  if (typeof definition.create !== 'function') throw new RunnerDefinitionError(`${where}: "create" must be a function (setup) => Runner`);
  if (typeof definition.summary !== 'string' || definition.summary.length === 0) {
    throw new RunnerDefinitionError(`${where}: "summary" must say in one line what runs its tools`);
  }
  if (!Array.isArray(definition.extensions) || definition.extensions.some((e) => typeof e !== 'string' || !EXTENSION.test(e))) {
    throw new RunnerDefinitionError(`${where}: "extensions" must list lower-case file extensions with their dot, e.g. [".sh"]`);
  }
  if (definition.definable !== false && definition.composite !== true && definition.extensions.length === 0) {
    throw new RunnerDefinitionError(`${where}: a runner that project tools may name needs at least one entry extension`);
  }
  if (definition.permission !== null && (typeof definition.permission !== 'string' || !EXEC_PERMISSION_PATTERN.test(definition.permission))) {
    throw new RunnerDefinitionError(
      `${where}: "permission" must be null or "exec.<kind>" in lower-case letters, digits and "-" (e.g. "exec.sh"), got ${JSON.stringify(definition.permission)}`,
    );
  }
  for (const [key, schema] of Object.entries(definition.config ?? {})) {
    if (!/^[a-z][a-z0-9_]*$/.test(key) || typeof schema !== 'object' || schema === null) {
      throw new RunnerDefinitionError(`${where}: "config" maps lower-case arium.json keys to JSON Schemas ("${key}" does not)`);
    }
  }
}
