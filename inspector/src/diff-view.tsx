import 'diff2html/bundles/css/diff2html.min.css';
import type { Diff2HtmlConfig } from 'diff2html';
import { html as diffHtml } from 'diff2html';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { type DiffFile, type DiffResult, describeError } from './api';
import { useTheme } from './theme';

export interface DiffSource {
  /** A key that changes when the compared trees change: the view reloads. */
  key: string;
  /** The file list and counts, without patches. */
  stat(): Promise<DiffResult>;
  /** One file's patch. */
  patch(file: DiffFile): Promise<DiffFile | null>;
}

export type Layout = 'side-by-side' | 'line-by-line';
const LAYOUT_STORAGE = 'arium.inspector.diff-layout';

/** Up to this many files, every file shows its patch as it scrolls into view; past it, on expand only. */
const AUTO_EXPAND = 30;

function savedLayout(): Layout {
  try {
    return localStorage.getItem(LAYOUT_STORAGE) === 'line-by-line' ? 'line-by-line' : 'side-by-side';
  } catch {
    return 'side-by-side';
  }
}

/** The diff layout the user chose last (side by side or unified), kept in localStorage. */
export function useLayout(): [Layout, (next: Layout) => void] {
  const [layout, setLayout] = useState<Layout>(savedLayout);
  const choose = (next: Layout) => {
    setLayout(next);
    try {
      localStorage.setItem(LAYOUT_STORAGE, next);
    } catch {
      // Not saved: the choice holds for this page.
    }
  };
  return [layout, choose];
}

export function LayoutToggle({ layout, onChoose }: { layout: Layout; onChoose(next: Layout): void }) {
  return (
    <fieldset class="segmented" aria-label="Diff layout">
      <button type="button" aria-pressed={layout === 'side-by-side'} onClick={() => onChoose('side-by-side')}>
        Side by side
      </button>
      <button type="button" aria-pressed={layout === 'line-by-line'} onClick={() => onChoose('line-by-line')}>
        Unified
      </button>
    </fieldset>
  );
}

export function DiffView({ source, empty = 'No differences.' }: { source: DiffSource; empty?: string }) {
  const [result, setResult] = useState<DiffResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [layout, choose] = useLayout();

  useEffect(() => {
    let live = true;
    setResult(null);
    setError(null);
    source.stat().then(
      (r) => live && setResult(r),
      (e) => live && setError(describeError(e)),
    );
    return () => {
      live = false;
    };
  }, [source.key]);

  if (error)
    return (
      <p class="error" role="alert">
        {error}
      </p>
    );
  if (!result) return <p class="muted">Comparing…</p>;
  const { stats } = result;
  return (
    <div class="diff">
      <div class="diff-bar">
        <span class="diff-stats" data-testid="diff-stats">
          {stats.files_changed} {stats.files_changed === 1 ? 'file' : 'files'} changed
          <span class="added"> +{stats.lines_added}</span>
          <span class="removed"> −{stats.lines_removed}</span>
        </span>
        <LayoutToggle layout={layout} onChoose={choose} />
      </div>
      {result.note ? <p class="muted">{result.note}</p> : null}
      {result.files.length === 0 ? <p class="muted">{empty}</p> : null}
      <ul class="diff-files">
        {result.files.map((file) => (
          <DiffFileRow key={`${source.key} ${file.path}`} file={file} source={source} layout={layout} open={result.files.length <= AUTO_EXPAND} />
        ))}
      </ul>
    </div>
  );
}

function DiffFileRow({ file, source, layout, open: initiallyOpen }: { file: DiffFile; source: DiffSource; layout: Layout; open: boolean }) {
  const [open, setOpen] = useState(initiallyOpen);
  const [visible, setVisible] = useState(false);
  const [loaded, setLoaded] = useState<DiffFile | null>(file.patch !== null ? file : null);
  const [error, setError] = useState<string | null>(null);
  const ref = useRef<HTMLLIElement>(null);
  const needsPatch = !file.binary && file.status !== 'renamed' && file.patch === null;

  useEffect(() => {
    const element = ref.current;
    if (!element || visible) return;
    const observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) {
        setVisible(true);
        observer.disconnect();
      }
    });
    observer.observe(element);
    return () => observer.disconnect();
  }, [visible]);

  useEffect(() => {
    if (!open || !visible || loaded || !needsPatch) return;
    let live = true;
    source.patch(file).then(
      (f) => live && (f?.patch ? setLoaded(f) : setError(f?.note ?? 'No patch for this file.')),
      (e) => live && setError(describeError(e)),
    );
    return () => {
      live = false;
    };
  }, [open, visible, loaded]);

  const status = file.status;
  return (
    <li class={`diff-file ${status}`} ref={ref} data-path={file.path}>
      <button type="button" class="diff-file-head" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span class="chevron" aria-hidden="true">
          {open ? '▾' : '▸'}
        </span>
        <span class={`badge ${status}`}>{status}</span>
        <span class="path">{status === 'renamed' && file.from ? `${file.from} → ${file.path}` : file.path}</span>
        <span class="counts">
          {file.binary ? (
            <span class="muted">binary</span>
          ) : (
            <>
              <span class="added">+{file.lines_added}</span> <span class="removed">−{file.lines_removed}</span>
            </>
          )}
        </span>
      </button>
      {open ? (
        <div class="diff-file-body">
          {file.binary ? (
            <p class="muted">
              Binary file: {file.size_before} → {file.size_after} bytes.
            </p>
          ) : status === 'renamed' && !loaded ? (
            <p class="muted">Renamed without changes.</p>
          ) : error ? (
            <p class="error">{error}</p>
          ) : loaded?.patch ? (
            <Patch patch={loaded.patch} layout={layout} />
          ) : (
            <p class="muted">Loading…</p>
          )}
          {file.note ? <p class="muted">{file.note}</p> : null}
        </div>
      ) : null}
    </li>
  );
}

/** diff2html's HTML for one file's patch; diff2html escapes the file's text. */
export function Patch({ patch, layout }: { patch: string; layout: Layout }) {
  const { theme } = useTheme();
  const markup = useMemo(() => {
    // diff2html declares its options as TypeScript enums; their values are these strings.
    const options = { outputFormat: layout, drawFileList: false, matching: 'lines', colorScheme: theme } as unknown as Diff2HtmlConfig;
    return diffHtml(patch, options);
  }, [patch, layout, theme]);
  // diff2html escapes every line of the patch it renders.
  return <div class="patch" dangerouslySetInnerHTML={{ __html: markup }} />;
}
