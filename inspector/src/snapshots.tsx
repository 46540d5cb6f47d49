import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, type DiffFile, type DiffResult, describeError, query, type Snapshot } from './api';
import { Dialog } from './dialog';
import { DiffView } from './diff-view';

interface Props {
  snapshots: Snapshot[];
  readOnly: boolean;
  onChanged(): void;
  liveVersion: number;
}

export function SnapshotsView({ snapshots, readOnly, onChanged, liveVersion }: Props) {
  const newest = [...snapshots].reverse();
  const [from, setFrom] = useState<string | null>(null);
  const [to, setTo] = useState<string>('live');
  const [restoring, setRestoring] = useState<Snapshot | null>(null);
  const fromRef = from ?? newest[0]?.id ?? null;

  const source = useMemo(() => {
    if (!fromRef) return null;
    // Live can change under the view: its version is part of the key.
    const key = `${fromRef}→${to}${fromRef === 'live' || to === 'live' ? `@${liveVersion}` : ''}`;
    return {
      key,
      stat: () => api<DiffResult>(`/v1/diff${query({ from: fromRef, to, stat: true })}`),
      patch: async (file: DiffFile) => {
        const answer = await api<DiffResult>(`/v1/diff${query({ from: fromRef, to, file: file.path })}`);
        return answer.files.find((f) => f.path === file.path) ?? null;
      },
    };
  }, [fromRef, to, liveVersion]);

  const points: Array<{ ref: string; snapshot: Snapshot | null }> = [
    { ref: 'live', snapshot: null },
    ...newest.map((s) => ({ ref: s.id, snapshot: s })),
  ];

  return (
    <div class="split snapshots">
      <section class="side wide" aria-label="Snapshot timeline">
        <TakeSnapshot disabled={readOnly} onTaken={onChanged} />
        {readOnly ? (
          <p class="hint why-disabled" id="read-only-why">
            This project is served read-only: snapshots can be compared, not taken or restored.
          </p>
        ) : null}
        <p class="muted hint">Pick two points to compare: “from” is the older side.</p>
        <ol class="timeline" data-testid="timeline">
          {points.map(({ ref, snapshot }) => (
            <li key={ref} class={`point${ref === fromRef ? ' is-from' : ''}${ref === to ? ' is-to' : ''}`} data-ref={ref}>
              <div class="point-head">
                <span class="point-name">{snapshot ? (snapshot.label ?? snapshot.id) : 'live'}</span>
                {snapshot ? <code class="muted">{snapshot.id}</code> : <span class="muted">the current tree</span>}
              </div>
              {snapshot ? (
                <div class="point-meta muted">
                  {new Date(snapshot.at).toLocaleString()} · {snapshot.files} files · {snapshot.bytes.toLocaleString()} bytes
                  {snapshot.message ? <div class="point-message">{snapshot.message}</div> : null}
                </div>
              ) : null}
              <div class="point-actions">
                <button type="button" class="small" aria-pressed={ref === fromRef} onClick={() => setFrom(ref)}>
                  From
                </button>
                <button type="button" class="small" aria-pressed={ref === to} onClick={() => setTo(ref)}>
                  To
                </button>
                {snapshot ? (
                  <button
                    type="button"
                    class="small danger"
                    disabled={readOnly}
                    aria-describedby={readOnly ? 'read-only-why' : undefined}
                    title={readOnly ? 'This project is served read-only' : 'Make the live tree this snapshot (after showing what changes)'}
                    onClick={() => setRestoring(snapshot)}
                  >
                    Restore…
                  </button>
                ) : null}
              </div>
            </li>
          ))}
        </ol>
      </section>
      <section class="main" aria-label="Diff">
        {source ? (
          <>
            <h2 class="diff-title">
              <code>{nameOf(fromRef ?? '', snapshots)}</code> → <code>{nameOf(to, snapshots)}</code>
            </h2>
            <DiffView source={source} />
          </>
        ) : (
          <p class="muted">No snapshots yet: take one, change files, then compare.</p>
        )}
      </section>
      {restoring ? (
        <RestoreDialog
          snapshot={restoring}
          onClose={() => setRestoring(null)}
          onRestored={() => {
            setRestoring(null);
            onChanged();
          }}
        />
      ) : null}
    </div>
  );
}

