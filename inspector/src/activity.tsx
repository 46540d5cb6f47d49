import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, type DiffFile, type DiffResult, query } from './api';
import { Dialog } from './dialog';
import { DiffView } from './diff-view';
import type { StreamStatus } from './sse';
import { asTree, type EngineEvent, events, findEvent, type Row, type RowStatus, useStore } from './store';
import { ErrorBox } from './tools';
import { ValueView } from './value-view';
import { useActiveRow, useVirtualList } from './virtual';

const ROW_HEIGHT = 34;

interface Filters {
  tool: string;
  status: '' | 'ok' | 'error' | 'security' | 'running';
  stage: string;
  run: string;
}

function matches(row: Row, f: Filters): boolean {
  if (f.tool && row.tool !== f.tool) return false;
  if (f.status && row.status !== f.status) return false;
  if (f.stage && row.stage !== f.stage) return false;
  if (f.run && !(row.run_id ?? '').includes(f.run.trim())) return false;
  return true;
}

/** What the event stream's state means to someone reading the list, and (as a tooltip) why it matters. */
const STREAM_TEXT: Record<StreamStatus, { text: string; title: string }> = {
  connecting: { text: 'connecting…', title: 'Connecting to the gateway’s event stream; calls appear here as they happen once it is live.' },
  open: { text: 'live: receiving events', title: 'Connected to the gateway’s event stream: every call made through it appears here as it happens.' },
  closed: {
    text: 'disconnected — retrying',
    title:
      'The event stream to the gateway dropped. The page tries again by itself; events missed meanwhile are replayed if the gateway still has them.',
  },
  reconnecting: {
    text: 'reconnecting…',
    title: 'Connecting again to the gateway’s event stream; events missed meanwhile are replayed if the gateway still has them.',
  },
  unauthorized: { text: 'needs the API key', title: 'The gateway refused the event stream: give its API key to see calls as they happen.' },
};

