import { useEffect, useState } from 'preact/hooks';
import type { ErrorInfo, Problem } from './api';
import type { SseMessage } from './sse';

/** Events from /v1/events, grouped into the calls they belong to. */

export interface VfsSummary {
  written: string[];
  deleted: string[];
  created_dirs: string[];
  moved: Array<{ from: string; to: string }>;
}

export interface LogLine {
  level: string;
  message: string;
}

export interface EngineEvent {
  type: string;
  at?: string;
  run_id?: string | null;
  trace_id?: string | null;
  /** The run of the call that made this one (a macro's step, a code.run program's call). */
  parent_run_id?: string;
  tool?: string;
  input?: unknown;
  output?: unknown;
  caller?: string | null;
  duration_ms?: number;
  output_bytes?: number;
  vfs?: VfsSummary | null;
  attempts?: number;
  logs?: LogLine[];
  error?: ErrorInfo;
  action?: string;
  permission?: string | null;
  operation?: string | null;
  reason?: string;
  added?: string[];
  updated?: string[];
  removed?: string[];
  problems?: Problem[];
  after?: number;
  resumed_at?: number;
  missed?: number;
}

export type RowStatus = 'running' | 'ok' | 'error' | 'security' | 'registry' | 'gap';

/** One line of the activity list: a call (its events share a run_id), or an event of its own. */
export interface Row {
  key: string;
  seq: number;
  status: RowStatus;
  tool: string;
  run_id: string | null;
  /** The run of the call that made this one, when it is a macro's step or a program's call. */
  parent_run_id: string | null;
  /** How many calls up the chain of parents is (0 for a call of its own); the list indents by it. */
  depth: number;
  at: string;
  events: EngineEvent[];
  /** The call was denied or tried to leave its sandbox (it may still have a result). */
  security: boolean;
  stage: string | null;
  duration_ms: number | null;
}

export const MAX_EVENTS = 50_000;

export class EventStore {
  rows: Row[] = [];
  version = 0;
  eventCount = 0;
  readonly #byRun = new Map<string, Row>();
  readonly #listeners = new Set<() => void>();
  readonly #registryListeners = new Set<(event: EngineEvent) => void>();
  #seq = 0;
  #scheduled = false;

  constructor(readonly limit = MAX_EVENTS) {}

  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  onRegistryChange(listener: (event: EngineEvent) => void): () => void {
    this.#registryListeners.add(listener);
    return () => this.#registryListeners.delete(listener);
  }

  receive(message: SseMessage): void {
    let event: EngineEvent;
    try {
      event = JSON.parse(message.data) as EngineEvent;
    } catch {
      return;
    }
    if (message.event === 'gap') event = { ...event, type: 'gap' };
    this.add(event);
  }

  add(event: EngineEvent): void {
    this.eventCount++;
    const runId = typeof event.run_id === 'string' ? event.run_id : null;
    let row = runId ? this.#byRun.get(runId) : undefined;
    if (!row) {
      const parentRunId = typeof event.parent_run_id === 'string' ? event.parent_run_id : null;
      const parent = parentRunId ? this.#byRun.get(parentRunId) : undefined;
      row = {
        key: runId ?? `e${this.#seq}`,
        seq: this.#seq++,
        status: 'running',
        tool: event.tool ?? '',
        run_id: runId,
        parent_run_id: parentRunId,
        depth: parent ? parent.depth + 1 : 0,
        at: event.at ?? '',
        events: [],
        security: false,
        stage: null,
        duration_ms: null,
      };
      this.rows.push(row);
      if (runId) this.#byRun.set(runId, row);
    }
    row.events.push(event);
    if (!row.tool && event.tool) row.tool = event.tool;
    switch (event.type) {
      case 'ToolResultEvent':
        row.status = row.security ? 'security' : 'ok';
        row.duration_ms = event.duration_ms ?? null;
        break;
      case 'ToolErrorEvent':
        row.status = row.security ? 'security' : 'error';
        row.stage = event.error?.stage ?? null;
        row.duration_ms = event.duration_ms ?? null;
        break;
      case 'SecurityEvent':
        row.security = true;
        row.status = 'security';
        break;
      case 'RegistryChangeEvent':
      case 'SkillsChangeEvent':
        row.status = 'registry';
        row.tool = event.type === 'SkillsChangeEvent' ? 'skills' : 'registry';
        for (const listener of this.#registryListeners) listener(event);
        break;
      case 'gap':
        row.status = 'gap';
        break;
    }
    if (this.eventCount > this.limit) this.#trim();
    this.#changed();
  }

  /** Drops the oldest rows, a batch at a time so that a busy stream does not shift the array per event. */
  #trim(): void {
    const target = this.limit - Math.ceil(this.limit / 20);
    let drop = 0;
    let count = this.eventCount;
    while (count > target && drop < this.rows.length - 1) {
      const row = this.rows[drop] as Row;
      count -= row.events.length;
      if (row.run_id) this.#byRun.delete(row.run_id);
      drop++;
    }
    this.rows = this.rows.slice(drop);
    this.eventCount = count;
  }

  /** Listeners hear about changes once per frame, however many events arrived in it. */
  #changed(): void {
    this.version++;
    if (this.#scheduled) return;
    this.#scheduled = true;
    requestAnimationFrame(() => {
      this.#scheduled = false;
      for (const listener of this.#listeners) listener();
    });
  }
}

export const events = new EventStore();

export function useStore(store: EventStore): number {
  const [version, setVersion] = useState(store.version);
  useEffect(() => store.subscribe(() => setVersion(store.version)), [store]);
  return version;
}

/**
 * Rows newest first, each call's inner calls (a macro's steps, a program's calls) right below it in the
 * order they were made, so that a program and its calls read as a tree.
 */
export function asTree(rows: readonly Row[]): Row[] {
  const shown = new Set(rows.map((row) => row.run_id).filter((id): id is string => id !== null));
  const children = new Map<string, Row[]>();
  const top: Row[] = [];
  for (const row of rows) {
    if (row.parent_run_id && shown.has(row.parent_run_id)) {
      const list = children.get(row.parent_run_id);
      if (list) list.push(row);
      else children.set(row.parent_run_id, [row]);
    } else top.push(row);
  }
  const out: Row[] = [];
  const visit = (row: Row) => {
    out.push(row);
    for (const child of children.get(row.run_id ?? '') ?? []) visit(child);
  };
  for (let i = top.length - 1; i >= 0; i--) visit(top[i] as Row);
  return out;
}

export function findEvent(row: Row, type: string): EngineEvent | undefined {
  return row.events.find((e) => e.type === type);
}
