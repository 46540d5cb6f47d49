import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ActivityView } from './activity';
import {
  ApiError,
  api,
  apiBase,
  apiKey,
  authHeaders,
  describeError,
  onKeyNeeded,
  type Problem,
  type ProjectInfo,
  type ProviderInfo,
  type Snapshot,
  setApiKey,
  type ToolInfo,
} from './api';
import { ApprovalsView, type PendingApproval } from './approvals';
import { Dialog } from './dialog';
import { FilesView } from './files';
import { SkillsView } from './skills';
import { SnapshotsView } from './snapshots';
import { followEvents, type StreamStatus } from './sse';
import { events } from './store';
import { setThemeChoice, type ThemeChoice, useTheme } from './theme';
import { ToolsView } from './tools';

const TABS = [
  { id: 'tools', label: 'Tools' },
  { id: 'skills', label: 'Skills' },
  { id: 'activity', label: 'Activity' },
  { id: 'files', label: 'Files' },
  { id: 'snapshots', label: 'Snapshots' },
  { id: 'approvals', label: 'Approvals' },
] as const;
type Tab = (typeof TABS)[number]['id'];

function tabFromHash(): Tab {
  const id = location.hash.slice(1);
  return TABS.some((t) => t.id === id) ? (id as Tab) : 'tools';
}

/** Live tree changes reload the open tree and diff at most this often. */
const LIVE_RELOAD_MS = 800;