export function ActivityView({ status }: { status: StreamStatus }) {
  const version = useStore(events);
  const [filters, setFilters] = useState<Filters>({ tool: '', status: '', stage: '', run: '' });
  const [selected, setSelected] = useState<string | null>(null);
  const [diffRun, setDiffRun] = useState<string | null>(null);
  const scrollRef = useRef<HTMLDivElement>(null);
  const detailRef = useRef<HTMLElement>(null);
  // Another call's details start at their top, not where the last one was scrolled to.
  useEffect(() => {
    if (detailRef.current) detailRef.current.scrollTop = 0;
  }, [selected]);

  // Newest first, inner calls below the call that made them; recomputed when events arrive or the filters change.
  const rows = useMemo(() => asTree(events.rows.filter((row) => matches(row, filters))), [version, filters]);
  const toolNames = useMemo(() => [...new Set(events.rows.map((r) => r.tool).filter(Boolean))].sort(), [version]);
  const stages = useMemo(() => [...new Set(events.rows.map((r) => r.stage).filter((s): s is string => s !== null))].sort(), [version]);
  const list = useVirtualList(scrollRef, rows.length, ROW_HEIGHT);
  const active = useActiveRow(rows.length);
  const activeIndex = active.get();
  const current = selected ? (rows.find((r) => r.key === selected) ?? events.rows.find((r) => r.key === selected) ?? null) : null;

  const set = (patch: Partial<Filters>) => setFilters({ ...filters, ...patch });
  const onKey = (e: KeyboardEvent) => {
    if (rows.length === 0) return;
    const current = active.get();
    let next = current;
    if (e.key === 'ArrowDown') next = Math.min(rows.length - 1, current + 1);
    else if (e.key === 'ArrowUp') next = Math.max(0, current - 1);
    else if (e.key === 'Home') next = 0;
    else if (e.key === 'End') next = rows.length - 1;
    else if (e.key === 'Enter' || e.key === ' ') {
      const row = rows[current];
      if (row) setSelected(row.key);
      e.preventDefault();
      return;
    } else return;
    e.preventDefault();
    active.set(next);
    list.scrollToIndex(next);
  };

  return (
    <div class="split activity">
      <section class="side wide" aria-label="Activity">
        <div class="filters">
          <label>
            <span>Tool</span>
            <select value={filters.tool} onChange={(e) => set({ tool: (e.currentTarget as HTMLSelectElement).value })}>
              <option value="">all</option>
              {toolNames.map((t) => (
                <option key={t} value={t}>
                  {t}
                </option>
              ))}
            </select>
          </label>
          <label title="ok: returned a result · error: failed · security: denied, or tried to leave its sandbox · running: no result yet">
            <span>Status</span>
            <select value={filters.status} onChange={(e) => set({ status: (e.currentTarget as HTMLSelectElement).value as Filters['status'] })}>
              <option value="">all</option>
              <option value="ok">ok</option>
              <option value="error">error</option>
              <option value="security">security</option>
              <option value="running">running</option>
            </select>
          </label>
          <label title="The step of a call where it failed: validation of its input, a permission, approval, its execution…">
            <span>Stage</span>
            <select value={filters.stage} onChange={(e) => set({ stage: (e.currentTarget as HTMLSelectElement).value })}>
              <option value="">all</option>
              {stages.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
          <label class="grow">
            <span>Run id</span>
            <input
              type="search"
              value={filters.run}
              placeholder="run id"
              onInput={(e) => set({ run: (e.currentTarget as HTMLInputElement).value })}
            />
          </label>
        </div>
        <div class="list-meta muted">
          <span data-testid="activity-count">
            {rows.length} of {events.rows.length} entries · {events.eventCount} events
          </span>
          <span class={`stream ${status}`} title={STREAM_TEXT[status].title} data-testid="stream-status">
            {STREAM_TEXT[status].text}
          </span>
        </div>
        <div
          class="vlist"
          ref={scrollRef}
          role="listbox"
          tabIndex={0}
          aria-label="Calls and events, newest first"
          aria-activedescendant={rows[activeIndex] ? `act-${rows[activeIndex].seq}` : undefined}
          onKeyDown={onKey}
          onClick={(e) => {
            const index = Number((e.target as HTMLElement).closest<HTMLElement>('[data-index]')?.dataset.index);
            const row = rows[index];
            if (!row) return;
            active.set(index);
            setSelected(row.key);
          }}
          data-testid="activity-list"
        >
          {rows.length === 0 ? (
            <p class="muted empty" data-testid="activity-empty">
              {events.rows.length === 0
                ? 'No calls yet. Every call made through this gateway (by an agent, or from the Tools tab) appears here as it happens.'
                : 'No call matches these filters.'}
            </p>
          ) : null}
          <div style={{ height: `${list.totalSize}px`, position: 'relative' }}>
            {list.items.map((item) => {
              const row = rows[item.index] as Row;
              return (
                <div
                  key={row.key}
                  id={`act-${row.seq}`}
                  role="option"
                  tabIndex={-1}
                  aria-selected={row.key === selected}
                  class={`vrow act-row${item.index === activeIndex ? ' active' : ''}${row.key === selected ? ' selected' : ''}`}
                  style={{ transform: `translateY(${item.start}px)`, height: `${ROW_HEIGHT}px` }}
                  data-run={row.run_id ?? ''}
                  data-status={row.status}
                  data-index={item.index}
                >
                  <StatusBadge status={row.status} />
                  <span class="act-tool" style={row.depth > 0 ? { paddingLeft: `${Math.min(row.depth, 6) * 14}px` } : undefined}>
                    {row.depth > 0 ? '↳ ' : ''}
                    {row.tool}
                  </span>
                  <span class="act-summary muted">{summary(row)}</span>
                  <span class="act-time muted">{time(row.at)}</span>
                </div>
              );
            })}
          </div>
        </div>
      </section>
      <section class="main" aria-label="Call details" ref={detailRef}>
        {current ? (
          <CallDetail row={current} onDiff={setDiffRun} />
        ) : (
          <p class="muted">Select a call to see its input, output, logs and changed files.</p>
        )}
      </section>
      {diffRun ? (
        <Dialog title={`Files changed by run ${diffRun}`} onClose={() => setDiffRun(null)}>
          <RunDiff runId={diffRun} />
        </Dialog>
      ) : null}
    </div>
  );
}

function StatusBadge({ status }: { status: RowStatus }) {
  return <span class={`badge ${status}`}>{status}</span>;
}

function time(at: string): string {
  const date = new Date(at);
  return Number.isNaN(date.getTime()) ? '' : date.toLocaleTimeString(undefined, { hour12: false });
}

/** A call's start as the reader's local date and time (the ISO time is its tooltip). */
function started(at: string): string {
  const date = new Date(at);
  return Number.isNaN(date.getTime()) ? at : date.toLocaleString(undefined, { hour12: false });
}

function summary(row: Row): string {
  const result = findEvent(row, 'ToolResultEvent');
  const error = findEvent(row, 'ToolErrorEvent');
  const duration = row.duration_ms !== null ? `${row.duration_ms.toFixed(1)} ms` : '';
  if (row.status === 'registry') {
    const e = row.events[0] as EngineEvent;
    return `+${e.added?.length ?? 0} ~${e.updated?.length ?? 0} −${e.removed?.length ?? 0}${e.problems?.length ? ` · ${e.problems.length} problems` : ''}`;
  }
  if (row.status === 'gap') return `${row.events[0]?.missed ?? '?'} events missed`;
  const security = findEvent(row, 'SecurityEvent');
  if (error) return [duration, `${error.error?.code ?? ''} (${error.error?.stage ?? ''})`].filter(Boolean).join(' · ');
  if (security && !result) return `${security.action ?? ''} ${security.operation ?? ''}`;
  if (result) {
    const changed = result.vfs ? result.vfs.written.length + result.vfs.deleted.length + result.vfs.moved.length + result.vfs.created_dirs.length : 0;
    return [duration, changed ? `${changed} changed` : ''].filter(Boolean).join(' · ');
  }
  return 'running…';
}

function Json({ value }: { value: unknown }) {
  return <pre class="code">{value === undefined ? '—' : JSON.stringify(value, null, 2)}</pre>;
}

function CallDetail({ row, onDiff }: { row: Row; onDiff(runId: string): void }) {
  const invocation = findEvent(row, 'ToolInvocationEvent');
  const result = findEvent(row, 'ToolResultEvent');
  const error = findEvent(row, 'ToolErrorEvent');
  const securities = row.events.filter((e) => e.type === 'SecurityEvent');
  const end = result ?? error;
  const logs = end?.logs ?? [];
  const vfs = result?.vfs;
  const changed = vfs ? vfs.written.length + vfs.deleted.length + vfs.moved.length + vfs.created_dirs.length > 0 : false;

  if (row.status === 'registry') {
    const e = row.events[0] as EngineEvent;
    return (
      <article class="call" data-testid="call-detail">
        <h2>Registry change</h2>
        <dl class="facts">
          <dt>Added</dt>
          <dd>{e.added?.join(', ') || '—'}</dd>
          <dt>Updated</dt>
          <dd>{e.updated?.join(', ') || '—'}</dd>
          <dt>Removed</dt>
          <dd>{e.removed?.join(', ') || '—'}</dd>
        </dl>
        {e.problems && e.problems.length > 0 ? <Json value={e.problems} /> : null}
      </article>
    );
  }
  if (row.status === 'gap') {
    const e = row.events[0] as EngineEvent;
    return (
      <article class="call">
        <h2>Events missed</h2>
        <p>
          The gateway no longer had {e.missed} events after event {e.after}; the stream resumed at {e.resumed_at}.
        </p>
      </article>
    );
  }
  return (
    <article class="call" data-testid="call-detail" data-run={row.run_id ?? ''}>
      <header class="tool-head">
        <h2>{row.tool}</h2>
        <StatusBadge status={row.status} />
        {row.duration_ms !== null ? <span class="muted">{row.duration_ms.toFixed(1)} ms</span> : null}
      </header>
      <dl class="facts">
        <dt>Run id</dt>
        <dd>
          <code>{row.run_id ?? '—'}</code>
        </dd>
        {invocation?.trace_id && invocation.trace_id !== row.run_id ? (
          <>
            <dt>Trace id</dt>
            <dd>
              <code>{invocation.trace_id}</code>
            </dd>
          </>
        ) : null}
        {invocation?.caller ? (
          <>
            <dt>Caller</dt>
            <dd>{invocation.caller}</dd>
          </>
        ) : null}
        {row.parent_run_id ? (
          <>
            <dt>Parent run</dt>
            <dd>
              <code>{row.parent_run_id}</code>
            </dd>
          </>
        ) : null}
        <dt>Started</dt>
        <dd title={row.at}>{started(row.at)}</dd>
        {end?.attempts !== undefined ? (
          <>
            <dt>Attempts</dt>
            <dd>{end.attempts}</dd>
          </>
        ) : null}
      </dl>
      <h3>Input</h3>
      <ValueView value={end?.input ?? invocation?.input} />
      {result ? (
        <>
          <h3>Output</h3>
          <ValueView value={result.output} />
        </>
      ) : null}
      {error?.error ? (
        <>
          <h3>Error</h3>
          <ErrorBox error={error.error} />
        </>
      ) : null}
      {securities.length > 0 ? (
        <>
          <h3>Security</h3>
          <ul class="security-list">
            {securities.map((s, i) => (
              // A call's security events never reorder: the index is a stable key.
              <li key={i}>
                <span class="badge security">{s.action}</span> {s.permission ? <code>{s.permission}</code> : null} {s.operation}
                <div class="muted">{s.reason}</div>
              </li>
            ))}
          </ul>
        </>
      ) : null}
      <h3>Logs</h3>
      {logs.length === 0 ? (
        <p class="muted">No logs.</p>
      ) : (
        <ol class="logs">
          {logs.map((line, i) => (
            // Log lines are fixed once the call ended: the index is a stable key.
            <li key={i} class={`log ${line.level}`}>
              <span class="log-level">{line.level}</span> {line.message}
            </li>
          ))}
        </ol>
      )}
      {result ? (
        <>
          <h3>Files changed</h3>
          {vfs && changed ? (
            <>
              <ul class="changes" data-testid="call-changes">
                {vfs.written.map((p) => (
                  <li key={`w${p}`}>
                    <span class="badge modified">written</span> <code>{p}</code>
                  </li>
                ))}
                {vfs.deleted.map((p) => (
                  <li key={`d${p}`}>
                    <span class="badge deleted">deleted</span> <code>{p}</code>
                  </li>
                ))}
                {vfs.created_dirs.map((p) => (
                  <li key={`c${p}`}>
                    <span class="badge added">folder</span> <code>{p}</code>
                  </li>
                ))}
                {vfs.moved.map((m) => (
                  <li key={`m${m.from}`}>
                    <span class="badge renamed">moved</span> <code>{m.from}</code> → <code>{m.to}</code>
                  </li>
                ))}
              </ul>
              {row.run_id ? (
                <button type="button" onClick={() => onDiff(row.run_id as string)}>
                  Open diff
                </button>
              ) : null}
            </>
          ) : (
            <p class="muted">None.</p>
          )}
        </>
      ) : null}
    </article>
  );
}

function RunDiff({ runId }: { runId: string }) {
  const base = `/v1/runs/${encodeURIComponent(runId)}/diff`;
  const source = useMemo(
    () => ({
      key: runId,
      stat: () => api<DiffResult>(base + query({ stat: true })),
      patch: async (file: DiffFile) => {
        const answer = await api<DiffResult>(base + query({ file: file.path }));
        return answer.files.find((f) => f.path === file.path) ?? null;
      },
    }),
    [runId],
  );
  return <DiffView source={source} empty="This call changed no file contents." />;
}
