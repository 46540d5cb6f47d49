import type { Engine } from '../engine.js';
import { ToolFailure } from '../errors.js';
import type { EngineEvent } from '../events.js';
import { GrantSet, parsePermission } from '../permissions.js';
import type { TreeReader } from '../vfs/history.js';
import type { VfsEntry } from '../vfs/vfs.js';
import { listedFilter, type SurfaceProfile, surfaceFilter } from './mcp/profile.js';

/**
 * What a surface's clients may see besides calling tools: the routes and resources that read the VFS,
 * its snapshots and diffs, the event stream and the approvals act with the grants a call from the
 * same surface gets (its profile's, narrowed by the engine's), and show only the tools it offers.
 *
 * - A path is read (listed, read, in a diff) only where `vfs.read` is granted for it; a diff leaves the
 *   other files out, as if they had not changed.
 * - A call is seen (its events, its approval) and its approval answered only when its tool is offered
 *   here and, when the profile narrows the grants, these grants cover everything the tool declares:
 *   the stream does not know the grants a call of another client ran with, and a tool that declares
 *   more than this surface may touch could have read or written anything it declares for that client.
 * What changes state (a snapshot, a restore) is a call of the builtin tool, made by the surface.
 */
export class SurfaceAccess {
  /** Which tools the profile offers: its clients may call them, and the discovery tools find them. */
  readonly offered: (id: string) => boolean;
  /** Which tools its listings show (all offered ones, or with search discovery only the discovery tools). */
  readonly listed: (id: string) => boolean;
  /** The profile's grants, to pass to `engine.call` (undefined: the engine's). */
  readonly callGrants: readonly string[] | undefined;
  readonly #engine: Engine;
  readonly #grants: GrantSet;
  readonly #narrowed: boolean;
  readonly #where: string;

  /** `surface` names the profile in arium.json (`http`, `mcp`) for the errors that point to it. */
  constructor(engine: Engine, profile: SurfaceProfile | undefined, surface: string) {
    this.#engine = engine;
    this.offered = surfaceFilter(profile);
    this.listed = listedFilter(profile);
    this.callGrants = profile?.grants;
    const all = new GrantSet(engine.grants);
    this.#grants = profile?.grants ? all.narrow(profile.grants) : all;
    this.#narrowed = profile?.grants !== undefined;
    this.#where = `surfaces.${surface}.grants`;
  }

  mayRead(path: string): boolean {
    return this.#grants.allowsPath('vfs.read', path);
  }

  /** A tree (`live` or a snapshot) whose folders and files are read only where `vfs.read` is granted. */
  tree(ref: string): TreeReader {
    const view = this.#engine.view(ref);
    return {
      list: (raw) => {
        this.#demandRead('fs.list', 'list', raw);
        const listed = view.list(raw);
        return { ...listed, entries: this.#engine.scrub(listed.entries) as VfsEntry[] };
      },
      read: (raw) => {
        this.#demandRead('fs.read', 'read', raw);
        return view.read(raw);
      },
    };
  }

  /** The snapshot log: what `vfs.log` shows a caller granted some `vfs.read`. */
  snapshots(): ReturnType<Engine['snapshots']> {
    if (this.#grants.named('vfs.read').length === 0) {
      this.#report('vfs.log', 'vfs.read', 'list snapshots');
      throw new ToolFailure('permission', 'DENIED', `Permission denied: the snapshot log needs vfs.read, which ${this.#where} does not grant`, {
        details: { permission: 'vfs.read', granted: this.#grants.texts() },
      });
    }
    return this.#engine.snapshots();
  }

  /** Whether a call of `tool` is this surface's to see (its events, its approval) and answer. */
  seesCall(tool: string): boolean {
    if (!this.offered(tool)) return false;
    if (!this.#narrowed) return true;
    const info = this.#engine.tool(tool);
    return info !== undefined && this.#grants.covers(info.permissions.map(parsePermission));
  }

  seesEvent(event: EngineEvent): boolean {
    if (event.type === 'RegistryChangeEvent' || event.type === 'SkillsChangeEvent') return true;
    return this.seesCall(event.tool);
  }

  #demandRead(tool: string, verb: string, raw: unknown): void {
    const path = this.#engine.vfs.resolve(raw);
    if (this.mayRead(path)) return;
    this.#report(tool, 'vfs.read', `${verb} ${path}`);
    throw new ToolFailure('permission', 'DENIED', `Permission denied: vfs.read on ${path} is not granted by ${this.#where}`, {
      details: { permission: 'vfs.read', path, granted: this.#grants.texts() },
    });
  }

  #report(tool: string, permission: string, operation: string): void {
    this.#engine.events.publish({
      type: 'SecurityEvent',
      at: new Date().toISOString(),
      run_id: null,
      trace_id: null,
      tool,
      action: 'denied',
      permission,
      operation,
      reason: `outside what ${this.#where} grants`,
    });
  }
}