export function App() {
  const [tab, setTab] = useState<Tab>(tabFromHash);
  const [tools, setTools] = useState<ToolInfo[] | null>(null);
  const [problems, setProblems] = useState<Problem[]>([]);
  const [toolsError, setToolsError] = useState<string | null>(null);
  const [providers, setProviders] = useState<ProviderInfo[]>([]);
  const [snapshots, setSnapshots] = useState<Snapshot[]>([]);
  const [project, setProject] = useState<ProjectInfo | null>(null);
  const [keyNeeded, setKeyNeeded] = useState(false);
  const [keyEpoch, setKeyEpoch] = useState(0);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const [liveVersion, setLiveVersion] = useState(0);
  const liveTimer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const [approvals, setApprovals] = useState<PendingApproval[] | null>(null);
  const [approvalsError, setApprovalsError] = useState<string | null>(null);

  const loadApprovals = useCallback(async () => {
    try {
      setApprovals((await api<{ approvals: PendingApproval[] }>('/v1/approvals')).approvals);
      setApprovalsError(null);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) setApprovalsError(describeError(error));
    }
  }, []);

  const loadTools = useCallback(async () => {
    try {
      const answer = await api<{ tools: ToolInfo[]; problems?: Problem[] }>('/v1/tools');
      setTools(answer.tools);
      setProblems(answer.problems ?? []);
      setToolsError(null);
      // A server from before providers answers 404: no providers to show.
      setProviders(
        await api<{ providers: ProviderInfo[] }>('/v1/providers').then(
          (a) => a.providers,
          () => [],
        ),
      );
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) setToolsError(describeError(error));
    }
  }, []);
  const loadSnapshots = useCallback(async () => {
    try {
      setSnapshots((await api<{ snapshots: Snapshot[] }>('/v1/snapshots')).snapshots);
    } catch {
      // Shown as an empty timeline; the tools list reports the gateway's errors.
    }
  }, []);
  const loadProject = useCallback(async () => {
    try {
      setProject(await api<ProjectInfo>('/v1/project'));
    } catch {
      setProject(null);
    }
  }, []);

  useEffect(() => onKeyNeeded(setKeyNeeded), []);

  useEffect(() => {
    void loadTools();
    void loadSnapshots();
    void loadProject();
    void loadApprovals();
    const stop = events.onRegistryChange(() => void loadTools());
    const follower = followEvents(`${apiBase()}/v1/events`, authHeaders, {
      onMessage: (message) => {
        events.receive(message);
        if (message.event === 'ToolResultEvent' && message.data.includes('"vfs":{')) bumpLive();
        if (message.event === 'ApprovalRequested' || message.event === 'ApprovalResolved') void loadApprovals();
      },
      onStatus: (status) => {
        setStream(status);
        if (status === 'unauthorized') setKeyNeeded(true);
      },
    });
    return () => {
      stop();
      follower.stop();
    };
  }, [keyEpoch]);

  const bumpLive = () => {
    if (liveTimer.current) return;
    liveTimer.current = setTimeout(() => {
      liveTimer.current = null;
      setLiveVersion((v) => v + 1);
    }, LIVE_RELOAD_MS);
  };
  const changed = () => {
    void loadSnapshots();
    setLiveVersion((v) => v + 1);
  };

  useEffect(() => {
    const onHash = () => setTab(tabFromHash());
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  const choose = (next: Tab) => {
    setTab(next);
    history.replaceState(null, '', `#${next}`);
    if (next === 'snapshots' || next === 'files') void loadSnapshots();
  };

  return (
    <div class="app">
      <header class="top">
        <h1>
          <span class="logo" aria-hidden="true">
            ◆
          </span>{' '}
          Arium inspector
        </h1>
        <ProjectSwitch project={project} />
        <Tabs tab={tab} onChoose={choose} pending={approvals?.length ?? 0} />
        <span class="spacer" />
        {project?.read_only ? <span class="badge security">read-only</span> : null}
        <ThemeToggle />
      </header>
      <div id={`panel-${tab}`} role="tabpanel" aria-labelledby={`tab-${tab}`} class="panel">
        {tab === 'tools' ? <ToolsView tools={tools} problems={problems} providers={providers} error={toolsError} /> : null}
        {tab === 'skills' ? <SkillsView /> : null}
        {tab === 'activity' ? <ActivityView status={stream} /> : null}
        {tab === 'files' ? <FilesView snapshots={snapshots} refreshKey={liveVersion} /> : null}
        {tab === 'snapshots' ? (
          <SnapshotsView snapshots={snapshots} readOnly={project?.read_only ?? false} onChanged={changed} liveVersion={liveVersion} />
        ) : null}
        {tab === 'approvals' ? <ApprovalsView approvals={approvals} error={approvalsError} onAnswered={() => void loadApprovals()} /> : null}
      </div>
      {keyNeeded ? (
        <KeyPrompt
          onKey={(key) => {
            setApiKey(key);
            setKeyNeeded(false);
            setKeyEpoch((n) => n + 1);
          }}
          onClose={() => setKeyNeeded(false)}
        />
      ) : null}
    </div>
  );
}

function Tabs({ tab, onChoose, pending }: { tab: Tab; onChoose(tab: Tab): void; pending: number }) {
  const refs = useRef<Array<HTMLButtonElement | null>>([]);
  const onKey = (e: KeyboardEvent) => {
    const index = TABS.findIndex((t) => t.id === tab);
    let next = index;
    if (e.key === 'ArrowRight') next = (index + 1) % TABS.length;
    else if (e.key === 'ArrowLeft') next = (index - 1 + TABS.length) % TABS.length;
    else if (e.key === 'Home') next = 0;
    else if (e.key === 'End') next = TABS.length - 1;
    else return;
    e.preventDefault();
    onChoose((TABS[next] as (typeof TABS)[number]).id);
    refs.current[next]?.focus();
  };
  return (
    <div class="tabs" role="tablist" aria-label="Views" onKeyDown={onKey}>
      {TABS.map((t, i) => (
        <button
          key={t.id}
          ref={(el) => {
            refs.current[i] = el;
          }}
          type="button"
          role="tab"
          id={`tab-${t.id}`}
          aria-selected={t.id === tab}
          aria-controls={`panel-${t.id}`}
          tabIndex={t.id === tab ? 0 : -1}
          onClick={() => onChoose(t.id)}
        >
          {t.label}
          {t.id === 'approvals' && pending > 0 ? (
            <span class="badge security" data-testid="approvals-count">
              {pending}
            </span>
          ) : null}
        </button>
      ))}
    </div>
  );
}

function ProjectSwitch({ project }: { project: ProjectInfo | null }) {
  if (!project) return null;
  if (project.projects.length <= 1) return <span class="project chip">{project.project}</span>;
  return (
    <label class="project">
      <span class="visually-hidden">Project</span>
      <select
        value={project.project}
        onChange={(e) => {
          location.assign(`/p/${encodeURIComponent((e.currentTarget as HTMLSelectElement).value)}/${location.hash}`);
        }}
      >
        {project.projects.map((p) => (
          <option key={p} value={p}>
            {p}
          </option>
        ))}
      </select>
    </label>
  );
}

const NEXT_THEME: Record<ThemeChoice, ThemeChoice> = { auto: 'light', light: 'dark', dark: 'auto' };

function ThemeToggle() {
  const { choice } = useTheme();
  return (
    <button type="button" class="theme-toggle" data-testid="theme-toggle" title="Colour scheme" onClick={() => setThemeChoice(NEXT_THEME[choice])}>
      {choice === 'auto' ? 'Theme: system' : choice === 'light' ? 'Theme: light' : 'Theme: dark'}
    </button>
  );
}

function KeyPrompt({ onKey, onClose }: { onKey(key: string): void; onClose(): void }) {
  const [key, setKey] = useState('');
  const [empty, setEmpty] = useState(false);
  // A key already given and asked for again was refused: say so, or the prompt just seems to come back.
  const [refused] = useState(() => apiKey() !== null);
  return (
    <Dialog title="API key needed" onClose={onClose}>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (key.trim()) onKey(key.trim());
          else setEmpty(true);
        }}
      >
        <p>
          This gateway needs its API key (the <code>ARIUM_API_KEY</code> that <code>arium serve</code> was started with). It is kept in this tab's
          session storage and sent with every request.
        </p>
        {refused ? (
          <p class="error" role="alert">
            The gateway refused the key given before: check it and enter it again.
          </p>
        ) : null}
        <div class="field">
          <label for="api-key">API key</label>
          <input
            id="api-key"
            type="password"
            autocomplete="off"
            value={key}
            aria-describedby={empty ? 'api-key-empty' : undefined}
            onInput={(e) => {
              setKey((e.currentTarget as HTMLInputElement).value);
              setEmpty(false);
            }}
          />
          {empty ? (
            <span class="field-help warn" id="api-key-empty">
              Enter the key first.
            </span>
          ) : null}
        </div>
        <div class="actions">
          <button type="submit" class="primary">
            Use key
          </button>
        </div>
      </form>
    </Dialog>
  );
}
