import { useEffect, useState } from 'preact/hooks';
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

/** The clock, ticking every second while `running`: the countdowns to each call's timeout. */
function useNow(running: boolean): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    if (!running) return;
    setNow(Date.now());
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [running]);
  return now;
}

/** 272 s → "4:32", 3725 s → "1:02:05". */
export function countdown(ms: number): string {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = String(total % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${s}` : `${m}:${s}`;
}

function Deadline({ expiresAt, now }: { expiresAt: string; now: number }) {
  const at = new Date(expiresAt);
  const left = at.getTime() - now;
  const clock = at.toLocaleTimeString(undefined, { hour12: false });
  if (Number.isNaN(left)) return null;
  return left > 0 ? (
    <span class="deadline" title="With no answer by then, the call is denied with the code APPROVAL_TIMEOUT.">
      waits until {clock} (<span data-testid="countdown">{countdown(left)}</span> left), then is denied (timeout)
    </span>
  ) : (
    <span class="deadline late">no answer by {clock}: being denied (timeout)</span>
  );
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
  const now = useNow((approvals?.length ?? 0) > 0);
  const unnamed = by.trim() === '';

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
      {approvals?.length === 0 ? (
        <p class="muted">
          No calls wait for approval.{' '}
          <span class="hint">A call that the project's approval rules (arium.json, "approvals") stop waits here for an answer.</span>
        </p>
      ) : null}
      <ul class="approval-list">
        {(approvals ?? []).map((a) => (
          <li key={a.run_id} class="approval" data-run={a.run_id}>
            <div class="approval-head">
              <strong>{a.tool}</strong> <code class="muted">{a.run_id}</code>
              {a.caller ? <span class="muted"> asked by {a.caller}</span> : null}
            </div>
            <pre class="approval-input">{JSON.stringify(a.input, null, 2)}</pre>
            <div class="muted">
              asked {new Date(a.requested_at).toLocaleTimeString(undefined, { hour12: false })} · <Deadline expiresAt={a.expires_at} now={now} />
            </div>
            <div class="actions">
              <input
                aria-label={`Reason for denying ${a.run_id}`}
                placeholder="reason (for a denial)"
                value={reasons[a.run_id] ?? ''}
                onInput={(e) => setReasons({ ...reasons, [a.run_id]: (e.currentTarget as HTMLInputElement).value })}
              />
              <button
                type="button"
                class="primary"
                disabled={busy !== null || unnamed}
                aria-describedby={unnamed ? `why-${a.run_id}` : undefined}
                onClick={() => void answer(a.run_id, 'approve')}
              >
                {busy === a.run_id ? 'Answering…' : 'Approve'}
              </button>
              <button
                type="button"
                class="danger"
                disabled={busy !== null || unnamed}
                aria-describedby={unnamed ? `why-${a.run_id}` : undefined}
                onClick={() => void answer(a.run_id, 'deny')}
              >
                Deny
              </button>
            </div>
            {unnamed ? (
              // A disabled button says what enables it: the name recorded with the answer.
              <p class="hint why-disabled" id={`why-${a.run_id}`}>
                To approve or deny, first{' '}
                <button type="button" class="link" onClick={() => document.getElementById('approver')?.focus()}>
                  fill in “Answer as”
                </button>{' '}
                above: your name is recorded with the answer in the audit log.
              </p>
            ) : null}
          </li>
        ))}
      </ul>
    </section>
  );
}
