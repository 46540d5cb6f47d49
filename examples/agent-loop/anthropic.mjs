// The same agent loop with the Anthropic client.
//
//   ANTHROPIC_API_KEY=... node examples/agent-loop/anthropic.mjs "Write a haiku to /poem.txt, then read it back"
//
// ANTHROPIC_BASE_URL points the client elsewhere; ANTHROPIC_MODEL picks the model (default
// DEFAULT_MODEL below); ARIUM_WORKSPACE / ARIUM_PROJECT the project (default ./workspace, demo).

import { pathToFileURL } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import { callExported, createEngine, exportTools } from 'arium';

// A current model: not in the deprecation list @anthropic-ai/sdk carries (claude-sonnet-4-5 reaches its
// end of life on 2026-11-30 there), which the SDK warns about on every request.
export const DEFAULT_MODEL = 'claude-sonnet-5';

export async function runAgent({ prompt, engine, client, model = DEFAULT_MODEL, maxSteps = 10, log = () => {} }) {
  const exported = exportTools(engine.tools(), 'anthropic');
  const messages = [{ role: 'user', content: prompt }];
  for (let step = 1; step <= maxSteps; step++) {
    const response = await client.messages.create({ model, max_tokens: 1024, tools: exported.tools, messages });
    messages.push({ role: 'assistant', content: response.content });
    const uses = response.content.filter((block) => block.type === 'tool_use');
    if (response.stop_reason !== 'tool_use' || uses.length === 0) {
      const answer = response.content
        .filter((block) => block.type === 'text')
        .map((block) => block.text)
        .join('');
      return { answer, steps: step, messages };
    }
    const results = await Promise.all(
      uses.map((use) => callExported(engine, exported, use.name, use.input, { caller: 'agent-loop', trace_id: `step-${step}` })),
    );
    messages.push({
      role: 'user',
      content: uses.map((use, i) => {
        const result = results[i];
        log(`${use.name} → ${result.ok ? 'ok' : result.error.code}`);
        return {
          type: 'tool_result',
          tool_use_id: use.id,
          is_error: !result.ok,
          content: JSON.stringify(result.ok ? result.data : { error: result.error }),
        };
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
    const client = new Anthropic(); // reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL
    const { answer, steps } = await runAgent({ prompt, engine, client, model: process.env.ANTHROPIC_MODEL, log: (line) => console.error(line) });
    console.log(answer);
    console.error(`(${steps} steps)`);
  } finally {
    await engine.close();
  }
}
