import type { Ref } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { describeError, type Problem, type ProviderInfo, type RunEnvelope, runTool, type ToolInfo } from './api';
import { fieldOf, formCanExpress, formPointers, initialValue, SchemaForm, type Violations } from './schema-form';
import { ValueView } from './value-view';

export function ToolsView({
  tools,
  problems,
  providers = [],
  error,
}: {
  tools: ToolInfo[] | null;
  problems: Problem[];
  providers?: ProviderInfo[];
  error: string | null;
}) {
  const [selected, setSelected] = useState<string | null>(null);
  const tool = tools?.find((t) => t.id === selected) ?? tools?.[0] ?? null;
  // A schema a model API cannot take is no load problem: the tool runs, and its view says which API.
  const load = problems.filter((p) => p.vendor === undefined);
  const unpublished = problems.filter((p) => p.vendor !== undefined);

  return (
    <div class="split">
      <nav class="side" aria-label="Tools">
        {error ? (
          <p class="error" role="alert">
            {error}
          </p>
        ) : null}
        {tools === null && !error ? <p class="muted">Loading tools…</p> : null}
        <ul class="tool-list" data-testid="tool-list">
          {(tools ?? []).map((t) => (
            <li key={t.id}>
              <button type="button" class="tool-item" aria-current={t.id === tool?.id ? 'true' : undefined} onClick={() => setSelected(t.id)}>
                <span class="tool-id">{t.id}</span>
                <span class="tool-runner">{t.runner}</span>
              </button>
            </li>
          ))}
        </ul>
        {load.length > 0 ? <Problems problems={load} /> : null}
      </nav>
      <section class="main" aria-label="Tool">
        {tool ? (
          <ToolDetail
            key={tool.id}
            tool={tool}
            unpublished={unpublished.filter((p) => p.id === tool.id)}
            provider={tool.runner === 'provider' ? providers.find((p) => tool.id.startsWith(`${p.name}.`)) : undefined}
          />
        ) : tools ? (
          <p class="muted">No tools.</p>
        ) : null}
      </section>
    </div>
  );
}

function Problems({ problems }: { problems: Problem[] }) {
  return (
    <section class="problems" aria-label="Load problems" data-testid="problems">
      <h3>Load problems ({problems.length})</h3>
      <ul>
        {problems.map((p) => (
          <li key={`${p.file} ${p.at ?? ''} ${p.message}`}>
            <code class="problem-file">{p.file}</code>
            {p.at ? <code class="problem-at">{p.at}</code> : null}
            {p.id ? <span class="muted"> ({p.id})</span> : null}
            {p.stale ? <span class="badge stale">last good version served</span> : null}
            <div class="problem-message">{p.message}</div>
          </li>
        ))}
      </ul>
    </section>
  );
}

