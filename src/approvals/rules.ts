/**
 * Which calls need a person's approval: the `approvals` rules of arium.json, compiled once. A rule names
 * a tool id or an id pattern and, optionally, conditions on the call's input. Rules are keyed on the tool
 * id, the one name a definition cannot change without becoming another tool (a display name can).
 */

import { globToRegExp } from '../permissions.js';
import { normalizePath } from '../vfs/path.js';

/** One condition on one input field; exactly one of the four. */
export interface ApprovalCondition {
  /** The field equals this JSON value (deep equality). */
  equals?: unknown;
  /** The field is a string that starts with this text. */
  prefix?: string;
  /** The field is a string this regular expression (JavaScript syntax, `u` flag) finds a match in. */
  pattern?: string;
  /**
   * The field is a VFS path that, normalized as the VFS reads it (`//etc/./x` is `/etc/x`), matches this
   * glob (the syntax of permission scopes: `/etc/**`, `/data/*.csv`). A path the VFS would refuse counts
   * as a match: the call then asks, and fails on its path only if approved.
   */
  glob?: string;
}

export interface ApprovalRule {
  /** A tool id, or a pattern where `*` matches any run of characters (`system.*`, `*`). */
  tool: string;
  /**
   * Conditions on the input, all of which must hold: each key is a JSON pointer into the input
   * (`/options/mode`), or a top-level field name (`path` is short for `/path`). Absent: every call.
   */
  when?: Record<string, ApprovalCondition>;
}

/** `approvals` in arium.json. */
export interface ApprovalsConfig {
  rules?: ApprovalRule[];
  /** How long a call waits for an answer before it fails with `APPROVAL_TIMEOUT`. */
  timeout_ms?: number;
}

/** A rule that matched a call, as events show it. */
export interface MatchedRule {
  /** Its position in `approvals.rules`. */
  index: number;
  tool: string;
  when?: Record<string, ApprovalCondition>;
}

/** A rule that cannot be compiled, with the arium.json field it is in. */
export class ApprovalRuleError extends Error {
  override readonly name = 'ApprovalRuleError';
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
  }
}

type Test = (input: unknown) => boolean;

interface Compiled {
  rule: MatchedRule;
  tool: RegExp;
  tests: Test[];
}

/** The compiled rules; `match` is null-returning and never throws. */
export class ApprovalRules {
  readonly #rules: Compiled[];

  constructor(rules: readonly ApprovalRule[] = []) {
    if (!Array.isArray(rules))
      throw new ApprovalRuleError('approvals.rules must be an array of rules such as { "tool": "fs.delete" }', 'approvals.rules');
    this.#rules = rules.map((rule, index) => compile(rule, index));
  }

  get size(): number {
    return this.#rules.length;
  }

  /** The first rule that says a call of `toolId` with `input` needs approval, or null. */
  match(toolId: string, input: unknown): MatchedRule | null {
    for (const compiled of this.#rules) {
      if (!compiled.tool.test(toolId)) continue;
      if (compiled.tests.every((test) => safely(test, input))) return compiled.rule;
    }
    return null;
  }
}

