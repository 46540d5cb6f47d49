/**
 * A small, strict argument parser: every flag a command accepts is declared, an unknown flag is an
 * error that names the flags that exist, and a flag that needs a value says so.
 */

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export interface FlagSpec {
  /** Takes a value (`--project demo` or `--project=demo`); otherwise a boolean switch. */
  value?: boolean;
  /** May be given more than once; values collect in order. */
  repeat?: boolean;
}

export interface Parsed {
  positionals: string[];
  flags: Map<string, string | boolean | string[]>;
}

export const GLOBAL_FLAGS: Readonly<Record<string, FlagSpec>> = {
  workspace: { value: true },
  project: { value: true },
  json: {},
  grant: { value: true, repeat: true },
  'no-color': {},
  recover: {},
  help: {},
};

export function parseArgs(argv: readonly string[], spec: Readonly<Record<string, FlagSpec>>): Parsed {
  const all: Record<string, FlagSpec> = { ...GLOBAL_FLAGS, ...spec };
  const positionals: string[] = [];
  const flags = new Map<string, string | boolean | string[]>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg === '-h') {
      flags.set('help', true);
      continue;
    }
    if (!arg.startsWith('--') || arg === '-') {
      if (arg.startsWith('-') && arg !== '-') throw new UsageError(`Unknown option ${arg}; options are written --name (see --help)`);
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const def = all[name];
    if (!def) {
      const known = Object.keys(all)
        .map((k) => `--${k}`)
        .join(', ');
      throw new UsageError(`Unknown option --${name}; this command accepts ${known}`);
    }
    let value: string | boolean = true;
    if (def.value) {
      if (eq !== -1) value = arg.slice(eq + 1);
      else {
        const next = argv[i + 1];
        if (next === undefined || next.startsWith('--')) throw new UsageError(`Option --${name} needs a value`);
        value = next;
        i++;
      }
      if (value === '') throw new UsageError(`Option --${name} needs a non-empty value`);
    } else if (eq !== -1) {
      throw new UsageError(`Option --${name} is a switch and takes no value`);
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

export function int(parsed: Parsed, name: string): number | undefined {
  const v = str(parsed, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1) throw new UsageError(`Option --${name} needs a positive whole number (got "${v}")`);
  return Number(v);
}
