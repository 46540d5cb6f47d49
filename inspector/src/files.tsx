import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, describeError, type FsEntry, type FsFile, query, type Snapshot } from './api';
import { highlighted, languageOf } from './highlight';
import { useActiveRow, useVirtualList } from './virtual';

const ROW_HEIGHT = 28;

interface TreeRow {
  entry: FsEntry;
  depth: number;
}

type Children = FsEntry[] | 'loading' | { error: string };

export function FilesView({ snapshots, refreshKey }: { snapshots: Snapshot[]; refreshKey: number }) {
  const [at, setAt] = useState('live');
  const [children, setChildren] = useState<Map<string, Children>>(new Map());
  const [expanded, setExpanded] = useState<Set<string>>(new Set(['/']));
  const [openPath, setOpenPath] = useState<string | null>(null);
  const scrollRef = useRef<HTMLDivElement>(null);
  // The latest answers by folder, so that a load started before a switch of tree is dropped.
  const generation = useRef(0);

  const reload = (path: string) => {
    const gen = generation.current;
    api<{ entries: FsEntry[] }>(`/v1/fs/list${query({ path, at })}`).then(
      (answer) => gen === generation.current && setChildren((m) => new Map(m).set(path, answer.entries)),
      // A folder that is gone closes.
      () => gen === generation.current && setChildren((m) => new Map(m).set(path, [])),
    );
  };

  const load = (path: string) => {
    const gen = generation.current;
    setChildren((m) => new Map(m).set(path, 'loading'));
    api<{ entries: FsEntry[] }>(`/v1/fs/list${query({ path, at })}`).then(
      (answer) => gen === generation.current && setChildren((m) => new Map(m).set(path, answer.entries)),
      (error) => gen === generation.current && setChildren((m) => new Map(m).set(path, { error: describeError(error) })),
    );
  };

  // Another tree: start from its root, with the same folders open.
  useEffect(() => {
    generation.current++;
    setChildren(new Map());
    for (const path of expanded) load(path);
  }, [at]);

  // The live tree changed: reload the open folders in place, the rows staying until their answers arrive.
  const seenKey = useRef(refreshKey);
  useEffect(() => {
    if (seenKey.current === refreshKey) return;
    seenKey.current = refreshKey;
    if (at === 'live') for (const path of expanded) reload(path);
  }, [refreshKey]);

  const rows = useMemo(() => {
    const out: TreeRow[] = [];
    const walk = (path: string, depth: number) => {
      const list = children.get(path);
      if (!Array.isArray(list)) return;
      for (const entry of list) {
        out.push({ entry, depth });
        if (entry.type === 'directory' && expanded.has(entry.path)) walk(entry.path, depth + 1);
      }
    };
    walk('/', 0);
    return out;
  }, [children, expanded]);

  const list = useVirtualList(scrollRef, rows.length, ROW_HEIGHT);
  const active = useActiveRow(rows.length);
  const activeIndex = active.get();

  const toggle = (entry: FsEntry, open?: boolean) => {
    const isOpen = expanded.has(entry.path);
    const want = open ?? !isOpen;
    if (want === isOpen) return;
    const next = new Set(expanded);
    if (want) {
      next.add(entry.path);
      if (!Array.isArray(children.get(entry.path))) load(entry.path);
    } else next.delete(entry.path);
    setExpanded(next);
  };
  const activate = (row: TreeRow) => {
    if (row.entry.type === 'directory') toggle(row.entry);
    else setOpenPath(row.entry.path);
  };

  const onKey = (e: KeyboardEvent) => {
    const current = active.get();
    const row = rows[current];
    if (!row) return;
    let next = current;
    switch (e.key) {
      case 'ArrowDown':
        next = Math.min(rows.length - 1, current + 1);
        break;
      case 'ArrowUp':
        next = Math.max(0, current - 1);
        break;
      case 'Home':
        next = 0;
        break;
      case 'End':
        next = rows.length - 1;
        break;
      case 'ArrowRight':
        if (row.entry.type === 'directory') toggle(row.entry, true);
        break;
      case 'ArrowLeft':
        if (row.entry.type === 'directory' && expanded.has(row.entry.path)) toggle(row.entry, false);
        else {
          const parent = rows.findLastIndex((r, i) => i < current && r.depth < row.depth);
          if (parent >= 0) next = parent;
        }
        break;
      case 'Enter':
      case ' ':
        activate(row);
        break;
      default:
        return;
    }
    e.preventDefault();
    active.set(next);
    list.scrollToIndex(next);
  };

  const root = children.get('/');
  return (
    <div class="split files">
      <section class="side wide" aria-label="File tree">
        <div class="filters">
          <label class="grow">
            <span>Files as of</span>
            <select
              value={at}
              data-testid="tree-select"
              onChange={(e) => {
                setAt((e.currentTarget as HTMLSelectElement).value);
                setOpenPath(null);
              }}
            >
              <option value="live">now (the live tree)</option>
              {[...snapshots].reverse().map((s) => (
                <option key={s.id} value={s.id}>
                  {s.label ? `${s.label} · ` : ''}
                  {s.id} · {new Date(s.at).toLocaleString()}
                </option>
              ))}
            </select>
          </label>
        </div>
        {root && !Array.isArray(root) && root !== 'loading' ? (
          <p class="error" role="alert">
            {root.error}
          </p>
        ) : null}
        {Array.isArray(root) && root.length === 0 ? <p class="muted">This tree is empty.</p> : null}
        <div
          class="vlist tree"
          ref={scrollRef}
          role="tree"
          tabIndex={0}
          aria-label={`Files of ${at}`}
          aria-activedescendant={rows[activeIndex] ? treeId(rows[activeIndex].entry.path) : undefined}
          onKeyDown={onKey}
          onClick={(e) => {
            const index = Number((e.target as HTMLElement).closest<HTMLElement>('[data-index]')?.dataset.index);
            const row = rows[index];
            if (!row) return;
            active.set(index);
            activate(row);
          }}
          data-testid="file-tree"
        >
          <div style={{ height: `${list.totalSize}px`, position: 'relative' }}>
            {list.items.map((item) => {
              const row = rows[item.index] as TreeRow;
              const { entry } = row;
              const isDir = entry.type === 'directory';
              const state = isDir ? children.get(entry.path) : undefined;
              return (
                <div
                  key={entry.path}
                  id={treeId(entry.path)}
                  role="treeitem"
                  tabIndex={-1}
                  aria-level={row.depth + 1}
                  aria-expanded={isDir ? expanded.has(entry.path) : undefined}
                  aria-selected={entry.path === openPath}
                  class={`vrow tree-row${item.index === activeIndex ? ' active' : ''}${entry.path === openPath ? ' selected' : ''}`}
                  style={{ transform: `translateY(${item.start}px)`, height: `${ROW_HEIGHT}px`, paddingLeft: `${8 + row.depth * 16}px` }}
                  data-path={entry.path}
                  data-index={item.index}
                >
                  <span class="chevron" aria-hidden="true">
                    {isDir ? (expanded.has(entry.path) ? '▾' : '▸') : ''}
                  </span>
                  <span class={isDir ? 'dir-name' : 'file-name'}>{entry.name}</span>
                  <span class="muted size">{isDir ? (state === 'loading' ? 'loading…' : '') : formatSize(entry.size)}</span>
                </div>
              );
            })}
          </div>
        </div>
      </section>
      <section class="main" aria-label="File">
        {openPath ? (
          <FileView key={`${at} ${openPath} ${at === 'live' ? refreshKey : ''}`} path={openPath} at={at} />
        ) : (
          <p class="muted">Choose a file in the tree to see its content.</p>
        )}
      </section>
    </div>
  );
}

