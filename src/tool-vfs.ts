import { ToolFailure } from './errors.js';
import type { VfsChangeSummary } from './events.js';
import type { GrantSet, Permission, PermissionName } from './permissions.js';
import { matchesPath } from './permissions.js';
import type { JournalOp } from './store/journal.js';
import { applyOps, type Transaction } from './vfs/transaction.js';
import type { ListOptions, VfsEntry, VfsStat, WriteOptions, WriteOutcome } from './vfs/vfs.js';
import type { VfsView } from './vfs/view.js';

/**
 * Reports a run-time denial (`permission` set) or an attempt to leave the VFS (`permission` null);
 * the dispatcher turns each into one SecurityEvent.
 */
export type DenialReporter = (permission: PermissionName | null, operation: string, path: string) => void;

/**
 * The VFS as one call sees it. Every operation normalizes its path, then needs a permission that the
 * tool declared *and* the caller was granted, both matching that path. It also records what the call
 * changed, for the ToolResultEvent.
 */
export class ToolVfs implements VfsView {
  readonly changes: VfsChangeSummary = { written: [], deleted: [], created_dirs: [], moved: [] };
  /** The call's own transaction: its writes stay private until the dispatcher commits them. */
  readonly #vfs: Transaction;
  readonly #declared: readonly Permission[];
  readonly #granted: GrantSet;
  readonly #onDenied: DenialReporter;

  constructor(vfs: Transaction, declared: readonly Permission[], granted: GrantSet, onDenied: DenialReporter) {
    this.#vfs = vfs;
    this.#declared = declared;
    this.#granted = granted;
    this.#onDenied = onDenied;
  }

  #sealed = false;

  /** The transaction holding this call's changes. */
  get transaction(): Transaction {
    return this.#vfs;
  }

  /** Ends the call's access: later operations (from work the tool left running) fail. */
  seal(): void {
    this.#sealed = true;
  }

  get changed(): boolean {
    const c = this.changes;
    return c.written.length + c.deleted.length + c.created_dirs.length + c.moved.length > 0;
  }

  /** Normalizes a path without touching the VFS or checking permissions (throws INVALID_PATH). */
  resolve(path: unknown): string {
    return this.#normalize('resolve', path);
  }

  /** Whether this call may use `permission` on `path` (no event, no throw). */
  allows(permission: PermissionName, path: string): boolean {
    let declared = false;
    for (const d of this.#declared) {
      if (d.name === permission && matchesPath(d, path)) {
        declared = true;
        break;
      }
    }
    return declared && this.#granted.allowsPath(permission, path);
  }

  /** Whether the *caller's* grants cover `path`, whatever the tool declared (for what builtins show the caller). */
  callerMay(permission: PermissionName, path: string): boolean {
    return this.#granted.allowsPath(permission, path);
  }

  /** Checks `permission` on `path` as an operation would (SecurityEvent and DENIED when refused). */
  demand(permission: PermissionName, operation: string, path: string): void {
    this.#check(permission, operation, path);
  }

