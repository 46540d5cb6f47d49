import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Engine } from '../src/index.js';
import { checkRequestTools, type RequestBreak } from '../src/surfaces/vendor-rules.js';
import { definition, openEngine, type TempProject, TRIVIAL_JS, tempProject } from './support/project.js';

/**
 * examples/agent-loop run offline: the real `openai` and `@anthropic-ai/sdk` clients (and fetch, for
 * Gemini) talk to a scripted model on loopback that speaks each vendor's API. The script asks for
 * tools (two at once, one of which fails), checks that every result came back in the next request,
 * and answers with what the tools returned: the loop, the clients' wire format and the export's name
 * mapping are what is tested. Before it answers, the scripted model checks the request's tool list
 * against the vendor's rules (src/surfaces/vendor-rules.ts) and refuses it as the real API does, in
 * the API's own error shape: a tool list the vendor would refuse fails here too.
 */

const ROOT = join(import.meta.dirname, '..');
const run = promisify(execFile);

interface Seen {
  body: Record<string, unknown>;
}

const requests: { openai: Seen[]; anthropic: Seen[]; gemini: Seen[]; codeMode: Seen[] } = { openai: [], anthropic: [], gemini: [], codeMode: [] };

/** A request of the code-mode loop: its one tool is code.run. */
function isCodeMode(body: { tools?: Array<{ function?: { name?: string } }> }): boolean {
  return body.tools?.length === 1 && body.tools[0]?.function?.name === 'code__run';
}
/** Every request the scripted models refused, with why. */
const refused: Array<{ vendor: string; breaks: RequestBreak[] }> = [];
let server: Server;
let base: string;

