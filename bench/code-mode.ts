import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callExported, createEngine, type Engine, exportTools, type ToolResult } from '../src/index.js';
import { median } from './stats.js';

/**
 * One task done two ways over workspace/demo, with a scripted model (no model API): for five notes,
 * read each and write its upper-cased text with a line count to /out — ten tool calls. Plain: the
 * model makes one tool call per round trip, each request carrying every tool definition. Code mode:
 * one round trip with one code.run program, the request carrying code.run and a prompt that lists the
 * tools. Figures: round trips, bytes of tool definitions (and prompt) and of tool results sent to the
 * model over the whole task, and the engine's wall time for the task (median of several runs).
 */
const NOTES = 5;
const RUNS = 5;

interface Tally {
  round_trips: number;
  definition_bytes: number;
  result_bytes: number;
  tool_calls: number;
}

/** What a tool result costs to send back: its JSON, as the agent loops send it. */
function resultBytes(result: ToolResult): number {
  return JSON.stringify(result.ok ? result.data : { error: result.error }).length;
}

async function plain(engine: Engine): Promise<Tally> {
  const exported = exportTools(engine.tools(), 'openai');
  const definitions = JSON.stringify(exported.tools).length;
  const tally: Tally = { round_trips: 0, definition_bytes: 0, result_bytes: 0, tool_calls: 0 };
  const ask = async (name: string, args: Record<string, unknown>) => {
    tally.round_trips++;
    tally.definition_bytes += definitions;
    tally.tool_calls++;
    const result = await callExported(engine, exported, name, args);
    if (!result.ok) throw new Error(`${name} failed: ${result.error.message}`);
    tally.result_bytes += resultBytes(result);
    return result.data as Record<string, unknown>;
  };
  for (let i = 0; i < NOTES; i++) {
    const { content } = (await ask('fs__read', { path: `/notes/${i}.md` })) as { content: string };
    const lines = content.split('\n').length;
    await ask('fs__write', { path: `/out/${i}.md`, content: `${content.toUpperCase()}\n(${lines} lines)` });
  }
  // The answer: one more request, with the whole conversation and the tools again.
  tally.round_trips++;
  tally.definition_bytes += definitions;
  return tally;
}

const PROGRAM = `
const written: string[] = [];
for (let i = 0; i < ${NOTES}; i++) {
  const { content } = await tools.fs.read({ path: '/notes/' + i + '.md' });
  const lines = content.split('\\n').length;
  await tools.fs.write({ path: '/out/' + i + '.md', content: content.toUpperCase() + '\\n(' + lines + ' lines)' });
  written.push('/out/' + i + '.md');
}
return { written };`;

/** The system prompt of examples/agent-loop/code-mode.mjs (read from the checkout: this file runs from dist/bench). */
const { codeModePrompt } = (await import(new URL('../../examples/agent-loop/code-mode.mjs', import.meta.url).href)) as {
  codeModePrompt: (tools: ReturnType<Engine['tools']>) => string;
};

async function codeMode(engine: Engine): Promise<Tally> {
  const all = engine.tools();
  const exported = exportTools(
    all.filter((tool) => tool.id === 'code.run'),
    'openai',
  );
  const definitions = JSON.stringify(exported.tools).length + codeModePrompt(all).length;
  const tally: Tally = { round_trips: 1, definition_bytes: definitions, result_bytes: 0, tool_calls: 0 };
  const result = await callExported(engine, exported, 'code__run', { code: PROGRAM, atomic: true });
  if (!result.ok) throw new Error(`code.run failed: ${result.error.message}`);
  tally.tool_calls = Number(result.meta.calls);
  tally.result_bytes = resultBytes(result);
  tally.round_trips++;
  tally.definition_bytes += definitions;
  return tally;
}

export async function benchCodeMode(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'arium-bench-code-'));
  cpSync(new URL('../../workspace/demo/', import.meta.url), join(dir, 'demo'), { recursive: true, filter: (source) => !source.includes('.arium') });
  const engine = await createEngine({ workspace: dir, project: 'demo', watch: false, persist: false });
  try {
    for (let i = 0; i < NOTES; i++) engine.vfs.write(`/notes/${i}.md`, `# Note ${i}\n${'a line of text\n'.repeat(20 + i)}`);
    const out: Record<string, unknown> = {};
    for (const [name, run] of [
      ['plain', plain],
      ['code_mode', codeMode],
    ] as const) {
      await run(engine); // warm-up: the JS sandbox, caches
      const times: number[] = [];
      let tally: Tally | null = null;
      for (let r = 0; r < RUNS; r++) {
        const t0 = performance.now();
        tally = await run(engine);
        times.push(performance.now() - t0);
      }
      out[name] = { ...tally, wall_ms_median: Number(median(times).toFixed(1)) };
    }
    return { task: `${NOTES} notes read, upper-cased and written (${NOTES * 2} tool calls), scripted model`, ...out };
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