  #normalize(operation: string, rawPath: unknown): string {
    if (this.#sealed) {
      throw new ToolFailure('execution', 'CANCELLED', `The call has ended; ${operation} is no longer possible`, { details: { operation } });
    }
    try {
      return this.#vfs.resolve(rawPath);
    } catch (error) {
      if (error instanceof ToolFailure && error.details?.escape === true) {
        this.#onDenied(null, operation, String(error.details.path));
      }
      throw error;
    }
  }

  #check(permission: PermissionName, operation: string, rawPath: unknown): string {
    const path = this.#normalize(operation, rawPath);
    if (!this.allows(permission, path)) this.#deny(permission, operation, path);
    return path;
  }

  #deny(permission: PermissionName, operation: string, path: string): never {
    this.#onDenied(permission, operation, path);
    const declared = this.#declared.some((d) => d.name === permission && matchesPath(d, path));
    const why = declared ? 'the caller was not granted it for this path' : 'the tool did not declare it for this path';
    throw new ToolFailure('permission', 'DENIED', `Permission denied: ${operation} ${path} needs ${permission} (${why})`, {
      details: { permission, operation, path },
    });
  }

  /**
   * Deleting or moving a folder changes everything below it, so every path below needs the permission
   * too: with "vfs.write:/docs/*.md", deleting a folder named /docs/notes.md must not delete
   * /docs/notes.md/secret.txt, which the caller may not write. `rebase` checks the paths the entries
   * will have under another folder (a move's destination). Skipped when no scope applies.
   */
  #checkBelow(permission: PermissionName, operation: string, dir: string, rebase?: string): void {
    const scoped = (p: Permission) => p.name === permission && p.scope !== null;
    if (!this.#declared.some(scoped) && !this.#granted.named(permission).some(scoped)) return;
    if (this.#vfs.typeOf(dir) !== 'directory') return;
    for (const entry of this.#vfs.list(dir, { recursive: true }).entries) {
      const path = rebase === undefined ? entry.path : (rebase === '/' ? '' : rebase) + entry.path.slice(dir === '/' ? 0 : dir.length);
      if (!this.allows(permission, path)) this.#deny(permission, operation, path);
    }
  }

  read(path: unknown): Buffer {
    return this.#vfs.read(this.#check('vfs.read', 'read', path));
  }

  stat(path: unknown): VfsStat {
    return this.#vfs.stat(this.#check('vfs.read', 'stat', path));
  }

  exists(path: unknown): boolean {
    return this.#vfs.exists(this.#check('vfs.read', 'exists', path));
  }

  list(path: unknown, options?: ListOptions): { entries: VfsEntry[]; truncated: boolean } {
    return this.#vfs.list(this.#check('vfs.read', 'list', path), options);
  }

  write(path: unknown, data: Buffer | string, options?: WriteOptions): WriteOutcome & { path: string } {
    const target = this.#check('vfs.write', 'write', path);
    const outcome = this.#vfs.write(target, data, options);
    this.changes.written.push(target);
    return { ...outcome, path: target };
  }

  mkdir(path: unknown, options?: { parents?: boolean }): { created: boolean; path: string } {
    const outcome = this.#vfs.mkdir(this.#check('vfs.write', 'mkdir', path), options);
    if (outcome.created) this.changes.created_dirs.push(outcome.path);
    return outcome;
  }

  delete(path: unknown, options?: { recursive?: boolean }): { deleted: number; bytes: number; path: string } {
    const target = this.#check('vfs.write', 'delete', path);
    if (options?.recursive) this.#checkBelow('vfs.write', 'delete', target);
    const outcome = this.#vfs.delete(target, options);
    this.changes.deleted.push(target);
    return { ...outcome, path: target };
  }

  move(from: unknown, to: unknown, options?: { overwrite?: boolean }): { from: string; to: string; overwritten: boolean } {
    const source = this.#check('vfs.read', 'move', from);
    this.#check('vfs.write', 'move', source);
    const target = this.#check('vfs.write', 'move', to);
    this.#checkBelow('vfs.read', 'move', source);
    this.#checkBelow('vfs.write', 'move', source);
    this.#checkBelow('vfs.write', 'move', source, target);
    if (options?.overwrite) this.#checkBelow('vfs.write', 'move', target);
    const outcome = this.#vfs.move(source, target, options);
    this.changes.moved.push({ from: outcome.from, to: outcome.to });
    return outcome;
  }

  /**
   * Makes the whole tree change as `ops` say (a restore), inside this call's transaction: nothing lands
   * unless the call succeeds, and the commit fails with CONFLICT when any other change was committed
   * after `basis` (the ops were computed against that tree). Needs vfs.write on `/` itself.
   */
  replaceTree(ops: readonly JournalOp[], basis: number): void {
    this.#check('vfs.write', 'restore', '/');
    applyOps(this.#vfs, ops);
    this.#vfs.basis = basis;
    for (const op of ops) {
      if (op.op === 'write') this.changes.written.push(op.path);
      else if (op.op === 'delete') this.changes.deleted.push(op.path);
      else if (op.op === 'mkdir') this.changes.created_dirs.push(op.path);
      else this.changes.moved.push({ from: op.from, to: op.to });
    }
  }
}