function compile(rule: ApprovalRule, index: number): Compiled {
  const at = `approvals.rules.${index}`;
  if (typeof rule?.tool !== 'string' || !/^[a-z0-9_.*-]{1,128}$/.test(rule.tool)) {
    throw new ApprovalRuleError(
      `${at}.tool must be a tool id or a pattern with * (lower-case letters, digits, _ . - *), got ${JSON.stringify(rule?.tool)}`,
      `${at}.tool`,
    );
  }
  const when: unknown = rule.when;
  if (when !== undefined && (typeof when !== 'object' || when === null || Array.isArray(when))) {
    throw new ApprovalRuleError(`${at}.when must be an object of conditions such as { "path": { "glob": "/etc/**" } }`, `${at}.when`);
  }
  const tests: Test[] = [];
  for (const [key, condition] of Object.entries(rule.when ?? {})) {
    const field = `${at}.when.${key}`;
    const pointer = parsePointer(key.startsWith('/') ? key : `/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`, field);
    const kinds = ['equals', 'prefix', 'pattern', 'glob'].filter((k) => condition !== null && typeof condition === 'object' && k in condition);
    if (kinds.length !== 1) {
      throw new ApprovalRuleError(`${field} must have exactly one of equals, prefix, pattern, glob (got ${kinds.join(', ') || 'none'})`, field);
    }
    const read = (input: unknown) => resolvePointer(input, pointer);
    if (kinds[0] === 'equals') {
      const expected = condition.equals;
      tests.push((input) => {
        const value = read(input);
        return value.found && deepEqual(value.value, expected);
      });
    } else if (kinds[0] === 'prefix') {
      const prefix = condition.prefix;
      if (typeof prefix !== 'string') throw new ApprovalRuleError(`${field}.prefix must be a string`, `${field}.prefix`);
      tests.push((input) => {
        const value = read(input);
        return value.found && typeof value.value === 'string' && value.value.startsWith(prefix);
      });
    } else if (kinds[0] === 'glob') {
      const glob = condition.glob;
      if (typeof glob !== 'string' || !glob.startsWith('/')) {
        throw new ApprovalRuleError(`${field}.glob must be an absolute VFS glob such as /etc/** (got ${JSON.stringify(glob)})`, `${field}.glob`);
      }
      const re = globToRegExp(glob);
      tests.push((input) => {
        const value = read(input);
        if (!value.found || typeof value.value !== 'string') return false;
        const path = vfsPath(value.value);
        return path === null || re.test(path);
      });
    } else {
      const source = condition.pattern;
      let re: RegExp;
      try {
        if (typeof source !== 'string') throw new Error('it must be a string');
        re = new RegExp(source, 'u');
      } catch (error) {
        throw new ApprovalRuleError(`${field}.pattern is not a valid regular expression: ${(error as Error).message}`, `${field}.pattern`);
      }
      tests.push((input) => {
        const value = read(input);
        return value.found && typeof value.value === 'string' && re.test(value.value);
      });
    }
  }
  let shown: Record<string, ApprovalCondition> | undefined;
  try {
    shown = rule.when ? (JSON.parse(JSON.stringify(rule.when)) as Record<string, ApprovalCondition>) : undefined;
  } catch (error) {
    throw new ApprovalRuleError(`${at}.when must be plain JSON: ${(error as Error).message}`, `${at}.when`);
  }
  const matched: MatchedRule = { index, tool: rule.tool, ...(shown ? { when: shown } : {}) };
  return { rule: matched, tool: idPattern(rule.tool), tests };
}

const NO_LIMITS = { max_path_length: Number.POSITIVE_INFINITY, max_name_length: Number.POSITIVE_INFINITY };

/** The path as the VFS would read it; null when the VFS would refuse it (a rule then asks rather than lets it by). */
function vfsPath(text: string): string | null {
  try {
    return normalizePath(text, NO_LIMITS);
  } catch {
    return null;
  }
}

/** `*` matches any run of characters; everything else is literal (as in a surface profile's `tools`). */
function idPattern(pattern: string): RegExp {
  return new RegExp(`^${pattern.split('*').map(escapeRegExp).join('.*')}$`);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
}

/** RFC 6901: `/a/b~1c` is the segments `a`, `b/c`. */
function parsePointer(pointer: string, field: string): string[] {
  if (pointer === '/' || !pointer.startsWith('/')) {
    throw new ApprovalRuleError(`${field}: "${pointer}" is not a JSON pointer to an input field (e.g. /path or /options/mode)`, field);
  }
  const segments = pointer.slice(1).split('/');
  for (const segment of segments) {
    if (/~[^01]|~$/.test(segment)) throw new ApprovalRuleError(`${field}: "${pointer}" has a ~ that is not ~0 or ~1 (RFC 6901)`, field);
  }
  return segments.map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** Own properties and array items only: `/constructor` or `/__proto__` never reach a prototype. */
function resolvePointer(input: unknown, segments: readonly string[]): { found: boolean; value?: unknown } {
  let current: unknown = input;
  for (const segment of segments) {
    if (Array.isArray(current)) {
      if (!/^(0|[1-9][0-9]*)$/.test(segment) || Number(segment) >= current.length) return { found: false };
      current = current[Number(segment)];
    } else if (current !== null && typeof current === 'object' && Object.hasOwn(current, segment)) {
      current = (current as Record<string, unknown>)[segment];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: current };
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((item, i) => deepEqual(item, b[i]));
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && deepEqual((a as never)[k], (b as never)[k]));
}

/**
 * A condition that throws (it should not: the input is a plain copy) counts as holding: when in doubt a
 * call asks for approval rather than slipping past it.
 */
function safely(test: Test, input: unknown): boolean {
  try {
    return test(input);
  } catch {
    return true;
  }
}
