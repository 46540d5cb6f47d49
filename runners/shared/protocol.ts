import { readFileSync } from 'node:fs';
import { compileSchema, summarize, type Validator } from '../../src/validation.js';

/**
 * Checks messages between the engine and its sandbox processes against the one description of them,
 * runners/shared/protocol.schema.json. Off unless turned on (tests do): a check costs a schema
 * validation per message, and the hosts already treat what comes back as untrusted data.
 */
export type Channel =
  | 'js.toWorker'
  | 'js.fromWorker'
  | 'py.toServer'
  | 'py.fromServer'
  | 'py.toChild'
  | 'py.fromChild'
  | 'remote.toWorker'
  | 'remote.fromWorker';

export interface ProtocolLog {
  /** Messages checked, by channel and `t`. */
  seen: Record<string, number>;
  /** Messages that did not match, with why. */
  violations: { channel: Channel; message: string; problem: string }[];
}

let log: ProtocolLog | null = null;
const validators = new Map<Channel, Validator>();

/** Starts checking every message (and forgets what was recorded); returns the record it keeps. */
export function checkProtocol(on: boolean): ProtocolLog | null {
  log = on ? { seen: {}, violations: [] } : null;
  return log;
}

/** The schema, next to this module in the source tree, or in the package root's runners/shared/ when this is dist/. */
export function protocolSchema(): { $defs: Record<string, unknown> } {
  const here = new URL('./protocol.schema.json', import.meta.url);
  const fromDist = new URL('../../../runners/shared/protocol.schema.json', import.meta.url);
  for (const url of [here, fromDist]) {
    try {
      return JSON.parse(readFileSync(url, 'utf8'));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  throw new Error(`runners/shared/protocol.schema.json was not found next to ${import.meta.url}`);
}

function validator(channel: Channel): Validator {
  let found = validators.get(channel);
  if (!found) {
    const { $defs } = protocolSchema();
    found = compileSchema({ $schema: 'https://json-schema.org/draft/2020-12/schema', $defs, $ref: `#/$defs/${channel}` });
    validators.set(channel, found);
  }
  return found;
}

/** Records `message` on `channel` when checking is on. */
export function observe(channel: Channel, message: unknown): void {
  if (log === null) return;
  const t = (message as { t?: unknown } | null)?.t;
  const key = `${channel} ${String(t)}`;
  log.seen[key] = (log.seen[key] ?? 0) + 1;
  const violations = validator(channel)(message);
  if (violations) log.violations.push({ channel, message: JSON.stringify(message).slice(0, 500), problem: summarize(violations) });
}

/** Whether checking is on: a host then asks its sandbox to check what it alone sees (the Python server's frames with call processes). */
export function checking(): boolean {
  return log !== null;
}

/** A check made on the far side of a boundary the engine does not see (the Python server and its call processes). */
export function reported(channel: Channel, kind: string, problem: string | null): void {
  if (log === null) return;
  const key = `${channel} ${kind}`;
  log.seen[key] = (log.seen[key] ?? 0) + 1;
  if (problem !== null) log.violations.push({ channel, message: `(a ${kind} frame, checked by the Python server)`, problem });
}
