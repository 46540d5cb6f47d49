import { LayoutToggle, Patch, useLayout } from './diff-view';
import { escapePointer } from './schema-form';

/**
 * A call's output as JSON, except that a unified diff inside it (fs.write's `diff`, a patch another
 * tool returns) is drawn as a diff: as a JSON string it is one long line of `\n` escapes.
 */

interface FoundPatch {
  pointer: string;
  patch: string;
  added: number;
  removed: number;
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

function findPatches(value: unknown, pointer: string, depth: number, out: FoundPatch[]): void {
  if (typeof value === 'string') {
    if (looksLikePatch(value)) out.push({ pointer, patch: value, ...count(value) });
    return;
  }
  if (depth >= MAX_DEPTH || value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) findPatches(item, `${pointer}/${i}`, depth + 1, out);
  } else for (const [key, item] of Object.entries(value)) findPatches(item, `${pointer}/${escapePointer(key)}`, depth + 1, out);
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

/** The output with each patch replaced by a pointer to where the page draws it. */
function withoutPatches(value: unknown, patches: Set<string>, pointer = ''): unknown {
  if (typeof value === 'string') return patches.has(pointer) ? `‹diff, shown below›` : value;
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item, i) => withoutPatches(item, patches, `${pointer}/${i}`));
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[key] = withoutPatches(item, patches, `${pointer}/${escapePointer(key)}`);
  return out;
}

export function OutputView({ value }: { value: unknown }) {
  const [layout, choose] = useLayout();
  if (value === undefined) return <pre class="code output">—</pre>;
  const patches: FoundPatch[] = [];
  findPatches(value, '', 0, patches);
  if (patches.length === 0) return <pre class="code output">{JSON.stringify(value, null, 2)}</pre>;
  return (
    <div class="output">
      <pre class="code output">{JSON.stringify(withoutPatches(value, new Set(patches.map((p) => p.pointer))), null, 2)}</pre>
      {patches.map((p) => (
        <section key={p.pointer} class="output-patch" data-pointer={p.pointer} aria-label={`Diff at ${p.pointer || '/'}`}>
          <div class="diff-bar">
            <span class="diff-stats">
              <code>{p.pointer || '/'}</code>
              <span class="added"> +{p.added}</span>
              <span class="removed"> −{p.removed}</span>
            </span>
            <LayoutToggle layout={layout} onChoose={choose} />
          </div>
          <Patch patch={p.patch} layout={layout} />
        </section>
      ))}
      <details class="raw">
        <summary>Output as JSON</summary>
        <pre class="code">{JSON.stringify(value, null, 2)}</pre>
      </details>
    </div>
  );
}
