import { LayoutToggle, Patch, useLayout } from './diff-view';
import { escapePointer } from './schema-form';

/**
 * A call's input or output as JSON, except for the strings that JSON shows badly, as one long line of
 * `\n` escapes: a unified diff inside it (fs.write's `diff`, a patch another tool returns) is drawn
 * as a diff, and other text of several lines (a file's content) as text.
 */

interface Found {
  pointer: string;
  kind: 'diff' | 'text';
  text: string;
}

/** A file header pair followed by a hunk header: what every unified diff with a change has. */
const UNIFIED = /(?:^|\n)--- [^\n]*\n\+\+\+ [^\n]*\n@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@/;

/** Strings past this size are not searched for a diff header (the view would not draw them fast anyway). */
const MAX_PATCH_CHARS = 2_000_000;
/** How deep the output is searched: patches sit near the top of what tools return. */
const MAX_DEPTH = 6;

export function looksLikePatch(text: string): boolean {
  return text.length <= MAX_PATCH_CHARS && UNIFIED.test(text);
}

function isMultiline(text: string): boolean {
  return text.trimEnd().includes('\n');
}

function findStrings(value: unknown, pointer: string, depth: number, out: Found[]): void {
  if (typeof value === 'string') {
    if (looksLikePatch(value)) out.push({ pointer, kind: 'diff', text: value });
    else if (isMultiline(value)) out.push({ pointer, kind: 'text', text: value });
    return;
  }
  if (depth >= MAX_DEPTH || value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) findStrings(item, `${pointer}/${i}`, depth + 1, out);
  } else for (const [key, item] of Object.entries(value)) findStrings(item, `${pointer}/${escapePointer(key)}`, depth + 1, out);
}

function count(patch: string): { added: number; removed: number } {
  let added = 0;
  let removed = 0;
  for (const line of patch.split('\n')) {
    if (line.startsWith('+') && !line.startsWith('+++ ')) added++;
    else if (line.startsWith('-') && !line.startsWith('--- ')) removed++;
  }
  return { added, removed };
}

/** The value with each string found replaced by a note that it is shown below. */
function withoutFound(value: unknown, found: Map<string, Found['kind']>, pointer = ''): unknown {
  if (typeof value === 'string') {
    const kind = found.get(pointer);
    return kind ? `‹${kind}, shown below›` : value;
  }
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item, i) => withoutFound(item, found, `${pointer}/${i}`));
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[key] = withoutFound(item, found, `${pointer}/${escapePointer(key)}`);
  return out;
}

export function ValueView({ value }: { value: unknown }) {
  const [layout, choose] = useLayout();
  if (value === undefined) return <pre class="code">—</pre>;
  const found: Found[] = [];
  findStrings(value, '', 0, found);
  if (found.length === 0) return <pre class="code">{JSON.stringify(value, null, 2)}</pre>;
  return (
    <div class="data">
      <pre class="code">{JSON.stringify(withoutFound(value, new Map(found.map((f) => [f.pointer, f.kind]))), null, 2)}</pre>
      {found.map((f) =>
        f.kind === 'diff' ? (
          <section key={f.pointer} class="data-block output-patch" data-pointer={f.pointer} aria-label={`Diff at ${f.pointer || '/'}`}>
            <div class="diff-bar">
              <DiffCounts pointer={f.pointer} patch={f.text} />
              <LayoutToggle layout={layout} onChoose={choose} />
            </div>
            <Patch patch={f.text} layout={layout} />
          </section>
        ) : (
          <section key={f.pointer} class="data-block output-text" data-pointer={f.pointer} aria-label={`Text at ${f.pointer || '/'}`}>
            <div class="diff-bar">
              <span class="diff-stats">
                <code>{f.pointer || '/'}</code> <span class="muted">{lineCount(f.text)} lines</span>
              </span>
            </div>
            <pre class="code text-block">{f.text}</pre>
          </section>
        ),
      )}
      <details class="raw">
        <summary>As JSON</summary>
        <pre class="code">{JSON.stringify(value, null, 2)}</pre>
      </details>
    </div>
  );
}

function DiffCounts({ pointer, patch }: { pointer: string; patch: string }) {
  const { added, removed } = count(patch);
  return (
    <span class="diff-stats">
      <code>{pointer || '/'}</code>
      <span class="added"> +{added}</span>
      <span class="removed"> −{removed}</span>
    </span>
  );
}

function lineCount(text: string): number {
  return text.trimEnd().split('\n').length;
}
