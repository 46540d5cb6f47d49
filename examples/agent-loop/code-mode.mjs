// Code mode: the OpenAI agent loop of openai.mjs, but the model gets one tool, code.run, and writes a
// program that calls the project's tools (`await tools.fs.read({ path })`) instead of one tool call
// per round trip. The system prompt says which tools `tools` holds and what each takes.
//
//   OPENAI_API_KEY=... node examples/agent-loop/code-mode.mjs "Count the words of every file in /notes"
//
// Same environment variables as openai.mjs.
import { pathToFileURL } from 'node:url';
import { callExported, createEngine, exportTools, jsPath } from 'arium';
import OpenAI from 'openai';
import { DEFAULT_MODEL } from './openai.mjs';

/** The system prompt: how to write a program, and each tool as `tools.<path>(input)` with its description and input schema. */
export function codeModePrompt(tools) {
  const lines = tools
    .filter((tool) => tool.id !== 'code.run')
    .map((tool) => `- tools.${jsPath(tool.id).join('.')}(input): ${tool.description} Input schema: ${JSON.stringify(tool.schema)}`);
  return [
    'Paths are in a virtual filesystem rooted at /. To act, call code.run with the body of an async TypeScript function.',
    'In it, each tool below is an async function of one input object that returns the tool output; a failed call throws an Error',
    'with code, stage, retryable and message. `return` what you want to see. Do as much as you can in one program.',
    ...lines,
  ].join('\n');
}

export async function runAgent({ prompt, engine, client, model = DEFAULT_MODEL, maxSteps = 10, log = () => {} }) {
  const all = engine.tools();
  const exported = exportTools(
    all.filter((tool) => tool.id === 'code.run'),
    'openai',
  );
  const messages = [
    { role: 'system', content: codeModePrompt(all) },
    { role: 'user', content: prompt },
  ];
  for (let step = 1; step <= maxSteps; step++) {
    const completion = await client.chat.completions.create({ model, messages, tools: exported.tools });
    const message = completion.choices[0]?.message;
    if (!message) throw new Error('the model returned no choice');
    messages.push(message);
    const calls = message.tool_calls ?? [];
    if (calls.length === 0) return { answer: message.content ?? '', steps: step, messages };
    const results = await Promise.all(
      calls.map((call) =>
        callExported(engine, exported, call.function.name, call.function.arguments, { caller: 'agent-loop', trace_id: `step-${step}` }),
      ),
    );
    calls.forEach((call, i) => {
      const result = results[i];
      log(`${call.function.name} → ${result.ok ? `ok (${result.meta.calls} calls)` : result.error.code}`);
      messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(result.ok ? result.data : { error: result.error }) });
    });
  }
  throw new Error(`no answer after ${maxSteps} steps`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const prompt = process.argv.slice(2).join(' ') || 'List the files in / and count the words of each text file.';
  const engine = await createEngine({ workspace: process.env.ARIUM_WORKSPACE ?? 'workspace', project: process.env.ARIUM_PROJECT ?? 'demo' });
  try {
    const client = new OpenAI();
    const { answer, steps } = await runAgent({ prompt, engine, client, model: process.env.OPENAI_MODEL, log: (line) => console.error(line) });
    console.log(answer);
    console.error(`(${steps} steps)`);
  } finally {
    await engine.close();
  }
}
