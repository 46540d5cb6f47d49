import { useCallback, useEffect, useState } from 'preact/hooks';
import { ApiError, api, describeError, type Problem } from './api';
import { events } from './store';

interface SkillArgument {
  name: string;
  description?: string;
  required: boolean;
}

interface SkillInfo {
  name: string;
  description: string;
  tools: string[];
  arguments: SkillArgument[];
  source: string;
}

/** The project's skills (GET /v1/skills): a list, and the one chosen with its instructions as written. */
export function SkillsView() {
  const [skills, setSkills] = useState<SkillInfo[] | null>(null);
  const [problems, setProblems] = useState<Problem[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [body, setBody] = useState<{ name: string; text: string } | null>(null);

  const load = useCallback(async () => {
    try {
      const answer = await api<{ skills: SkillInfo[]; problems: Problem[] }>('/v1/skills');
      setSkills(answer.skills);
      setProblems(answer.problems);
      setError(null);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) setError(describeError(e));
    }
  }, []);
  useEffect(() => {
    void load();
    return events.onRegistryChange(() => void load());
  }, []);

  const skill = skills?.find((s) => s.name === selected) ?? skills?.[0] ?? null;
  useEffect(() => {
    if (!skill) return;
    let live = true;
    api<{ body: string }>(`/v1/skills/${encodeURIComponent(skill.name)}`).then(
      (answer) => live && setBody({ name: skill.name, text: answer.body }),
      (e) => live && setBody({ name: skill.name, text: `(could not be read: ${describeError(e)})` }),
    );
    return () => {
      live = false;
    };
  }, [skill?.name, skills]);

  return (
    <div class="split">
      <nav class="side" aria-label="Skills">
        {error ? (
          <p class="error" role="alert">
            {error}
          </p>
        ) : null}
        {skills === null && !error ? <p class="muted">Loading skills…</p> : null}
        <ul class="tool-list" data-testid="skill-list">
          {(skills ?? []).map((s) => (
            <li key={s.name}>
              <button type="button" class="tool-item" aria-current={s.name === skill?.name ? 'true' : undefined} onClick={() => setSelected(s.name)}>
                <span class="tool-id">{s.name}</span>
                <span class="tool-runner">{s.tools.length} tools</span>
              </button>
            </li>
          ))}
        </ul>
        {problems.length > 0 ? (
          <section class="problems" aria-label="Skill problems" data-testid="skill-problems">
            <h3>Skill problems ({problems.length})</h3>
            <ul>
              {problems.map((p) => (
                <li key={`${p.file} ${p.at ?? ''} ${p.message}`}>
                  <code class="problem-file">{p.file}</code>
                  {p.at ? <code class="problem-at">{p.at}</code> : null}
                  {p.stale ? <span class="badge stale">last good version served</span> : null}
                  <div class="problem-message">{p.message}</div>
                </li>
              ))}
            </ul>
          </section>
        ) : null}
      </nav>
      <section class="main" aria-label="Skill" data-testid="skill-detail">
        {skill ? (
          <>
            <h2>{skill.name}</h2>
            <p>{skill.description}</p>
            <p class="muted">
              <code>{skill.source}</code> · tools: {skill.tools.length > 0 ? skill.tools.map((t) => <code key={t}>{t} </code>) : 'none'}
            </p>
            {skill.arguments.length > 0 ? (
              <ul>
                {skill.arguments.map((a) => (
                  <li key={a.name}>
                    <code>{`{{${a.name}}}`}</code>
                    {a.required ? <span class="badge">required</span> : null} {a.description ?? ''}
                  </li>
                ))}
              </ul>
            ) : null}
            <pre class="skill-body" data-testid="skill-body">
              {body?.name === skill.name ? body.text : '…'}
            </pre>
          </>
        ) : skills ? (
          <p class="muted">No skills: add skills/&lt;name&gt;/SKILL.md to the project.</p>
        ) : null}
      </section>
    </div>
  );
}
