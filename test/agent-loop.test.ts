import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/index.js';
import { openEngine, type TempProject, tempProject } from './support/project.js';

/**
 * examples/agent-loop run offline: the real `openai` and `@anthropic-ai/sdk` clients talk to a scripted
 * model on loopback that speaks each vendor's API. The script asks for tools (two at once, one of
 * which fails), checks that every result came back in the next request, and answers with what the
 * tools returned: the loop, the clients' wire format and the export's name mapping are what is tested.
 */

const ROOT = join(import.meta.dirname, '..');
const run = promisify(execFile);

interface Seen {
  body: Record<string, unknown>;
}

const requests: { openai: Seen[]; anthropic: Seen[] } = { openai: [], anthropic: [] };
let server: Server;
let base: string;

/** What the scripted model does at each turn, from what the conversation holds so far. */
function openaiTurn(body: { messages: Array<{ role: string; content?: string | null; tool_call_id?: string }> }): Record<string, unknown> {
  const tools = body.messages.filter((m) => m.role === 'tool');
  const call = (id: string, name: string, args: unknown) => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } });
  let message: Record<string, unknown>;
  if (tools.length === 0) {
    message = {
      role: 'assistant',
      content: null,
      tool_calls: [
        call('call_1', 'fs__write', { path: '/poem.txt', content: 'roses are red' }),
        call('call_2', 'fs__read', { path: '/missing.txt' }),
      ],
    };
  } else if (tools.length === 2) {
    message = { role: 'assistant', content: null, tool_calls: [call('call_3', 'fs__read', { path: '/poem.txt' })] };
  } else {
    const read = JSON.parse(tools[2]?.content ?? '{}') as { content?: string };
    message = { role: 'assistant', content: `The poem says: ${read.content}` };
  }
  const finish = message.tool_calls ? 'tool_calls' : 'stop';
  return {
    id: `chatcmpl-${tools.length}`,
    object: 'chat.completion',
    created: 1,
    model: 'scripted',
    choices: [{ index: 0, message, finish_reason: finish, logprobs: null }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
}

function anthropicTurn(body: { messages: Array<{ role: string; content: unknown }> }): Record<string, unknown> {
  const results = body.messages
    .flatMap((m) => (Array.isArray(m.content) ? m.content : []))
    .filter((b: { type?: string }) => b.type === 'tool_result') as Array<{ content: string; is_error: boolean }>;
  const use = (id: string, name: string, input: unknown) => ({ type: 'tool_use', id, name, input });
  let content: unknown[];
  let stop = 'tool_use';
  if (results.length === 0)
    content = [use('toolu_1', 'fs__write', { path: '/verse.txt', content: 'violets are blue' }), use('toolu_2', 'no__such', {})];
  else if (results.length === 2) content = [use('toolu_3', 'fs__read', { path: '/verse.txt' })];
  else {
    content = [{ type: 'text', text: `The verse says: ${(JSON.parse(results[2]?.content ?? '{}') as { content?: string }).content}` }];
    stop = 'end_turn';
  }
  return {
    id: `msg_${results.length}`,
    type: 'message',
    role: 'assistant',
    model: 'scripted',
    content,
    stop_reason: stop,
    stop_sequence: null,
    usage: { input_tokens: 1, output_tokens: 1 },
  };
}

beforeAll(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk) => {
      text += chunk;
    });
    req.on('end', () => {
      const body = JSON.parse(text || '{}');
      let reply: Record<string, unknown>;
      if (req.url === '/v1/chat/completions') {
        requests.openai.push({ body });
        reply = openaiTurn(body);
      } else if (req.url === '/v1/messages') {
        requests.anthropic.push({ body });
        reply = anthropicTurn(body);
      } else {
        res.writeHead(404).end('{}');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(reply));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('examples/agent-loop against a scripted model', () => {
  let project: TempProject;
  let engine: Engine;
  beforeAll(async () => {
    project = tempProject();
    engine = await openEngine(project);
  });
  afterAll(async () => {
    await engine.close();
    project.remove();
  });

  it('openai: runs the model’s tool calls through the engine and feeds every result back until it answers', async () => {
    requests.openai.length = 0;
    const { runAgent } = await import('../examples/agent-loop/openai.mjs');
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'offline', maxRetries: 0 });
    const { answer, steps } = await runAgent({ prompt: 'write a poem and read it back', engine, client });
    expect(answer).toBe('The poem says: roses are red');
    expect(steps).toBe(3);
    expect(engine.vfs.read('/poem.txt').toString()).toBe('roses are red');
    const [first, second] = requests.openai as [Seen, Seen];
    const tools = first.body.tools as Array<{ type: string; function: { name: string; parameters: unknown } }>;
    expect(tools.map((t) => t.function.name)).toEqual(expect.arrayContaining(['fs__read', 'fs__write']));
    // The second request carries both results: the write's data and the failed read's error.
    const fed = (second.body.messages as Array<{ role: string; tool_call_id?: string; content: string }>).filter((m) => m.role === 'tool');
    expect(fed.map((m) => m.tool_call_id)).toEqual(['call_1', 'call_2']);
    expect(JSON.parse(fed[0]?.content ?? '')).toMatchObject({ path: '/poem.txt', created: true });
    expect(JSON.parse(fed[1]?.content ?? '')).toMatchObject({ error: { code: 'NOT_FOUND', stage: 'execution' } });
  });

  it('anthropic: the same loop with tool_use / tool_result blocks; an unknown tool comes back as an error result', async () => {
    requests.anthropic.length = 0;
    const { runAgent } = await import('../examples/agent-loop/anthropic.mjs');
    const client = new Anthropic({ baseURL: base, apiKey: 'offline', maxRetries: 0 });
    const { answer } = await runAgent({ prompt: 'write a verse and read it back', engine, client });
    expect(answer).toBe('The verse says: violets are blue');
    const second = requests.anthropic[1] as Seen;
    const blocks = (second.body.messages as Array<{ role: string; content: unknown }>).at(-1)?.content as Array<{
      tool_use_id: string;
      is_error: boolean;
      content: string;
    }>;
    expect(blocks.map((b) => [b.tool_use_id, b.is_error])).toEqual([
      ['toolu_1', false],
      ['toolu_2', true],
    ]);
    expect(JSON.parse(blocks[1]?.content ?? '')).toMatchObject({ error: { code: 'UNKNOWN_TOOL' } });
  });

  it('runs as a script, pointed at the endpoint by environment variables only', async () => {
    const { stdout, stderr } = await run(
      process.execPath,
      ['--no-node-snapshot', join(ROOT, 'examples', 'agent-loop', 'openai.mjs'), 'write a poem'],
      {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? '',
          OPENAI_BASE_URL: `${base}/v1`,
          OPENAI_API_KEY: 'offline',
          ARIUM_WORKSPACE: project.workspace,
          ARIUM_PROJECT: 'p',
        },
      },
    );
    expect(stdout.trim()).toBe('The poem says: roses are red');
    expect(stderr).toContain('fs__write → ok');
    expect(stderr).toContain('fs__read → NOT_FOUND');
  });
});
