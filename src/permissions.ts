/**
 * Permissions: what a tool declares it needs, what a caller is granted, and the check between them.
 *
 * A permission is a name, optionally with a VFS path scope: `vfs.read`, `vfs.write:/out/**`.
 * - At the gate, every permission a tool declares must be granted under the same name with a scope
 *   that can overlap the declared one. A tool declaring `vfs.write` may run for a caller granted only
 *   `vfs.write:/out/**`; it then may write only below /out.
 * - At run time each VFS operation on a path needs a declared scope *and* a granted scope that match
 *   that path.
 */

/** The permissions of the engine and its default runners (`exec.<kind>` of a runner comes from its definition). */
export const PERMISSION_NAMES = ['vfs.read', 'vfs.write', 'exec.js', 'exec.py', 'sys.exec', 'sys.info', 'net.fetch', 'secret.read'] as const;
export type PermissionName = (typeof PERMISSION_NAMES)[number] | `exec.${string}`;

/**
 * The form of a runner's permission. Parsing accepts any `exec.<kind>`, because which runners exist is
 * the engine's catalog's business: the registry and the engine refuse a kind no runner of theirs has.
 */
export const EXEC_PERMISSION_PATTERN = /^exec\.[a-z][a-z0-9]*(-[a-z0-9]+)*$/;

/** Permissions that accept a `:<glob>` path scope. */
const SCOPED: ReadonlySet<string> = new Set(['vfs.read', 'vfs.write']);
/** `secret.read:NAME` names one secret; `secret.read` alone, every secret. */
const SECRET = 'secret.read';
const SECRET_SCOPE = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const NAMES: ReadonlySet<string> = new Set(PERMISSION_NAMES);

/** What callers get when the engine options name no grants. `sys.exec` and `net.fetch` are never default. */
export const DEFAULT_GRANTS: readonly string[] = Object.freeze(['vfs.read', 'vfs.write', 'exec.js', 'exec.py', 'sys.info']);

export interface Permission {
  name: PermissionName;
  /** Null means every path. */
  scope: string | null;
  /** The literal part of the scope before its first glob character, used for overlap checks. */
  prefix: string;
  matcher: RegExp | null;
  /** The permission as written. */
  text: string;
}

export class PermissionSyntaxError extends Error {
  override readonly name = 'PermissionSyntaxError';
}

const cache = new Map<string, Permission>();

export function parsePermission(text: string): Permission {
  const hit = cache.get(text);
  if (hit) return hit;
  if (typeof text !== 'string' || text.length === 0 || text.length > 1024) {
    throw new PermissionSyntaxError(`Invalid permission ${JSON.stringify(text)}: expected a non-empty string`);
  }
  const colon = text.indexOf(':');
  const name = colon === -1 ? text : text.slice(0, colon);
  if (!NAMES.has(name) && !EXEC_PERMISSION_PATTERN.test(name)) {
    throw new PermissionSyntaxError(
      `Unknown permission "${name}"; known permissions: ${PERMISSION_NAMES.join(', ')}, or exec.<kind> of another runner`,
    );
  }
  let scope: string | null = null;
  if (colon !== -1 && name === SECRET) {
    scope = text.slice(colon + 1);
    if (!SECRET_SCOPE.test(scope)) {
      throw new PermissionSyntaxError(`"${text}" must name one secret: secret.read:NAME (a letter, then letters, digits, _ or -)`);
    }
    const permission: Permission = { name: SECRET, scope, prefix: scope, matcher: new RegExp(`^${scope}$`), text };
    if (cache.size < 10_000) cache.set(text, permission);
    return permission;
  }
  if (colon !== -1) {
    if (!SCOPED.has(name)) throw new PermissionSyntaxError(`Permission "${name}" takes no path scope (got "${text}")`);
    scope = text.slice(colon + 1);
    checkScope(text, scope);
  }
  const permission: Permission = {
    name: name as PermissionName,
    scope,
    prefix: scope === null ? '/' : literalPrefix(scope),
    matcher: scope === null ? null : globToRegExp(scope),
    text,
  };
  if (cache.size < 10_000) cache.set(text, permission);
  return permission;
}