function ToolDetail({ tool, unpublished, provider }: { tool: ToolInfo; unpublished: Problem[]; provider?: ProviderInfo | undefined }) {
  const expressible = formCanExpress(tool.schema);
  const [value, setValue] = useState<Record<string, unknown>>(() => initialValue(tool.schema));
  const [jsonMode, setJsonMode] = useState(!expressible);
  const [jsonText, setJsonText] = useState(() => JSON.stringify(initialValue(tool.schema), null, 2));
  const [jsonError, setJsonError] = useState<string | null>(null);
  const [running, setRunning] = useState(false);
  const [result, setResult] = useState<RunEnvelope | null>(null);
  const [failure, setFailure] = useState<string | null>(null);
  const known = useMemo(() => formPointers(tool.schema), [tool.schema]);
  const formRef = useRef<HTMLFormElement>(null);
  const outcomeRef = useRef<HTMLElement>(null);
  // Counts finished calls, so that the same outcome twice is still brought into view.
  const [finished, setFinished] = useState(0);

  useEffect(() => {
    setResult(null);
  }, [tool.id]);

  // A long form leaves the outcome below the fold: bring it into view and move the focus to it, so a
  // keyboard or screen reader user lands on it. Violations shown on fields take the focus to the first one.
  useEffect(() => {
    if (finished === 0) return;
    const field = formRef.current?.querySelector<HTMLElement>('.field-errors:not(.form-errors)')?.closest('.field');
    const target = field?.querySelector<HTMLElement>('input, textarea, select') ?? outcomeRef.current;
    if (!target) return;
    target.scrollIntoView({ block: 'nearest' });
    target.focus({ preventScroll: true });
  }, [finished]);

  const violations: Violations = new Map();
  const top: string[] = [];
  const list = result?.ok === false ? result.error?.details?.violations : undefined;
  if (Array.isArray(list)) {
    for (const v of list as Array<{ pointer?: string; message?: string; params?: Record<string, unknown> }>) {
      const pointer = typeof v.pointer === 'string' ? v.pointer : '';
      const message = String(v.message ?? 'invalid');
      const field = jsonMode ? '' : fieldOf(pointer, known);
      const text = field === pointer ? message : `${pointer || '/'}: ${message}`;
      if (field === '') top.push(pointer ? `${pointer}: ${message}` : message);
      else violations.set(field, [...(violations.get(field) ?? []), text]);
    }
  }

  const toggleJson = () => {
    if (jsonMode) {
      try {
        const parsed = JSON.parse(jsonText);
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('the input must be a JSON object');
        setValue(parsed);
        setJsonError(null);
        setJsonMode(false);
      } catch (e) {
        setJsonError((e as Error).message);
      }
    } else {
      setJsonText(JSON.stringify(value, null, 2));
      setJsonError(null);
      setJsonMode(true);
    }
  };

  const run = async (e: Event) => {
    e.preventDefault();
    let input: unknown = value;
    if (jsonMode) {
      try {
        input = JSON.parse(jsonText);
      } catch (problem) {
        setJsonError((problem as Error).message);
        return;
      }
    }
    setRunning(true);
    setFailure(null);
    try {
      setResult(await runTool(tool.id, input));
    } catch (problem) {
      setResult(null);
      setFailure(describeError(problem));
    } finally {
      setRunning(false);
      setFinished((n) => n + 1);
    }
  };

  return (
    <article class="tool" data-tool={tool.id}>
      <header class="tool-head">
        <h2>{tool.name || tool.id}</h2>
        <code class="tool-id">{tool.id}</code>
      </header>
      {tool.description ? <p class="description">{tool.description}</p> : null}
      {unpublished.length > 0 ? (
        <section class="problems" aria-label="Model APIs that cannot take this tool" data-testid="schema-problems">
          <h3>Not offered to some model APIs</h3>
          <ul>
            {unpublished.map((p) => (
              <li key={`${p.vendor} ${p.at ?? ''} ${p.message}`}>
                <span class="badge">{p.vendor}</span>
                {p.at ? <code class="problem-at">{p.at}</code> : null}
                <div class="problem-message">{p.message}</div>
              </li>
            ))}
          </ul>
        </section>
      ) : null}
      <dl class="facts">
        <dt>Runner</dt>
        <dd>{tool.runner}</dd>
        {provider ? (
          <>
            <dt>Provider</dt>
            <dd data-testid="provider">
              {provider.name} ({provider.kind}): <span class={`badge provider-${provider.state}`}>{provider.state}</span>
              {provider.restarts > 0 ? <span class="muted"> {provider.restarts} restarts</span> : null}
              {provider.error ? <div class="problem-message">{provider.error}</div> : null}
            </dd>
          </>
        ) : null}
        <dt>Permissions</dt>
        <dd>
          {tool.permissions.length === 0 ? (
            <span class="muted">none</span>
          ) : (
            tool.permissions.map((p) => (
              <code class="chip" key={p}>
                {p}
              </code>
            ))
          )}
        </dd>
        <dt>Limits</dt>
        <dd>
          {tool.limits && Object.keys(tool.limits).length > 0 ? (
            Object.entries(tool.limits).map(([k, v]) => (
              <code class="chip" key={k}>
                {k}: {String(v)}
              </code>
            ))
          ) : (
            <span class="muted">engine defaults</span>
          )}
        </dd>
      </dl>
      <details class="schema">
        <summary>Input schema</summary>
        <pre class="code">{JSON.stringify(tool.schema, null, 2)}</pre>
      </details>
      {tool.output_schema ? (
        <details class="schema">
          <summary>Output schema</summary>
          <pre class="code">{JSON.stringify(tool.output_schema, null, 2)}</pre>
        </details>
      ) : null}

      <form class="run-form" ref={formRef} onSubmit={run} aria-label={`Run ${tool.id}`} noValidate>
        <div class="form-head">
          <h3>Call</h3>
          <button
            type="button"
            class="small"
            aria-pressed={jsonMode}
            title={jsonMode ? 'Back to the form' : 'Edit the input as JSON'}
            onClick={toggleJson}
          >
            JSON
          </button>
          {tool.examples && tool.examples.length > 0 ? (
            <button
              type="button"
              class="small"
              onClick={() => {
                const example = tool.examples?.[0] as Record<string, unknown>;
                setValue(structuredClone(example));
                setJsonText(JSON.stringify(example, null, 2));
              }}
            >
              Use example
            </button>
          ) : null}
        </div>
        {top.length > 0 ? (
          <ul class="field-errors form-errors" data-pointer="">
            {top.map((m) => (
              <li key={m}>{m}</li>
            ))}
          </ul>
        ) : null}
        {jsonMode ? (
          <div class="field">
            <label for={`json-${tool.id}`}>Input (JSON)</label>
            {!expressible ? <span class="field-help">The form cannot show this schema; edit the input as JSON.</span> : null}
            <textarea
              id={`json-${tool.id}`}
              class="code"
              rows={10}
              spellcheck={false}
              value={jsonText}
              onInput={(e) => setJsonText((e.currentTarget as HTMLTextAreaElement).value)}
            />
            {jsonError ? <span class="field-help warn">{jsonError}</span> : null}
          </div>
        ) : (
          <SchemaForm schema={tool.schema} value={value} onChange={setValue} violations={violations} idPrefix={`f-${tool.id}`} />
        )}
        <div class="actions">
          <button type="submit" class="primary" disabled={running}>
            {running ? 'Running…' : 'Run'}
          </button>
        </div>
      </form>
      {failure ? (
        <p class="error" role="alert" tabIndex={-1} ref={outcomeRef as Ref<HTMLParagraphElement>}>
          {failure}
        </p>
      ) : null}
      {result ? <RunResult result={result} outcomeRef={outcomeRef} /> : null}
    </article>
  );
}