function treeId(path: string): string {
  return `t-${[...path].map((c) => (/[A-Za-z0-9_-]/.test(c) ? c : `.${c.codePointAt(0)?.toString(16)}`)).join('')}`;
}

export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

function FileView({ path, at }: { path: string; at: string }) {
  const [file, setFile] = useState<FsFile | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let live = true;
    api<FsFile>(`/v1/fs/read${query({ path, at })}`).then(
      (f) => live && setFile(f),
      (e) => live && setError(describeError(e)),
    );
    return () => {
      live = false;
    };
  }, [path, at]);
  const language = languageOf(path);
  const markup = useMemo(() => (file?.text != null ? highlighted(file.text, language) : null), [file, language]);

  return (
    <article class="file" data-testid="file-view" data-path={path}>
      <header class="tool-head">
        <h2 class="path">{path}</h2>
        {file ? <span class="muted">{formatSize(file.size)}</span> : null}
        {language ? <span class="chip">{language}</span> : null}
      </header>
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
      {!file && !error ? <p class="muted">Loading…</p> : null}
      {file && (file.binary || file.text === null) ? (
        <dl class="facts" data-testid="binary-summary">
          <dt>Binary</dt>
          <dd>{file.size.toLocaleString()} bytes</dd>
          <dt>SHA-256</dt>
          <dd>
            <code>{file.sha256}</code>
          </dd>
        </dl>
      ) : null}
      {file && file.text !== null && !file.binary ? (
        <>
          {file.truncated ? (
            <p class="muted">
              Showing the first {formatSize(file.text.length)} of {formatSize(file.size)}.
            </p>
          ) : null}
          {markup !== null ? (
            // highlight.js escapes the text it marks up.
            <pre class="code file-text hljs" data-testid="file-text" dangerouslySetInnerHTML={{ __html: markup }} />
          ) : (
            <pre class="code file-text" data-testid="file-text">
              {file.text}
            </pre>
          )}
        </>
      ) : null}
    </article>
  );
}
