// An agent loop with the OpenAI client: the model's tool calls run through an Arium engine and their
// results go back to the model until it answers.
//
//   OPENAI_API_KEY=... node examples/agent-loop/openai.mjs "Write a haiku to /poem.txt, then read it back"
//
// OPENAI_BASE_URL points the client at any OpenAI-compatible endpoint; OPENAI_MODEL picks the model
// (default DEFAULT_MODEL below); ARIUM_WORKSPACE / ARIUM_PROJECT the project (default ./workspace, demo).
import { pathToFileURL } from 'node:url';
import { callExported, createEngine, exportTools } from 'arium';
import OpenAI from 'openai';

// A current small model of the openai package's model list.
export const DEFAULT_MODEL = 'gpt-5.4-mini';

export async function runAgent({ prompt, engine, client, model = DEFAULT_MODEL, strict = false, maxSteps = 10, log = () => {} }) {
  // strict: OpenAI's strict mode for every tool that can take it (the export says why the others cannot).
  const exported = exportTools(engine.tools(), 'openai', { strict });
  const messages = [
    { role: 'system', content: 'You can use tools. Paths are in a virtual filesystem rooted at /.' },
    { role: 'user', content: prompt },
  ];
  for (let step = 1; step <= maxSteps; step++) {
    const completion = await client.chat.completions.create({ model, messages, tools: exported.tools });
    const message = completion.choices[0]?.message;
    if (!message) throw new Error('the model returned no choice');
    messages.push(message);
    const calls = message.tool_calls ?? [];
    if (calls.length === 0) return { answer: message.content ?? '', steps: step, messages };
    // Tool calls of one step run at once, as a model that asks for several means them.
    const results = await Promise.all(
      calls.map((call) =>
        callExported(engine, exported, call.function.name, call.function.arguments, { caller: 'agent-loop', trace_id: `step-${step}` }),
      ),
    );
    calls.forEach((call, i) => {
      const result = results[i];
      log(`${call.function.name} → ${result.ok ? 'ok' : result.error.code}`);
      // The model reads the whole structured result: data on success, the normalized error otherwise.
      messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(result.ok ? result.data : { error: result.error }) });
    });
  }
  throw new Error(`no answer after ${maxSteps} steps`);
}

// Run as a script (not imported, as the tests do).
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const prompt = process.argv.slice(2).join(' ') || 'List the files in / and tell me what you found.';
  const engine = await createEngine({ workspace: process.env.ARIUM_WORKSPACE ?? 'workspace', project: process.env.ARIUM_PROJECT ?? 'demo' });
  try {
    const client = new OpenAI(); // reads OPENAI_API_KEY and OPENAI_BASE_URL
    const { answer, steps } = await runAgent({ prompt, engine, client, model: process.env.OPENAI_MODEL, log: (line) => console.error(line) });
    console.log(answer);
    console.error(`(${steps} steps)`);
  } finally {
    await engine.close();
  }
}