function RunResult({ result, outcomeRef }: { result: RunEnvelope; outcomeRef: Ref<HTMLElement> }) {
  const duration = result.meta?.duration_ms;
  return (
    <section
      class={`result ${result.ok ? 'ok' : 'failed'}`}
      aria-live="polite"
      aria-label={result.ok ? 'Result' : 'Error'}
      tabIndex={-1}
      ref={outcomeRef}
      data-testid="run-result"
    >
      <h3>
        {result.ok ? 'Result' : 'Error'}
        {duration !== undefined ? <span class="muted"> · {duration.toFixed(1)} ms</span> : null}
        {result.tool_run_id ? <code class="run-id">{result.tool_run_id}</code> : null}
      </h3>
      {result.ok ? (
        <div class="output">
          <ValueView value={result.output} />
        </div>
      ) : result.error ? (
        <ErrorBox error={result.error} />
      ) : null}
    </section>
  );
}

export function ErrorBox({ error }: { error: { code: string; stage: string; message: string; details?: unknown } }) {
  return (
    <div class="error-box">
      <div>
        <code class="badge error">{error.code}</code> <span class="muted">at stage</span> <code>{error.stage}</code>
      </div>
      <p class="error-message">{error.message}</p>
      {error.details ? (
        <details>
          <summary>Details</summary>
          <pre class="code">{JSON.stringify(error.details, null, 2)}</pre>
        </details>
      ) : null}
    </div>
  );
}
