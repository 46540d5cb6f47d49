import { useState } from 'preact/hooks';
import { api, describeError } from './api';

/** A call waiting for a person's approval, as GET /v1/approvals lists it. */
export interface PendingApproval {
  run_id: string;
  trace_id: string;
  tool: string;
  input: unknown;
  caller: string | null;
  requested_at: string;
  expires_at: string;
}

const BY_STORAGE = 'arium.inspector.approver';

function savedName(): string {
  try {
    return sessionStorage.getItem(BY_STORAGE) ?? '';
  } catch {
    return '';
  }
}

interface Props {
  approvals: PendingApproval[] | null;
  error: string | null;
  /** Called after an answer, to list again (the event stream also says so). */
  onAnswered(): void;
}

/** Pending approvals with Approve and Deny buttons; the answer is recorded as by the name given here. */
export function ApprovalsView({ approvals, error, onAnswered }: Props) {
  const [by, setBy] = useState(savedName);
  const [reasons, setReasons] = useState<Record<string, string>>({});
  const [busy, setBusy] = useState<string | null>(null);
  const [answerError, setAnswerError] = useState<string | null>(null);

  const answer = async (runId: string, decision: 'approve' | 'deny') => {
    setBusy(runId);
    setAnswerError(null);
    try {
      const reason = reasons[runId]?.trim();
      await api(`/v1/approvals/${encodeURIComponent(runId)}`, {
        method: 'POST',
        body: { decision, by: by.trim(), ...(decision === 'deny' && reason ? { reason } : {}) },
      });
    } catch (failure) {
      setAnswerError(describeError(failure));
    } finally {
      setBusy(null);
      onAnswered();
    }
  };

  return (
    <section class="approvals" aria-label="Approvals" data-testid="approvals">
      <div class="field approver">
        <label for="approver">Answer as</label>
        <input
          id="approver"
          value={by}
          placeholder="your name (recorded in the audit log)"
          onInput={(e) => {
            const value = (e.currentTarget as HTMLInputElement).value;
            setBy(value);
            try {
              sessionStorage.setItem(BY_STORAGE, value);
            } catch {}
          }}
        />
      </div>
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
      {answerError ? (
        <p class="error" role="alert">
          {answerError}
        </p>
      ) : null}
      {approvals === null ? <p class="muted">Loading…</p> : null}
      {approvals?.length === 0 ? <p class="muted">No calls wait for approval.</p> : null}
      <ul class="approval-list">
        {(approvals ?? []).map((a) => (
          <li key={a.run_id} class="approval" data-run={a.run_id}>
            <div class="approval-head">
              <strong>{a.tool}</strong> <code class="muted">{a.run_id}</code>
              {a.caller ? <span class="muted"> asked by {a.caller}</span> : null}
            </div>
            <pre class="approval-input">{JSON.stringify(a.input, null, 2)}</pre>
            <div class="muted">
              asked {new Date(a.requested_at).toLocaleTimeString()} · denied as timed out at {new Date(a.expires_at).toLocaleTimeString()}
            </div>
            <div class="actions">
              <input
                aria-label={`Reason for denying ${a.run_id}`}
                placeholder="reason (for a denial)"
                value={reasons[a.run_id] ?? ''}
                onInput={(e) => setReasons({ ...reasons, [a.run_id]: (e.currentTarget as HTMLInputElement).value })}
              />
              <button type="button" class="primary" disabled={busy !== null || by.trim() === ''} onClick={() => void answer(a.run_id, 'approve')}>
                Approve
              </button>
              <button type="button" class="danger" disabled={busy !== null || by.trim() === ''} onClick={() => void answer(a.run_id, 'deny')}>
                Deny
              </button>
            </div>
          </li>
        ))}
      </ul>
    </section>
  );
}
