/**
 * A small, strict argument parser: every flag a command accepts is declared, an unknown flag is an
 * error that suggests the closest known one, and a flag that needs a value says so. No framework:
 * the CLI has a dozen flags, and a strict parser keeps a typo from silently doing something else.
 */

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export interface FlagSpec {
  /** Takes a value (`--project demo` or `--project=demo`); otherwise a boolean switch. */
  value?: boolean;
  /** May be given more than once; values collect in order. */
  repeat?: boolean;
  /** The value's placeholder in help, e.g. `<dir>`. */
  arg?: string;
  /** One line for `--help`. */
  help: string;
}

export type FlagSpecs = Readonly<Record<string, FlagSpec>>;

export interface Parsed {
  positionals: string[];
  flags: Map<string, string | boolean | string[]>;
}

export const GLOBAL_FLAGS: FlagSpecs = {
  workspace: { value: true, arg: '<dir>', help: 'folder holding the projects (default ./workspace)' },
  project: { value: true, arg: '<name>', help: 'project folder in the workspace (default demo)' },
  grant: { value: true, repeat: true, arg: '<perm>', help: 'grant a permission, e.g. vfs.read:/docs/** (repeatable; replaces the default grants)' },
  json: { help: 'machine output: exactly one JSON document on stdout, whatever happens' },
  'no-color': { help: 'no colours (also when NO_COLOR is set or stdout is not a terminal)' },
  recover: { help: 'open a damaged state folder, keeping what is intact (in this process, never the daemon)' },
  'no-daemon': { help: 'run in this process even when the workspace’s daemon answers (also ARIUM_NO_DAEMON=1)' },
  help: { help: 'show help for the command' },
};

export function parseArgs(argv: readonly string[], spec: FlagSpecs): Parsed {
  const all: FlagSpecs = { ...GLOBAL_FLAGS, ...spec };
  const positionals: string[] = [];
  const flags = new Map<string, string | boolean | string[]>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--') {
      // Everything after `--` is positional, so a JSON input may start with a dash.
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg === '-h') {
      flags.set('help', true);
      continue;
    }
    if (arg === '-' || !arg.startsWith('-')) {
      positionals.push(arg);
      continue;
    }
    if (!arg.startsWith('--')) throw new UsageError(`Unknown option ${arg}: options are written --name (see --help)`);
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const def = Object.hasOwn(all, name) ? all[name] : undefined;
    if (!def) throw new UsageError(unknownFlag(name, Object.keys(all)));
    let value: string | boolean = true;
    if (def.value) {
      if (eq !== -1) value = arg.slice(eq + 1);
      else {
        const next = argv[i + 1];
        if (next === undefined || next.startsWith('--')) throw new UsageError(`Option --${name} needs a value: --${name} ${def.arg ?? '<value>'}`);
        value = next;
        i++;
      }
      if (value === '') throw new UsageError(`Option --${name} needs a non-empty value`);
    } else if (eq !== -1) {
      throw new UsageError(`Option --${name} is a switch and takes no value (got --${name}=${arg.slice(eq + 1)})`);
    }
    if (def.repeat) {
      const list = (flags.get(name) as string[] | undefined) ?? [];
      list.push(value as string);
      flags.set(name, list);
    } else {
      if (flags.has(name)) throw new UsageError(`Option --${name} is given twice`);
      flags.set(name, value);
    }
  }
  return { positionals, flags };
}

function unknownFlag(name: string, known: readonly string[]): string {
  const near = closest(name, known);
  const hint = near ? `did you mean --${near}? ` : '';
  return `Unknown option --${name}; ${hint}this command accepts ${known.map((k) => `--${k}`).join(', ')}`;
}

/** The known name within edit distance 2 of `word` (typos like --colour, --workspce), if any. */
export function closest(word: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const candidate of known) {
    const d = distance(word, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, (previous[j - 1] as number) + cost));
    }
    previous = row;
  }
  return previous[b.length] as number;
}

export function str(parsed: Parsed, name: string): string | undefined {
  const v = parsed.flags.get(name);
  return typeof v === 'string' ? v : undefined;
}

export function bool(parsed: Parsed, name: string): boolean {
  return parsed.flags.get(name) === true;
}

export function list(parsed: Parsed, name: string): string[] | undefined {
  const v = parsed.flags.get(name);
  return Array.isArray(v) ? v : undefined;
}

export function int(parsed: Parsed, name: string, min = 1): number | undefined {
  const v = str(parsed, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) {
    throw new UsageError(`Option --${name} needs a whole number${min > 0 ? ` of at least ${min}` : ''} (got "${v}")`);
  }
  return Number(v);
}

/** Refuses positionals past `max`, naming them. */
export function maxPositionals(parsed: Parsed, max: number, usage: string): void {
  const extra = parsed.positionals.slice(max);
  if (extra.length > 0)
    throw new UsageError(`Unexpected argument${extra.length > 1 ? 's' : ''} ${extra.map((e) => `"${e}"`).join(' ')}; usage: ${usage}`);
}
