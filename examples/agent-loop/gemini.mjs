// The same agent loop against Gemini's REST API (generateContent), with fetch: no client library.
//
//   GEMINI_API_KEY=... node examples/agent-loop/gemini.mjs "Write a haiku to /poem.txt, then read it back"
//
// GEMINI_BASE_URL points it elsewhere (default https://generativelanguage.googleapis.com); GEMINI_MODEL
// picks the model (default DEFAULT_MODEL below); ARIUM_WORKSPACE / ARIUM_PROJECT the project (default
// ./workspace, demo).
import { pathToFileURL } from 'node:url';
import { callExported, createEngine, exportTools } from 'arium';

const DEFAULT_BASE = 'https://generativelanguage.googleapis.com';
// Google's Gemini API deprecations page (ai.google.dev/gemini-api/docs/deprecations) shut gemini-2.5-flash
// down on 2026-10-16 and names gemini-3.5-flash as its replacement.
export const DEFAULT_MODEL = 'gemini-3.5-flash';

export async function runAgent({ prompt, engine, apiKey, baseUrl = DEFAULT_BASE, model = DEFAULT_MODEL, maxSteps = 10, log = () => {} }) {
  const exported = exportTools(engine.tools(), 'gemini');
  const contents = [{ role: 'user', parts: [{ text: prompt }] }];
  for (let step = 1; step <= maxSteps; step++) {
    const response = await fetch(`${baseUrl}/v1beta/models/${encodeURIComponent(model)}:generateContent`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-goog-api-key': apiKey },
      body: JSON.stringify({ contents, tools: [{ functionDeclarations: exported.tools }] }),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(`Gemini answered ${response.status}: ${body?.error?.message ?? JSON.stringify(body)}`);
    const content = body.candidates?.[0]?.content;
    if (!content) throw new Error('the model returned no candidate');
    contents.push(content);
    const calls = (content.parts ?? []).filter((part) => part.functionCall).map((part) => part.functionCall);
    if (calls.length === 0) {
      const answer = (content.parts ?? []).map((part) => part.text ?? '').join('');
      return { answer, steps: step, messages: contents };
    }
    const results = await Promise.all(
      calls.map((call) => callExported(engine, exported, call.name, call.args, { caller: 'agent-loop', trace_id: `step-${step}` })),
    );
    contents.push({
      role: 'user',
      parts: calls.map((call, i) => {
        const result = results[i];
        log(`${call.name} → ${result.ok ? 'ok' : result.error.code}`);
        // A function response is a JSON object: the data under "result", or the normalized error.
        return { functionResponse: { name: call.name, response: result.ok ? { result: result.data } : { error: result.error } } };
      }),
    });
  }
  throw new Error(`no answer after ${maxSteps} steps`);
}

// Run as a script (not imported, as the tests do).
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const prompt = process.argv.slice(2).join(' ') || 'List the files in / and tell me what you found.';
  const engine = await createEngine({ workspace: process.env.ARIUM_WORKSPACE ?? 'workspace', project: process.env.ARIUM_PROJECT ?? 'demo' });
  try {
    const { answer, steps } = await runAgent({
      prompt,
      engine,
      apiKey: process.env.GEMINI_API_KEY ?? '',
      baseUrl: process.env.GEMINI_BASE_URL ?? DEFAULT_BASE,
      model: process.env.GEMINI_MODEL,
      log: (line) => console.error(line),
    });
    console.log(answer);
    console.error(`(${steps} steps)`);
  } finally {
    await engine.close();
  }
}