/** What the scripted model does at each turn, from what the conversation holds so far. */
function openaiTurn(body: { messages: Array<{ role: string; content?: string | null; tool_call_id?: string }> }): Record<string, unknown> {
  const tools = body.messages.filter((m) => m.role === 'tool');
  // A strict function's arguments hold every property, null for those the model leaves out, as strict mode makes them.
  const declared = (body as { tools?: Array<{ function: { name: string; strict?: boolean; parameters?: { properties?: object } } }> }).tools ?? [];
  const call = (id: string, name: string, args: Record<string, unknown>) => {
    const fn = declared.find((t) => t.function.name === name)?.function;
    const full = fn?.strict ? { ...Object.fromEntries(Object.keys(fn.parameters?.properties ?? {}).map((k) => [k, null])), ...args } : args;
    return { id, type: 'function', function: { name, arguments: JSON.stringify(full) } };
  };
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

/** Code mode: one code.run call whose program does the whole task, then the answer from its result. */
function codeModeTurn(body: { messages: Array<{ role: string; content?: string | null }> }): Record<string, unknown> {
  const results = body.messages.filter((m) => m.role === 'tool');
  let message: Record<string, unknown>;
  if (results.length === 0) {
    const code = [
      "await tools.fs.write({ path: '/code-poem.txt', content: 'written by a program' });",
      "const { content } = await tools.fs.read({ path: '/code-poem.txt' });",
      "let missing = 'found';",
      "try { await tools.fs.read({ path: '/missing.txt' }); } catch (error) { missing = error.code; }",
      'return { content, missing };',
    ].join('\n');
    const call = { id: 'call_code', type: 'function', function: { name: 'code__run', arguments: JSON.stringify({ code, atomic: true }) } };
    message = { role: 'assistant', content: null, tool_calls: [call] };
  } else {
    const out = JSON.parse(results[0]?.content ?? '{}') as { content?: string; missing?: string };
    message = { role: 'assistant', content: `The program read: ${out.content} (${out.missing})` };
  }
  return {
    id: `chatcmpl-code-${results.length}`,
    object: 'chat.completion',
    created: 1,
    model: 'scripted',
    choices: [{ index: 0, message, finish_reason: message.tool_calls ? 'tool_calls' : 'stop', logprobs: null }],
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

function geminiTurn(body: { contents: Array<{ role: string; parts: Array<Record<string, unknown>> }> }): Record<string, unknown> {
  const responses = body.contents.flatMap((c) => c.parts).filter((p) => p.functionResponse) as Array<{
    functionResponse: { name: string; response: { result?: Record<string, unknown>; error?: { code: string } } };
  }>;
  const call = (name: string, args: unknown) => ({ functionCall: { name, args } });
  let parts: unknown[];
  if (responses.length === 0) parts = [call('fs__write', { path: '/gem.txt', content: 'gemini was here' }), call('system__hash', { text: 'abc' })];
  else if (responses.length === 2) parts = [call('fs__read', { path: '/gem.txt' })];
  else {
    const [, hashed, read] = responses;
    parts = [{ text: `${read?.functionResponse.response.result?.content} / ${hashed?.functionResponse.response.result?.digest}` }];
  }
  return { candidates: [{ content: { role: 'model', parts }, finishReason: 'STOP', index: 0 }], modelVersion: 'scripted' };
}

/** The vendor's answer to a request whose tool list breaks its rules, in that vendor's error shape. */
function refusal(vendor: 'openai' | 'anthropic' | 'gemini', breaks: RequestBreak[]): Record<string, unknown> {
  const first = breaks[0] as RequestBreak;
  if (vendor === 'openai') {
    return {
      error: {
        message: `Invalid schema for function: ${first.message}`,
        type: 'invalid_request_error',
        param: first.param,
        code: 'invalid_function_parameters',
      },
    };
  }
  if (vendor === 'anthropic') return { type: 'error', error: { type: 'invalid_request_error', message: `${first.param}: ${first.message}` } };
  return {
    error: { code: 400, message: breaks.map((b) => `* GenerateContentRequest.${b.param}: ${b.message}`).join('\n'), status: 'INVALID_ARGUMENT' },
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
      const vendor =
        req.url === '/v1/chat/completions'
          ? 'openai'
          : req.url === '/v1/messages'
            ? 'anthropic'
            : req.url?.startsWith('/v1beta/models/')
              ? 'gemini'
              : null;
      const breaks = vendor ? checkRequestTools(vendor, body.tools) : [];
      if (vendor && breaks.length > 0) {
        refused.push({ vendor, breaks });
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify(refusal(vendor, breaks)));
        return;
      }
      let reply: Record<string, unknown>;
      if (vendor === 'gemini') {
        requests.gemini.push({ body });
        reply = geminiTurn(body);
      } else if (req.url === '/v1/chat/completions' && isCodeMode(body)) {
        requests.codeMode.push({ body });
        reply = codeModeTurn(body);
      } else if (req.url === '/v1/chat/completions') {
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
  // No test here expects a refusal it did not assert: each one that does empties the list.
  expect(refused).toEqual([]);
});

describe('examples/agent-loop against a scripted model', () => {
  let project: TempProject;
  let engine: Engine;
  beforeAll(async () => {
    // A tool of the project's own whose schema no vendor takes as written (top-level anyOf, a nested
    // oneOf, minLength): every request lists it, so each scripted model refuses the run unless the
    // export reshaped it.
    project = tempProject({
      'tool.js': TRIVIAL_JS,
      'find.json': definition({
        id: 'notes.find',
        schema: {
          type: 'object',
          properties: {
            id: { type: 'integer' },
            title: { type: 'string', minLength: 1 },
            sort: { oneOf: [{ const: 'asc' }, { const: 'desc' }] },
          },
          anyOf: [{ required: ['id'] }, { required: ['title'] }],
          additionalProperties: false,
        },
      }),
    });
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

  it('code mode: the model writes one program that calls the tools, and reads its result', async () => {
    requests.codeMode.length = 0;
    const { runAgent } = await import('../examples/agent-loop/code-mode.mjs');
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'offline', maxRetries: 0 });
    const { answer, steps } = await runAgent({ prompt: 'write a poem and read it back', engine, client });
    expect(answer).toBe('The program read: written by a program (NOT_FOUND)');
    expect(steps).toBe(2);
    expect(engine.vfs.read('/code-poem.txt').toString()).toBe('written by a program');
    const first = (requests.codeMode[0] as Seen).body as { messages: Array<{ role: string; content: string }>; tools: unknown[] };
    expect(first.tools).toHaveLength(1);
    // The prompt names each tool by its path in a program, the project's own included.
    const system = first.messages[0]?.content ?? '';
    expect(system).toContain('tools.fs.write(input)');
    expect(system).toContain('tools.notes.find(input)');
    expect(system).not.toContain('tools.code.run');
  });

  it('anthropic: the same loop with tool_use / tool_result blocks; an unknown tool comes back as an error result', async () => {
    requests.anthropic.length = 0;
    const { runAgent } = await import('../examples/agent-loop/anthropic.mjs');
    const client = new Anthropic({ baseURL: base, apiKey: 'offline', maxRetries: 0 });
    // The SDK warns on each request for a model in its own deprecation list: the default must not be one.
    const warned: string[] = [];
    const warn = vi.spyOn(console, 'warn').mockImplementation((...parts: unknown[]) => {
      warned.push(parts.join(' '));
    });
    let answer: string;
    try {
      ({ answer } = await runAgent({ prompt: 'write a verse and read it back', engine, client }));
    } finally {
      warn.mockRestore();
    }
    expect(warned.filter((w) => /deprecated/i.test(w))).toEqual([]);
    expect((requests.anthropic[0] as Seen).body.model).toBe('claude-sonnet-5');
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

  it('openai strict: every tool the export makes strict is taken; the nulls strict mode sends are dropped again', async () => {
    requests.openai.length = 0;
    const { runAgent } = await import('../examples/agent-loop/openai.mjs');
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'offline', maxRetries: 0 });
    const { answer } = await runAgent({ prompt: 'write a poem and read it back', engine, client, strict: true });
    expect(answer).toBe('The poem says: roses are red');
    const tools = (requests.openai[0] as Seen).body.tools as Array<{ function: { name: string; strict?: boolean } }>;
    expect(tools.filter((t) => !t.function.strict).map((t) => t.function.name)).toEqual(['shell__run']);
    // fs.write got append, overwrite, … as null and ran with their defaults (overwrite: true, over the first test's poem).
    const sent = JSON.parse(
      ((requests.openai[1] as Seen).body.messages as Array<{ tool_calls?: Array<{ function: { arguments: string } }> }>)[2]?.tool_calls?.[0]?.function
        .arguments ?? '{}',
    );
    expect(sent).toMatchObject({ path: '/poem.txt', append: null, overwrite: null });
    const fed = (requests.openai[1] as Seen).body.messages as Array<{ role: string; content: string }>;
    expect(JSON.parse(fed.find((m) => m.role === 'tool')?.content ?? '')).toMatchObject({ path: '/poem.txt', created: false });
  });

  it('gemini: function declarations and functionCall / functionResponse parts; system.hash is declared without its oneOf', async () => {
    requests.gemini.length = 0;
    const { runAgent } = await import('../examples/agent-loop/gemini.mjs');
    const { answer, steps } = await runAgent({ prompt: 'write and hash', engine, apiKey: 'offline', baseUrl: base, model: 'scripted' });
    expect(answer).toBe(`gemini was here / ${createHash('sha256').update('abc').digest('hex')}`);
    expect(steps).toBe(3);
    const declarations = ((requests.gemini[0] as Seen).body.tools as Array<{ functionDeclarations: Array<{ name: string }> }>)[0]
      ?.functionDeclarations;
    expect(declarations?.map((d) => d.name)).toEqual(expect.arrayContaining(['fs__write', 'system__hash', 'shell__run']));
  });

  it('the scripted models refuse what the APIs refuse: system.hash’s own schema fails every request that lists it', async () => {
    const raw = engine.tools().filter((t) => t.id === 'fs.read' || t.id === 'system.hash');
    const anthropic = new Anthropic({ baseURL: base, apiKey: 'offline', maxRetries: 0 });
    const tools = raw.map((t) => ({ name: t.id.replace('.', '__'), description: t.description, input_schema: t.schema as { type: 'object' } }));
    await expect(
      anthropic.messages.create({ model: 'scripted', max_tokens: 10, tools, messages: [{ role: 'user', content: 'hi' }] }),
    ).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/tools\.1\.custom\.input_schema: Anthropic refuses \\?"oneOf\\?" at the top level/),
    });
    const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'offline', maxRetries: 0 });
    const functions = raw.map((t) => ({ type: 'function' as const, function: { name: t.id.replace('.', '__'), parameters: t.schema } }));
    await expect(
      openai.chat.completions.create({ model: 'scripted', tools: functions, messages: [{ role: 'user', content: 'hi' }] }),
    ).rejects.toMatchObject({
      status: 400,
      param: 'tools[1].function.parameters',
      message: expect.stringContaining('OpenAI refuses "oneOf" at the top level'),
    });
    expect(refused.map((r) => r.vendor)).toEqual(['anthropic', 'openai']);
    refused.length = 0;
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