function nameOf(ref: string, snapshots: Snapshot[]): string {
  const snapshot = snapshots.find((s) => s.id === ref);
  return snapshot?.label ?? ref;
}

function TakeSnapshot({ disabled, onTaken }: { disabled: boolean; onTaken(): void }) {
  const [label, setLabel] = useState('');
  const [message, setMessage] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const take = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await api<Snapshot>('/v1/snapshots', {
        method: 'POST',
        body: { ...(label.trim() ? { label: label.trim() } : {}), ...(message.trim() ? { message: message.trim() } : {}) },
      });
      setLabel('');
      setMessage('');
      onTaken();
    } catch (problem) {
      setError(describeError(problem));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="take-snapshot" onSubmit={take} aria-label="Take snapshot">
      <div class="row">
        <label>
          <span>Label</span>
          <input type="text" value={label} placeholder="optional" onInput={(e) => setLabel((e.currentTarget as HTMLInputElement).value)} />
        </label>
        <label class="grow">
          <span>Message</span>
          <input type="text" value={message} placeholder="optional" onInput={(e) => setMessage((e.currentTarget as HTMLInputElement).value)} />
        </label>
      </div>
      <button type="submit" class="primary" disabled={disabled || busy} aria-describedby={disabled ? 'read-only-why' : undefined}>
        {busy ? 'Saving…' : 'Take snapshot'}
      </button>
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
    </form>
  );
}

function RestoreDialog({ snapshot, onClose, onRestored }: { snapshot: Snapshot; onClose(): void; onRestored(): void }) {
  const [preview, setPreview] = useState<DiffResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  // What the restore would do, shown before it can be confirmed.
  useEffect(() => {
    let live = true;
    api<DiffResult>(`/v1/diff${query({ from: 'live', to: snapshot.id, stat: true })}`).then(
      (r) => live && setPreview(r),
      (e) => live && setError(describeError(e)),
    );
    return () => {
      live = false;
    };
  }, [snapshot.id]);
  const restore = async () => {
    setBusy(true);
    try {
      await api('/v1/restore', { method: 'POST', body: { ref: snapshot.id } });
      onRestored();
    } catch (problem) {
      setError(describeError(problem));
      setBusy(false);
    }
  };
  const name = snapshot.label ?? snapshot.id;
  return (
    <Dialog title={`Restore ${name}?`} onClose={onClose}>
      <p>
        The live tree becomes snapshot <code>{name}</code>. The live tree is saved as a snapshot first, so this can be undone.
      </p>
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
      {!preview && !error ? <p class="muted">Comparing live with {name}…</p> : null}
      {preview ? (
        <>
          <p data-testid="restore-summary">
            {preview.files.length === 0
              ? 'Nothing changes: live already equals this snapshot.'
              : `${preview.stats.files_changed} ${preview.stats.files_changed === 1 ? 'file changes' : 'files change'}: +${preview.stats.lines_added} −${preview.stats.lines_removed} lines.`}
          </p>
          <ul class="restore-files" data-testid="restore-files">
            {preview.files.map((f) => (
              <li key={f.path}>
                <span class={`badge ${f.status}`}>{f.status}</span> <code>{f.status === 'renamed' && f.from ? `${f.from} → ${f.path}` : f.path}</code>{' '}
                {f.binary ? (
                  <span class="muted">binary</span>
                ) : (
                  <>
                    <span class="added">+{f.lines_added}</span> <span class="removed">−{f.lines_removed}</span>
                  </>
                )}
              </li>
            ))}
          </ul>
        </>
      ) : null}
      <div class="actions">
        <button type="button" onClick={onClose}>
          Cancel
        </button>
        <button type="button" class="primary danger" disabled={!preview || busy} onClick={restore}>
          {busy ? 'Restoring…' : 'Restore'}
        </button>
      </div>
    </Dialog>
  );
}