function checkScope(text: string, scope: string): void {
  if (!scope.startsWith('/')) throw new PermissionSyntaxError(`Scope of "${text}" must be an absolute VFS glob such as /docs/**`);
  const segments = scope.split('/');
  if (segments.some((s) => s === '..' || s === '.')) {
    throw new PermissionSyntaxError(`Scope of "${text}" must not contain "." or ".." segments`);
  }
  if (scope.includes('\\') || scope.includes('\u0000')) throw new PermissionSyntaxError(`Scope of "${text}" contains a forbidden character`);
}

function literalPrefix(glob: string): string {
  const i = glob.search(/[*?]/);
  return i === -1 ? glob : glob.slice(0, i);
}

/**
 * `**` matches any number of segments (including none), `*` anything within one segment, `?` one
 * character. `/docs/**` matches `/docs` itself too: a grant of a folder's contents includes the folder.
 */
export function globToRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        i++;
        if (re.endsWith('/') && (i + 1 === glob.length || glob[i + 1] === '/')) {
          // "/**" at the end or "/**/" in the middle: zero or more whole segments.
          re = re.slice(0, -1);
          re += i + 1 === glob.length ? '(?:/.*)?' : '(?:/[^/]+)*';
        } else {
          re += '.*';
        }
      } else {
        re += '[^/]*';
      }
    } else if (c === '?') {
      re += '[^/]';
    } else {
      re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
  }
  return new RegExp(`^${re}$`);
}

export function matchesPath(permission: Permission, path: string): boolean {
  return permission.matcher === null || permission.matcher.test(path);
}

/** Two scopes overlap when some path could match both (decided conservatively from literal prefixes). */
function scopesOverlap(a: Permission, b: Permission): boolean {
  if (a.scope === null || b.scope === null) return true;
  if (a.name === SECRET) return a.scope === b.scope;
  return a.prefix.startsWith(b.prefix) || b.prefix.startsWith(a.prefix);
}

/** True when every path `inner` matches is matched by `outer` (conservative: may say false wrongly, never true wrongly). */
function scopeCovers(outer: Permission, inner: Permission): boolean {
  if (outer.scope === null) return true;
  if (inner.scope === null) return false;
  if (outer.scope === inner.scope) return true;
  if (outer.scope.endsWith('/**')) {
    const base = outer.scope.slice(0, -3);
    if (base.search(/[*?]/) !== -1) return false;
    // The inner scope must be the folder itself or lie below "<base>/". Comparing only literal prefixes
    // let "/docs*" (which matches /docsecret) pass as covered by "/docs/**": narrowing widened.
    return inner.scope === base || inner.scope.startsWith(`${base}/`);
  }
  return false;
}

/** An immutable set of granted permissions. */
export class GrantSet {
  readonly permissions: readonly Permission[];
  readonly #byName = new Map<string, Permission[]>();

  constructor(grants: Iterable<string>) {
    const list: Permission[] = [];
    for (const text of grants) list.push(parsePermission(text));
    this.permissions = Object.freeze(list);
    for (const p of list) {
      const bucket = this.#byName.get(p.name);
      if (bucket) bucket.push(p);
      else this.#byName.set(p.name, [p]);
    }
  }

  texts(): string[] {
    return this.permissions.map((p) => p.text);
  }

  named(name: string): readonly Permission[] {
    return this.#byName.get(name) ?? [];
  }

  /** Narrow to the requested grants: a requested grant survives only if this set covers it. Never widens. */
  narrow(requested: Iterable<string>): GrantSet {
    const kept: string[] = [];
    for (const text of requested) {
      const p = parsePermission(text);
      if (this.named(p.name).some((g) => scopeCovers(g, p))) kept.push(text);
    }
    return new GrantSet(kept);
  }

  /** Whether every path and secret `permissions` could reach is granted here (conservative: may say false wrongly, never true wrongly). */
  covers(permissions: readonly Permission[]): boolean {
    return permissions.every((p) => this.named(p.name).some((g) => scopeCovers(g, p)));
  }

  /** The first declared permission this set does not grant, or null when all are granted. */
  missing(declared: readonly Permission[]): Permission | null {
    for (const d of declared) {
      if (!this.named(d.name).some((g) => scopesOverlap(g, d))) return d;
    }
    return null;
  }

  /** Whether `path` is allowed for `name` by at least one of these permissions. */
  allowsPath(name: PermissionName, path: string): boolean {
    return this.named(name).some((g) => matchesPath(g, path));
  }
}
